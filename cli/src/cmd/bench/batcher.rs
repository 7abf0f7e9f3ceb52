//! `bench batcher`: the host's share of serving a GPU, without a GPU. The batcher (the one
//! `glm5v serve` and corpus runs use) over 448x448 photos with a stand-in tower of the real
//! GLM-5.3-Flash shapes that does no arithmetic: it reads every pixel row (as the upload to the
//! device does) and writes every output value into a fresh array (as the copy back does). What
//! is timed is then the host's work a GPU forward waits on or overlaps with: decoding, gathering
//! a batch's pixels into one buffer, the tower call's own host copies, handing each input its
//! rows. Its images/s is a ceiling for `serve --backend gpu` on this host whatever the GPU.
//! There is no upstream counterpart (upstream's server has no batcher): the figures stand alone.

use super::Args;
use anyhow::{Result, bail};
use glm5v_prep::ImageSource;
use glm5v_reference::synth::Preset;
use glm5v_reference::{
    BatchReport, Batcher, BatcherOptions, CancelToken, Embedder, Grid, JobResult, Threads, Tower,
    TowerError, VisionConfig, geometry,
};
use ndarray::{Array2, ArrayView2};
use std::path::Path;
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

/// The tower's host side only: see the module doc.
struct HostOnly {
    cfg: VisionConfig,
}

impl HostOnly {
    fn stage(&self) -> TowerError {
        TowerError::Backend {
            backend: self.describe(),
            message: "only the whole forward is measured".into(),
        }
    }
}

impl Tower for HostOnly {
    fn config(&self) -> &VisionConfig {
        &self.cfg
    }
    fn describe(&self) -> String {
        "host-only stand-in (no arithmetic)".into()
    }
    fn patch_embed(&self, _: ArrayView2<f32>) -> Result<Array2<f32>, TowerError> {
        Err(self.stage())
    }
    fn rope(&self, _: &[Grid]) -> Result<(Array2<f32>, Array2<f32>), TowerError> {
        Err(self.stage())
    }
    fn block(
        &self,
        _: usize,
        _: ArrayView2<f32>,
        _: ArrayView2<f32>,
        _: ArrayView2<f32>,
        _: &[usize],
        _: Option<&mut dyn glm5v_reference::TapSink>,
    ) -> Result<Array2<f32>, TowerError> {
        Err(self.stage())
    }
    fn post_norm(&self, _: ArrayView2<f32>) -> Result<Array2<f32>, TowerError> {
        Err(self.stage())
    }
    fn downsample(&self, _: ArrayView2<f32>) -> Result<Array2<f32>, TowerError> {
        Err(self.stage())
    }
    fn merger(
        &self,
        _: ArrayView2<f32>,
        _: Option<&mut dyn glm5v_reference::TapSink>,
    ) -> Result<Array2<f32>, TowerError> {
        Err(self.stage())
    }
    fn forward(
        &self,
        pixel_values: ArrayView2<f32>,
        grid_thw: &[Grid],
        _: Option<&mut dyn glm5v_reference::TapSink>,
    ) -> Result<Array2<f32>, TowerError> {
        let cfg = &self.cfg;
        geometry::validate_pixels(cfg, pixel_values.nrows(), pixel_values.ncols(), grid_thw)?;
        // read every pixel once (the upload's read), keeping the result so it is not elided
        let px = pixel_values.as_standard_layout();
        let bits = std::hint::black_box(px.iter().fold(0u32, |a, &v| a ^ v.to_bits()));
        // write every output value into fresh memory (the download's write)
        let g = pixel_values.nrows() / cfg.merge_unit();
        let fill = if bits == 1 { 0.5 } else { 1.0 };
        Ok(Array2::from_elem((g, cfg.out_hidden_size), fill))
    }
}

/// One turn: every input submitted at once, then waited for.
struct Turn {
    wall: Duration,
    reports: Vec<BatchReport>,
}

fn turn(
    batcher: &Batcher,
    inputs: &[ImageSource],
    tokens: usize,
    reports: &Mutex<Vec<BatchReport>>,
) -> Result<Turn> {
    reports.lock().expect("reports").clear();
    let (tx, rx) = mpsc::channel::<JobResult>();
    let start = Instant::now();
    for s in inputs {
        let tx = tx.clone();
        batcher.submit(s.clone(), tokens, CancelToken::new(), move |r| {
            let _ = tx.send(r);
        });
    }
    drop(tx);
    let mut n = 0;
    for r in rx {
        if let Err(e) = r {
            bail!("bench batcher: an input failed: {e}");
        }
        n += 1;
    }
    let wall = start.elapsed();
    if n != inputs.len() {
        bail!("bench batcher: {n} of {} inputs answered", inputs.len());
    }
    Ok(Turn {
        wall,
        reports: reports.lock().expect("reports").clone(),
    })
}

fn quantile(mut v: Vec<f64>, p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1]
}

pub fn bench_batcher(args: &Args, dir: &Path) -> Result<()> {
    if args.count == 0 {
        bail!("--count must be at least 1");
    }
    let photos = super::load::photos(&dir.join("photos"), 8, &[(448, 448)])?;
    let bytes: Vec<ImageSource> = photos
        .iter()
        .map(|p| {
            Ok(ImageSource::Bytes {
                name: p.display().to_string(),
                bytes: std::fs::read(p)?,
            })
        })
        .collect::<Result<_>>()?;
    let inputs: Vec<ImageSource> = (0..args.count)
        .map(|i| bytes[i % bytes.len()].clone())
        .collect();
    let cfg = Preset::Full.config();
    let embedder = Arc::new(Embedder::from_tower(
        Box::new(HostOnly { cfg }),
        Threads::Global,
    )?);
    let decode_threads = crate::backend::default_decode_threads("gpu");
    let options = BatcherOptions::new(args.batch_tokens, decode_threads);
    let reports = Arc::new(Mutex::new(Vec::new()));
    let sink = reports.clone();
    let batcher = Batcher::with_observer(
        vec![embedder],
        options,
        Some(Arc::new(move |b: &BatchReport| {
            sink.lock().expect("reports").push(*b)
        })),
    )?;
    let tokens = batcher.plan(&inputs[0])?.tokens;
    // a warm-up turn: the gather buffer and the allocator reach their steady state
    turn(&batcher, &inputs[..inputs.len().min(64)], tokens, &reports)?;
    let mut turns = Vec::new();
    for t in 0..args.turns.max(1) {
        let r = turn(&batcher, &inputs, tokens, &reports)?;
        eprintln!(
            "bench batcher: turn {t}: {:.1} images/s, {} batches",
            inputs.len() as f64 / r.wall.as_secs_f64(),
            r.reports.len()
        );
        turns.push(r);
    }
    let rates: Vec<f64> = turns
        .iter()
        .map(|t| inputs.len() as f64 / t.wall.as_secs_f64())
        .collect();
    let all: Vec<&BatchReport> = turns.iter().flat_map(|t| &t.reports).collect();
    let ms = |f: fn(&BatchReport) -> Duration| -> Vec<f64> {
        all.iter().map(|b| f(b).as_secs_f64() * 1e3).collect()
    };
    let gather = ms(|b| b.gather);
    let forward = ms(|b| b.forward);
    let items: Vec<f64> = all.iter().map(|b| b.items as f64).collect();
    let per_image: Vec<f64> = all
        .iter()
        .map(|b| (b.gather + b.forward).as_secs_f64() * 1e3 / b.items.max(1) as f64)
        .collect();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_default();
    println!(
        "batcher: {} 448x448 photos (8 distinct, {tokens} tokens each) a turn, --batch-tokens {}, {decode_threads} decode threads, a host-only tower of GLM-5.3-Flash shapes, {} turns; {cpu} ({} cores)",
        inputs.len(),
        args.batch_tokens,
        turns.len(),
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0)
    );
    println!(
        "| images/s median (range) | inputs a batch, median | gather ms p50 (p95) | tower host ms p50 (p95) | worker ms an image, p50 |"
    );
    println!("| --- | --- | --- | --- | --- |");
    println!(
        "| {:.1} ({:.1}-{:.1}) | {:.0} | {:.2} ({:.2}) | {:.2} ({:.2}) | {:.3} |",
        quantile(rates.clone(), 0.5),
        rates.iter().cloned().fold(f64::INFINITY, f64::min),
        rates.iter().cloned().fold(0.0, f64::max),
        quantile(items, 0.5),
        quantile(gather.clone(), 0.5),
        quantile(gather, 0.95),
        quantile(forward.clone(), 0.5),
        quantile(forward, 0.95),
        quantile(per_image, 0.5),
    );
    Ok(())
}
