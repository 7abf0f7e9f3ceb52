//! `glm5v bench prep|cpu`: our code against upstream's on the same inputs, in the same run.
//!
//! Upstream's side is `cli/scripts/bench_upstream.py` (embedded in the binary), run with the given
//! Python (a venv with the pinned torch and transformers). Without one, the command says so and
//! exits 0: a benchmark is not a test.

use crate::CmdResult;
use anyhow::{Context, bail};
use glm5v_prep::{DecodeOptions, ImageSource, PrepOptions, load_image, prep_images};
use glm5v_reference::synth::{Preset, SynthSpec, write_checkpoint};
use glm5v_reference::{EmbedOptions, Embedder, Precision, Threads, VisionConfig};
use ndarray::Array2;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const SCRIPT: &str = include_str!("../../scripts/bench_upstream.py");

/// Time our preprocessing or CPU tower against upstream's, same inputs, same run.
///
/// prep: decode + resize + patchify of a 4000x3000 JPEG and a 640x480 PNG (or the given IMAGEs)
/// against `Glm5NextImageProcessor()(images=load_image(path))`; reports the decode share.
/// cpu: full GLM-5.3-Flash geometry (synthetic weights, or --model) at grids 8x8, 32x32, 72x72
/// against upstream's f32 eager forward with the same weights and pixels; reports GFLOP/s and peak RSS.
#[derive(clap::Args)]
pub struct Args {
    /// What to measure.
    #[arg(value_parser = ["prep", "cpu"])]
    what: String,
    /// Python with torch and transformers (default: $GLM5V_VENV/bin/python, else /work/venv/bin/python).
    #[arg(long, value_name = "PYTHON")]
    python: Option<PathBuf>,
    /// Timed repetitions per case (median reported).
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// prep: images to time instead of the default two.
    #[arg(long = "image", value_name = "IMAGE")]
    images: Vec<String>,
    /// cpu: grid sides in patches.
    #[arg(long, value_delimiter = ',', default_value = "8,32,72")]
    grids: Vec<usize>,
    /// cpu: a checkpoint to use instead of `synth --preset full --seed 0`.
    #[arg(long, value_name = "DIR")]
    model: Option<PathBuf>,
}

fn python(args: &Args) -> Option<PathBuf> {
    let py = args.python.clone().unwrap_or_else(|| {
        let venv = std::env::var_os("GLM5V_VENV")
            .map(PathBuf::from)
            .unwrap_or_else(|| "/work/venv".into());
        venv.join("bin").join("python")
    });
    let ok = Command::new(&py)
        .args(["-c", "import torch, transformers"])
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then_some(py)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn time_ms<T>(reps: usize, mut f: impl FnMut() -> anyhow::Result<T>) -> anyhow::Result<f64> {
    let mut ts = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t0 = Instant::now();
        f()?;
        ts.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    Ok(median(ts))
}

/// Runs the upstream script; its JSON lines.
fn upstream(py: &Path, dir: &Path, args: &[String]) -> anyhow::Result<Vec<Value>> {
    let script = dir.join("bench_upstream.py");
    std::fs::write(&script, SCRIPT)
        .with_context(|| format!("cannot write {}", script.display()))?;
    let out = Command::new(py)
        .arg(&script)
        .args(args)
        .output()
        .with_context(|| format!("cannot run {}", py.display()))?;
    if !out.status.success() {
        bail!(
            "upstream benchmark failed: {}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect())
}

/// Peak resident memory of this process in MB, and a reset of that mark (Linux; `None` elsewhere).
fn peak_rss_mb() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: f64 = s
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

pub fn run(args: Args) -> CmdResult {
    let Some(py) = python(&args) else {
        println!(
            "bench {}: skipped: no Python with torch and transformers (pass --python, or set GLM5V_VENV to a venv \
             made as the README says)",
            args.what
        );
        return Ok(());
    };
    if args.reps == 0 {
        return Err(anyhow::anyhow!("--reps must be at least 1").into());
    }
    let dir = tempfile::Builder::new().prefix("glm5v-bench-").tempdir()?;
    match args.what.as_str() {
        "prep" => bench_prep(&args, &py, dir.path())?,
        _ => bench_cpu(&args, &py, dir.path())?,
    }
    Ok(())
}

fn bench_prep(args: &Args, py: &Path, dir: &Path) -> anyhow::Result<()> {
    let images: Vec<String> = if args.images.is_empty() {
        let script = dir.join("bench_upstream.py");
        std::fs::write(&script, SCRIPT)?;
        let o = Command::new(py)
            .arg(&script)
            .arg("images")
            .arg(dir)
            .output()?;
        if !o.status.success() {
            bail!(
                "making the bench images failed: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(str::to_string)
            .collect()
    } else {
        args.images.clone()
    };
    let opts = PrepOptions::default();
    let threads = rayon::current_num_threads();
    println!(
        "prep: {} reps per case, median; ours on {threads} rayon threads, upstream torch default threads\n",
        args.reps
    );
    let mut up_args = vec!["prep".to_string(), args.reps.to_string()];
    up_args.extend(images.iter().cloned());
    let up = upstream(py, dir, &up_args)?;
    println!(
        "{:<28} {:>10} {:>10} {:>12} {:>8} {:>14}",
        "input", "ours ms", "decode ms", "upstream ms", "ratio", "upstream dec."
    );
    for (i, img) in images.iter().enumerate() {
        let src = ImageSource::from_arg(img);
        // warm-up (page cache, lazy statics)
        prep_images(std::slice::from_ref(&src), &opts)?;
        let total = time_ms(args.reps, || {
            Ok(prep_images(std::slice::from_ref(&src), &opts)?)
        })?;
        let decode = time_ms(args.reps, || {
            Ok(load_image(&src, &DecodeOptions::default())?)
        })?;
        let u = up.get(i).cloned().unwrap_or(Value::Null);
        let um = u["median_ms"].as_f64().unwrap_or(f64::NAN);
        println!(
            "{:<28} {:>10.2} {:>10.2} {:>12.2} {:>7.2}x {:>14.2}",
            Path::new(img)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            total,
            decode,
            um,
            um / total,
            u["decode_median_ms"].as_f64().unwrap_or(f64::NAN)
        );
    }
    println!(
        "\nratio = upstream / ours (higher is faster); decode ms = our decode alone (its share of ours)"
    );
    Ok(())
}

/// Forward FLOPs of one image of `n` patches (one attention segment) through the tower.
fn flops(cfg: &VisionConfig, n: usize) -> f64 {
    let (n, d, i) = (
        n as f64,
        cfg.hidden_size as f64,
        cfg.intermediate_size as f64,
    );
    let (o, p) = (
        cfg.out_hidden_size as f64,
        cfg.projection_intermediate_size as f64,
    );
    let pd = cfg.patch_dim() as f64;
    let g = n / (cfg.spatial_merge_size * cfg.spatial_merge_size) as f64;
    let block = 2.0 * n * d * 3.0 * d
        + 4.0 * n * n * d
        + 2.0 * n * d * d
        + 2.0 * n * d * 2.0 * i
        + 2.0 * n * i * d;
    let merge = (cfg.spatial_merge_size * cfg.spatial_merge_size) as f64;
    2.0 * n * pd * d
        + cfg.depth as f64 * block
        + 2.0 * g * merge * d * o
        + 2.0 * g * o * o
        + 2.0 * g * o * 2.0 * p
        + 2.0 * g * p * o
}

fn bench_cpu(args: &Args, py: &Path, dir: &Path) -> anyhow::Result<()> {
    let model = match &args.model {
        Some(m) => m.clone(),
        None => {
            let m = dir.join("full");
            eprintln!(
                "glm5v: writing the synthetic full checkpoint (seed 0) to {}",
                m.display()
            );
            write_checkpoint(&m, &SynthSpec::new(Preset::Full, 0))?;
            m
        }
    };
    // the same pixels for both sides: a deterministic pattern in the normalised range
    let mut bufs: Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
    let mut batches = Vec::new();
    for (k, &g) in args.grids.iter().enumerate() {
        if g == 0 || g % 2 != 0 {
            bail!("--grids: {g} is not an even number of patches");
        }
        let n = g * g;
        let px = Array2::from_shape_fn((n, 1176), |(r, c)| {
            ((r * 1176 + c) as f32 * 0.618_034).sin() * 1.5
        });
        bufs.push((
            format!("pixel_values.{k}"),
            safetensors::Dtype::F32,
            vec![n, 1176],
            bytemuck::cast_slice(px.as_slice().unwrap()).to_vec(),
        ));
        let grid: [i64; 3] = [1, g as i64, g as i64];
        bufs.push((
            format!("image_grid_thw.{k}"),
            safetensors::Dtype::I64,
            vec![1, 3],
            bytemuck::cast_slice(&grid).to_vec(),
        ));
        batches.push((g, px));
    }
    let pixels = dir.join("pixels.safetensors");
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = bufs
        .iter()
        .map(|(n, d, s, b)| {
            Ok((
                n.clone(),
                safetensors::tensor::TensorView::new(*d, s.clone(), b)?,
            ))
        })
        .collect::<anyhow::Result<_>>()?;
    std::fs::write(&pixels, safetensors::serialize(views, None)?)?;

    reset_peak_rss();
    let t0 = Instant::now();
    let emb = Embedder::load(
        &model,
        EmbedOptions {
            precision: Precision::F32,
            threads: Threads::Global,
        },
    )?;
    let load_s = t0.elapsed().as_secs_f64();
    let cfg = emb.config().clone();
    let mut ours = Vec::new();
    for (g, px) in &batches {
        let grids = [[1, *g, *g]];
        emb.embed_pixels(px.view(), &grids)?; // warm-up
        let reps = if *g >= 64 {
            args.reps.min(2)
        } else {
            args.reps
        };
        let ms = time_ms(reps, || Ok(emb.embed_pixels(px.view(), &grids)?))?;
        ours.push((*g, ms, reps));
    }
    let our_rss = peak_rss_mb();
    drop(emb);
    eprintln!("glm5v: our side done (load {load_s:.1} s); running upstream");
    let up = upstream(
        py,
        dir,
        &[
            "cpu".into(),
            args.reps.min(3).to_string(),
            model.display().to_string(),
            pixels.display().to_string(),
        ],
    )?;
    let threads = rayon::current_num_threads();
    println!(
        "\ncpu tower, f32, {} ({} threads both sides), median of the timed reps\n",
        cfg_name(&cfg),
        threads
    );
    println!(
        "{:<8} {:>10} {:>13} {:>8} {:>10}",
        "grid", "ours s", "upstream s", "ratio", "GFLOP/s"
    );
    for (k, (g, ms, _)) in ours.iter().enumerate() {
        let u = up
            .iter()
            .filter(|v| v["what"] == "cpu")
            .nth(k)
            .cloned()
            .unwrap_or(Value::Null);
        let um = u["median_ms"].as_f64().unwrap_or(f64::NAN);
        println!(
            "{:<8} {:>10.3} {:>13.3} {:>7.2}x {:>10.1}",
            format!("{g}x{g}"),
            ms / 1e3,
            um / 1e3,
            um / ms,
            flops(&cfg, g * g) / (ms / 1e3) / 1e9
        );
    }
    let up_rss = up
        .iter()
        .find(|v| v["what"] == "peak_rss_mb")
        .and_then(|v| v["value"].as_f64());
    println!(
        "\npeak RSS: ours {} MB, upstream {} MB (each process: weights load + forwards)",
        our_rss.map(|x| format!("{x:.0}")).unwrap_or("?".into()),
        up_rss.map(|x| format!("{x:.0}")).unwrap_or("?".into())
    );
    println!("ratio = upstream / ours (higher is faster)");
    Ok(())
}

fn cfg_name(c: &VisionConfig) -> String {
    format!(
        "depth {}, hidden {}, heads {}, mlp {}, out {}",
        c.depth, c.hidden_size, c.num_heads, c.intermediate_size, c.out_hidden_size
    )
}
