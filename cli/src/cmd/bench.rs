//! `glm5v bench prep|cpu|gpu`: our code against upstream's on the same inputs, in the same run.
//!
//! Upstream's side is `cli/scripts/bench_upstream.py` (embedded in the binary), run with the given
//! Python (a venv with the pinned torch and transformers, else a `python3` that imports both).
//! Without one, prep and cpu say so and exit 0: a benchmark is not a test. gpu without a CUDA
//! device says so and exits 0; gpu without a Python times our side alone (upstream columns n/a).

use crate::CmdResult;
use anyhow::{Context, bail};
use glm5v_gpu::device_available;
use glm5v_prep::{DecodeOptions, ImageSource, PrepOptions, jpeg_simd, load_image, prep_images};
use glm5v_reference::VisionConfig;
use glm5v_reference::geometry::{Grid, cu_seqlens};
use glm5v_reference::synth::write_checkpoint;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

mod batcher;
mod cpu;
mod gpu;
mod load;
mod stages;
mod writer;

const SCRIPT: &str = include_str!("../../scripts/bench_upstream.py");

/// Time our preprocessing, CPU tower or GPU tower against upstream's, same inputs, same run.
///
/// prep: decode + resize + patchify of a 4000x3000 JPEG and a 640x480 PNG (or the given IMAGEs)
/// against `Glm5NextImageProcessor()(images=load_image(path))`; also times our decode alone.
/// cpu: full GLM-5.3-Flash geometry (synthetic weights, or --model) at grids 8x8, 32x32, 72x72
/// against upstream's f32 eager forward with the same weights and pixels, both processes loaded
/// and taking turns of three timed forwards (after an untimed one); reports GFLOP/s (also as a
/// share of the FMA ceiling, measured in the same run) and peak RSS.
/// gpu: the bf16 GPU tower (CUDA events, pixels on the device) against upstream's bf16 SDPA
/// forward on CUDA, eager and under `torch.compile`, same weights and pixels, for the --cases
/// (default: one 1008x1008 image, 16 448x448 images in one packed batch, one 112x112 image, one
/// 2016x3024 image); reports TFLOP/s and one JSON line per case. Skipped without a CUDA device.
/// serve: `glm5v serve` against upstream served by a stdlib ThreadingHTTPServer (processor +
/// model per request), 448x448 photos under a loopback load at --concurrency, sides taking
/// turns; then a fixed rate; with --sustain S our server alone for S s with its RSS sampled.
/// corpus: `glm5v embed DIR --out x.parquet` over --count photos of mixed sizes and formats
/// against upstream's loop (processor + model over batches of --batch, results in memory).
/// batcher: the batcher `serve` and corpus runs share, --count 448x448 photos for each of
/// --clients closed-loop clients, with a stand-in tower of the real shapes that only reads its
/// pixels and writes its output (no arithmetic: the host's share of a GPU forward and a ceiling
/// on images/s for this host), or with `--backend cpu|gpu` the real tower (--model, else the
/// synthetic full checkpoint). `bench gpu` ends with the same cases on the GPU tower.
/// writer: the corpus dataset's writing alone, --count rows of a 672x448 photo's embeddings
/// (6 MiB in f32) in f32 and bf16, each beside a plain write of the same bytes (the disk's rate),
/// into --dir.
/// serve and corpus take `--backend cpu|gpu` for the side they run on.
/// `--backend cpu|gpu` is another spelling of the cpu / gpu benchmark.
#[derive(clap::Args)]
pub struct Args {
    /// What to measure (or give --backend cpu|gpu instead).
    #[arg(value_parser = ["prep", "cpu", "gpu", "serve", "corpus", "batcher", "writer"], required_unless_present = "backend")]
    what: Option<String>,
    /// The tower benchmark to run: `--backend gpu` is `bench gpu`, `--backend cpu` is `bench cpu`.
    #[arg(long, value_parser = ["cpu", "gpu"])]
    backend: Option<String>,
    /// Python with torch and transformers (default: $GLM5V_VENV/bin/python, else
    /// /work/venv/bin/python, else `python3` when it imports torch and transformers).
    #[arg(long, value_name = "PYTHON")]
    python: Option<PathBuf>,
    /// Timed repetitions per case (median reported).
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// prep: images to time instead of the default two.
    #[arg(long = "image", value_name = "IMAGE")]
    images: Vec<String>,
    /// cpu: the arithmetic of both sides: f32 (upstream's f32 eager forward) or bf16 (our bf16
    /// mode against upstream's `model.to(torch.bfloat16)` with SDPA).
    #[arg(long, default_value = "f32", value_parser = ["f32", "bf16"])]
    precision: String,
    /// cpu: grid sides in patches.
    #[arg(long, value_delimiter = ',', default_value = "8,32,72")]
    grids: Vec<usize>,
    /// gpu: cases, comma-separated: `S` (one SxS image), `HxW` (one image H pixels high, W wide),
    /// `KxS` with K < 28 (K SxS images in one packed batch) or `KxHxW`; sides are multiples of
    /// patch_size * spatial_merge_size (28).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1008,16x448,112,2016x3024"
    )]
    cases: Vec<String>,
    /// cpu, gpu: a checkpoint to use instead of `synth --preset full --seed SEED` (bf16).
    #[arg(long, value_name = "DIR")]
    model: Option<PathBuf>,
    /// cpu, gpu: seed of the synthetic weights (without --model); gpu: of the random pixels too.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// serve: clients of the closed loop (and most requests in flight at a fixed rate).
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// serve: seconds of load per turn and side.
    #[arg(long, default_value_t = 30.0)]
    duration: f64,
    /// serve, corpus, batcher, writer: turns per side (the sides alternate).
    #[arg(long, default_value_t = 2)]
    turns: usize,
    /// serve: then our server alone for this many seconds, RSS sampled every second (0: skip).
    #[arg(long, default_value_t = 0.0)]
    sustain: f64,
    /// writer: the directory written into (its disk is what is measured; default: a temporary
    /// directory under $TMPDIR).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// corpus, batcher: photos to embed; writer: rows to write.
    #[arg(long, default_value_t = 200)]
    count: usize,
    /// corpus: images per batch of upstream's loop.
    #[arg(long, default_value_t = 8)]
    batch: usize,
    /// corpus, batcher: our --batch-tokens.
    #[arg(long, default_value_t = 2048)]
    batch_tokens: usize,
    /// batcher, gpu: closed-loop clients of each batcher case, comma-separated (each submits
    /// one 448x448 photo and waits for it before the next).
    #[arg(long, value_delimiter = ',', default_value = "1,8,32")]
    clients: Vec<usize>,
}

impl Args {
    /// The benchmark asked for: the positional `what`, else `--backend`.
    fn what(&self) -> anyhow::Result<&str> {
        match (self.what.as_deref(), self.backend.as_deref()) {
            // serve and corpus run on either backend
            (Some(w), Some(b)) if w != b && !matches!(w, "serve" | "corpus" | "batcher") => {
                bail!("`bench {w}` and `--backend {b}` disagree: give one of them")
            }
            (Some(w), _) => Ok(w),
            (None, Some(b)) => Ok(b),
            (None, None) => bail!("say what to measure: prep, cpu or gpu (or --backend cpu|gpu)"),
        }
    }
}

/// Whether `py` runs and imports torch and transformers.
fn imports_torch(py: &Path) -> bool {
    Command::new(py)
        .args(["-c", "import torch, transformers"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The Python to run upstream's side with: --python, else the venv's (when it exists), else
/// `python3`; each only when it imports torch and transformers.
fn python(args: &Args) -> Option<PathBuf> {
    if let Some(py) = &args.python {
        return imports_torch(py).then(|| py.clone());
    }
    let venv = std::env::var_os("GLM5V_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| "/work/venv".into())
        .join("bin")
        .join("python");
    if venv.exists() && imports_torch(&venv) {
        return Some(venv);
    }
    let py3 = PathBuf::from("python3");
    imports_torch(&py3).then_some(py3)
}

/// The median (NaN of none).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// (median, fastest) of `reps` timed calls, in ms. On a shared machine noise only ever slows a
/// call, so the fastest of each side is printed beside the medians.
fn time_ms<T>(reps: usize, mut f: impl FnMut() -> anyhow::Result<T>) -> anyhow::Result<(f64, f64)> {
    let mut ts = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t0 = Instant::now();
        f()?;
        ts.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    Ok(median_best(ts))
}

/// (median, fastest) of timings.
fn median_best(ts: Vec<f64>) -> (f64, f64) {
    let best = ts.iter().copied().fold(f64::INFINITY, f64::min);
    (median(ts), best)
}

/// Writes upstream's script (embedded in the binary) into `dir`; its path.
fn write_script(dir: &Path) -> anyhow::Result<PathBuf> {
    let script = dir.join("bench_upstream.py");
    std::fs::write(&script, SCRIPT)
        .with_context(|| format!("cannot write {}", script.display()))?;
    Ok(script)
}

/// Runs the upstream script; its JSON lines.
fn upstream(py: &Path, dir: &Path, args: &[String]) -> anyhow::Result<Vec<Value>> {
    let script = write_script(dir)?;
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

/// Upstream's script run in turns with our side: started with `args` + `step`, it loads, then
/// after each batch's warm-up waits for a "go" per timed forward (see the script's `step`).
struct Turns {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
    stderr: PathBuf,
    /// Every JSON line read so far.
    seen: Vec<Value>,
}

/// Timed forwards per turn of each side (`bench cpu`).
const TURN_REPS: usize = 3;

/// Forwards shorter than this get an untimed one at the start of each turn: the first forward
/// after the other side's turn runs slow (its threads were parked; the other side's may still
/// spin), by 10-50% for upstream's 8x8 here.
const TURN_WARM_MS: f64 = 2000.0;

impl Turns {
    fn start(py: &Path, dir: &Path, args: &[String]) -> anyhow::Result<Self> {
        let script = write_script(dir)?;
        let stderr = dir.join("bench_upstream.stderr");
        let err = std::fs::File::create(&stderr)
            .with_context(|| format!("cannot write {}", stderr.display()))?;
        let mut child = Command::new(py)
            .arg(&script)
            .args(args)
            .arg("step")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(err)
            .spawn()
            .with_context(|| format!("cannot run {}", py.display()))?;
        let stdin = child.stdin.take();
        let out = child.stdout.take().context("upstream's stdout")?;
        Ok(Self {
            child,
            stdin,
            lines: std::io::BufRead::lines(std::io::BufReader::new(out)),
            stderr,
            seen: Vec::new(),
        })
    }

    /// Reads upstream's lines up to the next JSON object whose "what" is `what`.
    fn wait_for(&mut self, what: &str) -> anyhow::Result<Value> {
        for line in self.lines.by_ref() {
            let Ok(v) = serde_json::from_str::<Value>(&line?) else {
                continue;
            };
            self.seen.push(v.clone());
            if v["what"] == what {
                return Ok(v);
            }
        }
        bail!("upstream benchmark failed: {}", self.last_error())
    }

    /// One upstream forward, timed (`go`) or not (`warm`); its milliseconds.
    fn step(&mut self, cmd: &str) -> anyhow::Result<f64> {
        use std::io::Write;
        let stdin = self.stdin.as_mut().context("upstream's stdin")?;
        writeln!(stdin, "{cmd}")
            .and_then(|_| stdin.flush())
            .map_err(|_| anyhow::anyhow!("upstream benchmark failed: {}", self.last_error()))?;
        let rep = self.wait_for("rep")?;
        rep["ms"].as_f64().context("upstream's rep line without ms")
    }

    /// Reads to the end; every JSON line upstream printed.
    fn finish(mut self) -> anyhow::Result<Vec<Value>> {
        drop(self.stdin.take());
        for line in self.lines.by_ref() {
            if let Ok(v) = serde_json::from_str::<Value>(&line?) {
                self.seen.push(v);
            }
        }
        let status = self.child.wait()?;
        if !status.success() {
            bail!("upstream benchmark failed: {}", self.last_error());
        }
        Ok(std::mem::take(&mut self.seen))
    }

    fn last_error(&self) -> String {
        std::fs::read_to_string(&self.stderr)
            .ok()
            .and_then(|e| {
                e.lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .map(str::to_string)
            })
            .unwrap_or_else(|| "no message".into())
    }
}

impl Drop for Turns {
    fn drop(&mut self) {
        // an error on our side mid-run: do not leave the Python process waiting on its stdin
        if self.stdin.is_some() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Milliseconds as seconds, comma-separated.
fn secs(ms: &[f64]) -> String {
    ms.iter()
        .map(|m| format!("{:.3}", m / 1e3))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Peak resident memory of this process in MB, and a reset of that mark (Linux; `None` elsewhere).
fn peak_rss_mb() -> Option<f64> {
    proc_status_mb("self", "VmHWM:")
}

/// A kB field of `/proc/PID/status` (`VmRSS:`, `VmHWM:`, ...) in MB; `None` where unreadable.
fn proc_status_mb(pid: &str, field: &str) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: f64 = s
        .lines()
        .find_map(|l| l.strip_prefix(field))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

pub fn run(args: Args) -> CmdResult {
    let what = args.what()?.to_string();
    if args.reps == 0 {
        return Err(anyhow::anyhow!("--reps must be at least 1").into());
    }
    if what == "gpu" {
        return Ok(gpu::bench_gpu(&args)?);
    }
    if what == "writer" {
        let parent = args.dir.clone().unwrap_or_else(std::env::temp_dir);
        let dir = tempfile::Builder::new()
            .prefix("glm5v-bench-")
            .tempdir_in(&parent)
            .map_err(|e| anyhow::anyhow!("--dir {}: {e}", parent.display()))?;
        writer::bench_writer(&args, dir.path())?;
        return Ok(());
    }
    if what == "batcher" {
        let dir = tempfile::Builder::new().prefix("glm5v-bench-").tempdir()?;
        batcher::bench_batcher(&args, dir.path())?;
        return Ok(());
    }
    if what == "serve" || what == "corpus" {
        // our side runs without upstream's Python too (its columns are then missing)
        let py = python(&args);
        let dir = tempfile::Builder::new().prefix("glm5v-bench-").tempdir()?;
        if what == "serve" {
            load::bench_serve(&args, py.as_deref(), dir.path())?;
        } else {
            load::bench_corpus(&args, py.as_deref(), dir.path())?;
        }
        return Ok(());
    }
    let Some(py) = python(&args) else {
        println!(
            "bench {what}: skipped: no Python with torch and transformers (pass --python, or set GLM5V_VENV to a venv \
             made as the README says)"
        );
        return Ok(());
    };
    let dir = tempfile::Builder::new().prefix("glm5v-bench-").tempdir()?;
    match what.as_str() {
        "prep" => bench_prep(&args, &py, dir.path())?,
        _ => cpu::bench_cpu(&args, &py, dir.path())?,
    }
    Ok(())
}

fn bench_prep(args: &Args, py: &Path, dir: &Path) -> anyhow::Result<()> {
    let images: Vec<String> = if args.images.is_empty() {
        let script = write_script(dir)?;
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
        "prep: {} reps per case, median; ours on {threads} rayon threads, upstream torch default threads",
        args.reps
    );
    println!(
        "our JPEG decoder: libjpeg-turbo (mozjpeg-sys) {}\n",
        if jpeg_simd() {
            "with its SIMD paths"
        } else {
            "C paths only (built without nasm: same pixels, slower; see README)"
        }
    );
    let mut up_args = vec!["prep".to_string(), args.reps.to_string()];
    up_args.extend(images.iter().cloned());
    let up = upstream(py, dir, &up_args)?;
    println!(
        "{:<28} {:>10} {:>10} {:>12} {:>8} {:>14} {:>11}",
        "input", "ours ms", "our decode", "upstream ms", "ratio", "upstream dec.", "best ratio"
    );
    for (i, img) in images.iter().enumerate() {
        let src = ImageSource::from_arg(img);
        // warm-up (page cache, lazy statics)
        prep_images(std::slice::from_ref(&src), &opts)?;
        let (total, total_best) = time_ms(args.reps, || {
            Ok(prep_images(std::slice::from_ref(&src), &opts)?)
        })?;
        let (decode, _) = time_ms(args.reps, || {
            Ok(load_image(&src, &DecodeOptions::default())?)
        })?;
        let u = up.get(i).cloned().unwrap_or(Value::Null);
        let um = u["median_ms"].as_f64().unwrap_or(f64::NAN);
        let u_best = u["min_ms"].as_f64().unwrap_or(f64::NAN);
        println!(
            "{:<28} {:>10.2} {:>10.2} {:>12.2} {:>7.2}x {:>14.2} {:>10.2}x",
            Path::new(img)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            total,
            decode,
            um,
            um / total,
            u["decode_median_ms"].as_f64().unwrap_or(f64::NAN),
            u_best / total_best
        );
    }
    println!(
        "\nratio = upstream / ours, medians (higher is faster); best ratio = the same of each side's fastest call; our decode = load_image alone (prep_images overlaps decoding with resizing, so it is not a share of ours)"
    );
    Ok(())
}

/// Forward FLOPs of one image of `n` patches (one attention segment) through the tower.
fn flops(cfg: &VisionConfig, n: usize) -> f64 {
    flops_segments(cfg, &[n])
}

/// Forward FLOPs of a packed batch whose attention segments have these lengths (patches): the
/// linear layers see every patch, attention (QK^T and PV) only pairs within a segment.
fn flops_segments(cfg: &VisionConfig, segments: &[usize]) -> f64 {
    let n = segments.iter().sum::<usize>() as f64;
    let (d, i) = (cfg.hidden_size as f64, cfg.intermediate_size as f64);
    let (o, p) = (
        cfg.out_hidden_size as f64,
        cfg.projection_intermediate_size as f64,
    );
    let pd = cfg.patch_dim() as f64;
    let g = n / (cfg.spatial_merge_size * cfg.spatial_merge_size) as f64;
    let attention: f64 = segments
        .iter()
        .map(|&s| 4.0 * (s as f64) * (s as f64) * d)
        .sum();
    let block = 2.0 * n * d * 3.0 * d
        + attention
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

/// FLOPs of one forward over `grids` (segments as the tower cuts them: one per image and per
/// frame pair).
fn flops_grids(cfg: &VisionConfig, grids: &[Grid]) -> f64 {
    let cu = cu_seqlens(grids);
    let segs: Vec<usize> = cu.windows(2).map(|w| w[1] - w[0]).collect();
    flops_segments(cfg, &segs)
}

fn cfg_name(c: &VisionConfig) -> String {
    format!(
        "depth {}, hidden {}, heads {}, mlp {}, out {}",
        c.depth, c.hidden_size, c.num_heads, c.intermediate_size, c.out_hidden_size
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use glm5v_reference::synth::Preset;

    fn full() -> VisionConfig {
        Preset::Full.config()
    }

    #[test]
    fn packed_attention_is_per_segment() {
        let cfg = full();
        // 16 separate 32x32 images cost 16 single-image forwards, not one 16384-patch segment
        let packed = flops_grids(&cfg, &[[1, 32, 32]; 16]);
        let one = flops(&cfg, 1024);
        assert!((packed / (16.0 * one) - 1.0).abs() < 1e-12);
        assert!(flops(&cfg, 16384) > packed * 1.5);
        // a video grid: one segment per temporal patch
        let video = flops_grids(&cfg, &[[3, 8, 8]]);
        assert!((video / (3.0 * flops(&cfg, 64)) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn flops_match_torch_flop_counter_on_upstream() {
        // torch.utils.flop_counter.FlopCounterMode around upstream's Glm5NextVisionModel (sdpa)
        // with the tiny config, per grid list (matmul, conv and attention FLOPs).
        let cfg = Preset::Tiny.config();
        let cases: [(&[Grid], f64); 4] = [
            (&[[1, 8, 8]], 24_772_608.0),
            (&[[1, 4, 4]; 3], 17_399_808.0),
            (&[[3, 4, 6]], 26_394_624.0),
            (&[[1, 72, 72]], 15_596_126_208.0),
        ];
        for (grids, want) in cases {
            let got = flops_grids(&cfg, grids);
            assert!(
                (got / want - 1.0).abs() < 1e-12,
                "{grids:?}: {got} vs {want}"
            );
        }
    }

    #[test]
    fn backend_is_another_spelling_of_what() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        let what = |v: &[&str]| {
            Cli::try_parse_from(std::iter::once("bench").chain(v.iter().copied()))
                .map_err(|e| e.to_string())
                .and_then(|c| c.args.what().map(str::to_string).map_err(|e| e.to_string()))
        };
        assert_eq!(what(&["gpu"]).unwrap(), "gpu");
        assert_eq!(what(&["--backend", "gpu"]).unwrap(), "gpu");
        assert_eq!(what(&["gpu", "--backend", "gpu"]).unwrap(), "gpu");
        assert_eq!(what(&["--backend", "cpu"]).unwrap(), "cpu");
        assert!(what(&["cpu", "--backend", "gpu"]).is_err());
        assert!(what(&[]).is_err());
        assert!(what(&["--backend", "prep"]).is_err());
        // the writer has no backend: naming one is a mistake, not ignored
        assert!(what(&["writer", "--backend", "gpu"]).is_err());
        assert_eq!(what(&["batcher", "--backend", "gpu"]).unwrap(), "batcher");
    }
}
