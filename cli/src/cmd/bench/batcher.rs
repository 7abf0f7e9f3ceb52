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
use std::sync::atomic::{AtomicUsize, Ordering};
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

/// One closed-loop case: `clients` callers, each submitting one input and waiting for it before
/// the next, until `count` inputs are answered.
pub(super) struct ClientCase {
    pub clients: usize,
    pub images_per_s: f64,
    pub latency_ms: Vec<f64>,
    pub reports: Vec<BatchReport>,
}

/// Runs `clients` callers over `inputs` in turn until `count` are answered, on a batcher of its
/// own over `embedder` (after an untimed warm-up of `2 * clients` inputs: graphs and plans
/// are made there).
pub(super) fn closed_loop(
    embedder: &Arc<Embedder>,
    inputs: &[ImageSource],
    clients: usize,
    count: usize,
    options: BatcherOptions,
) -> Result<ClientCase> {
    let reports = Arc::new(Mutex::new(Vec::new()));
    let sink = reports.clone();
    let batcher = Batcher::with_observer(
        vec![embedder.clone()],
        options,
        Some(Arc::new(move |b: &BatchReport| {
            sink.lock().expect("reports").push(*b)
        })),
    )?;
    let tokens = batcher.plan(&inputs[0])?.tokens;
    let run = |n: usize| -> Result<(Duration, Vec<f64>)> {
        let next = AtomicUsize::new(0);
        let start = Instant::now();
        let lat = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..clients.max(1))
                .map(|_| {
                    sc.spawn(|| -> Result<Vec<f64>> {
                        let mut lat = Vec::new();
                        loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            if i >= n {
                                return Ok(lat);
                            }
                            let (tx, rx) = mpsc::channel::<JobResult>();
                            let t = Instant::now();
                            batcher.submit(
                                inputs[i % inputs.len()].clone(),
                                tokens,
                                CancelToken::new(),
                                move |r| {
                                    let _ = tx.send(r);
                                },
                            );
                            match rx.recv() {
                                Ok(Ok(_)) => lat.push(t.elapsed().as_secs_f64() * 1e3),
                                Ok(Err(e)) => bail!("bench batcher: input {i} failed: {e}"),
                                Err(_) => bail!("bench batcher: input {i} was never answered"),
                            }
                        }
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().expect("a client thread"))
                .collect::<Result<Vec<_>>>()
        })?;
        Ok((start.elapsed(), lat.concat()))
    };
    run(2 * clients.max(1))?;
    reports.lock().expect("reports").clear();
    let (wall, latency_ms) = run(count)?;
    let reports = reports.lock().expect("reports").clone();
    Ok(ClientCase {
        clients,
        images_per_s: count as f64 / wall.as_secs_f64(),
        latency_ms,
        reports,
    })
}

fn quantile(mut v: Vec<f64>, p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1]
}

/// The cases' table (`packed`: the tower's own images/s on a packed batch, when known).
pub(super) fn print_cases(cases: &[ClientCase], packed: Option<f64>) {
    println!(
        "| clients | images/s | of packed | latency ms p50 (p95) | inputs a batch, median | gather ms p50 | forward ms p50 | worker ms an image, p50 |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    for c in cases {
        let ms = |f: fn(&BatchReport) -> Duration| -> Vec<f64> {
            c.reports.iter().map(|b| f(b).as_secs_f64() * 1e3).collect()
        };
        let per_image: Vec<f64> = c
            .reports
            .iter()
            .map(|b| (b.gather + b.forward).as_secs_f64() * 1e3 / b.items.max(1) as f64)
            .collect();
        println!(
            "| {} | {:.1} | {} | {:.1} ({:.1}) | {:.0} | {:.2} | {:.2} | {:.3} |",
            c.clients,
            c.images_per_s,
            packed
                .map(|p| format!("{:.0}%", 100.0 * c.images_per_s / p))
                .unwrap_or_else(|| "n/a".into()),
            quantile(c.latency_ms.clone(), 0.5),
            quantile(c.latency_ms.clone(), 0.95),
            quantile(c.reports.iter().map(|b| b.items as f64).collect(), 0.5),
            quantile(ms(|b| b.gather), 0.5),
            quantile(ms(|b| b.forward), 0.5),
            quantile(per_image, 0.5),
        );
    }
}

/// The 448x448 photos as bytes in memory (8 distinct).
pub(super) fn photo_inputs(dir: &Path) -> Result<Vec<ImageSource>> {
    super::load::photos(&dir.join("photos"), 8, &[(448, 448)])?
        .iter()
        .map(|p| {
            Ok(ImageSource::Bytes {
                name: p.display().to_string(),
                bytes: std::fs::read(p)?,
            })
        })
        .collect()
}

pub(super) fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_default()
}

pub fn bench_batcher(args: &Args, dir: &Path) -> Result<()> {
    if args.count == 0 {
        bail!("--count must be at least 1");
    }
    if args.clients.contains(&0) {
        bail!("--clients: each value must be at least 1");
    }
    let inputs = photo_inputs(dir)?;
    let (embedder, tower) = match args.backend.as_deref() {
        None => (
            Embedder::from_tower(
                Box::new(HostOnly {
                    cfg: Preset::Full.config(),
                }),
                Threads::Global,
            )?,
            "a host-only stand-in tower of GLM-5.3-Flash shapes (no arithmetic)".to_string(),
        ),
        Some(backend) => {
            let b = crate::backend::BackendArgs {
                model: super::load::model(args, dir)?,
                backend: backend.to_string(),
                gpus: None,
                precision: None,
                threads: None,
            };
            let e = b.load()?;
            let d = format!("{} ({})", e.tower().describe(), b.model.display());
            (e, d)
        }
    };
    let embedder = Arc::new(embedder);
    let backend = args.backend.as_deref().unwrap_or("gpu");
    let decode_threads = crate::backend::default_decode_threads(backend);
    let options = BatcherOptions::new(args.batch_tokens, decode_threads);
    let mut cases = Vec::new();
    for &clients in &args.clients {
        let c = closed_loop(&embedder, &inputs, clients, args.count, options)?;
        eprintln!(
            "bench batcher: {clients} clients: {:.1} images/s, {} batches",
            c.images_per_s,
            c.reports.len()
        );
        cases.push(c);
    }
    println!(
        "batcher: {} 448x448 photos (8 distinct) a case, closed loop, --batch-tokens {}, {decode_threads} decode threads, {tower}; {} ({} cores)",
        args.count,
        args.batch_tokens,
        cpu_name(),
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0)
    );
    print_cases(&cases, None);
    Ok(())
}
