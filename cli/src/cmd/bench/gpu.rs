//! `bench gpu`: the bf16 GPU tower (CUDA events, pixels on the device) against upstream's bf16
//! SDPA forward on CUDA, eager and under `torch.compile`, same weights and pixels, for the
//! `--cases`; then the same photos through the batcher at `--clients` (the server-like cases).

use super::{
    Args, batcher, cfg_name, device_available, flops_grids, median, python, write_checkpoint,
    write_script,
};
use anyhow::{Context, bail};
use glm5v_gpu::{GpuOptions, GpuTower, Precision as GpuPrecision};
use glm5v_reference::geometry::Grid;
use glm5v_reference::synth::{Preset, SynthSpec};
use glm5v_reference::{Tower, VisionConfig};
use ndarray::Array2;
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

/// One `bench gpu` case: `images` equal images in one packed batch.
struct GpuCase {
    name: String,
    images: usize,
    grids: Vec<Grid>,
}

impl GpuCase {
    fn patches(&self) -> usize {
        self.grids.iter().map(|g| g[0] * g[1] * g[2]).sum()
    }
}

/// Parses a --cases entry: `S`, `HxW`, `KxS` (K below one merge unit of pixels) or `KxHxW`.
fn parse_case(s: &str, cfg: &VisionConfig) -> anyhow::Result<GpuCase> {
    let unit = cfg.patch_size * cfg.spatial_merge_size;
    let nums = s
        .split('x')
        .map(|t| t.trim().parse::<usize>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| {
            anyhow::anyhow!("--cases: {s:?} is not S, HxW, KxS or KxHxW (whole numbers)")
        })?;
    let (k, h, w) = match nums[..] {
        [side] => (1, side, side),
        [k, side] if k < unit => (k, side, side),
        [h, w] => (1, h, w),
        [k, h, w] => (k, h, w),
        _ => bail!("--cases: {s:?} is not S, HxW, KxS or KxHxW"),
    };
    if k == 0 {
        bail!("--cases: {s:?} has no images");
    }
    if h == 0 || w == 0 || h % unit != 0 || w % unit != 0 {
        bail!(
            "--cases: {s:?}: the image sides {h}x{w} must be positive multiples of {unit} pixels \
             (patch_size {} x spatial_merge_size {})",
            cfg.patch_size,
            cfg.spatial_merge_size
        );
    }
    let grid = [1, h / cfg.patch_size, w / cfg.patch_size];
    Ok(GpuCase {
        name: s.trim().to_string(),
        images: k,
        grids: vec![grid; k],
    })
}

/// Deterministic normal-ish numbers (splitmix64; the sum of four uniforms, unit variance).
struct Noise(u64);

impl Noise {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }
    fn normalish(&mut self) -> f32 {
        let s: f32 = (0..4).map(|_| self.uniform()).sum();
        (s - 2.0) * 3f32.sqrt()
    }
}

/// Runs the upstream script with its stderr shown (progress, compile logs); its JSON lines.
/// A failing script is reported and yields the lines it printed before failing.
fn upstream_streaming(py: &Path, dir: &Path, args: &[String]) -> Vec<Value> {
    let out = write_script(dir).and_then(|script| {
        Command::new(py)
            .arg(&script)
            .args(args)
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .with_context(|| format!("cannot run {}", py.display()))
    });
    match out {
        Ok(o) => {
            if !o.status.success() {
                eprintln!(
                    "glm5v: upstream benchmark exited with {} (its cases missing below are n/a)",
                    o.status
                );
            }
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect()
        }
        Err(e) => {
            eprintln!("glm5v: upstream benchmark not run: {e:#}");
            Vec::new()
        }
    }
}

pub(super) fn bench_gpu(args: &Args) -> anyhow::Result<()> {
    let info = match device_available() {
        Ok(info) => info,
        Err(e) => {
            println!("bench gpu: skipped: no CUDA device ({e})");
            return Ok(());
        }
    };
    let py = python(args);
    if py.is_none() {
        eprintln!(
            "glm5v: no Python with torch and transformers (pass --python): timing our side only, \
             upstream columns n/a"
        );
    }
    // the cases are checked before anything heavy is written or loaded
    let spec = SynthSpec::new(Preset::Full, args.seed);
    let cfg = match &args.model {
        Some(m) => VisionConfig::from_path(m)?,
        None => spec.vision_config(),
    };
    let cases = args
        .cases
        .iter()
        .map(|c| parse_case(c, &cfg))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let dir = tempfile::Builder::new().prefix("glm5v-bench-").tempdir()?;
    let model = match &args.model {
        Some(m) => m.clone(),
        None => {
            let m = dir.path().join("full");
            eprintln!(
                "glm5v: writing the synthetic full checkpoint (bf16, seed {}) to {}",
                args.seed,
                m.display()
            );
            write_checkpoint(&m, &spec)?;
            m
        }
    };
    let t0 = Instant::now();
    let tower = GpuTower::load(&model, GpuOptions::new(GpuPrecision::Bf16))
        .with_context(|| format!("cannot load {} onto the GPU", model.display()))?;
    let cfg = tower.config().clone();
    eprintln!(
        "glm5v: GPU tower ready in {:.1} s on {} ({:.0} MB of bf16 weights)",
        t0.elapsed().as_secs_f64(),
        info.name,
        tower.weight_bytes() as f64 / 1e6
    );

    // ours, and the pixels upstream will get
    let mut inputs: Vec<(Array2<f32>, Vec<i64>)> = Vec::new();
    let mut ours: Vec<Result<Vec<f64>, String>> = Vec::new();
    for (k, case) in cases.iter().enumerate() {
        let n = case.patches();
        let mut noise = Noise(args.seed.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ (k as u64 + 1));
        let px = Array2::from_shape_simple_fn((n, cfg.patch_dim()), || noise.normalish());
        let warmup = if n > 20_000 { 1 } else { 3 };
        let engine = tower
            .attention_engine(&case.grids)
            .unwrap_or_else(|e| format!("? ({e})"));
        eprintln!(
            "glm5v: ours: case {} ({} image(s), {n} patches), {warmup} warm-up(s), {} timed, attention {engine}",
            case.name, case.images, args.reps
        );
        let r = tower
            .time_forward(px.view(), &case.grids, warmup, args.reps)
            .map_err(|e| e.to_string());
        if let Err(e) = &r {
            eprintln!("glm5v: ours failed on case {}: {e}", case.name);
        }
        ours.push(r);
        let grids: Vec<i64> = case.grids.iter().flatten().map(|&x| x as i64).collect();
        inputs.push((px, grids));
    }
    for line in tower.attention_log() {
        eprintln!("glm5v: cuDNN attention plan: {line}");
    }
    // the server-like cases: 448x448 photos through the batcher at --clients, on this tower
    let mut served = Vec::new();
    if !args.clients.is_empty() {
        let embedder = std::sync::Arc::new(glm5v_reference::Embedder::from_tower(
            Box::new(tower),
            glm5v_reference::Threads::Global,
        )?);
        let photos = batcher::photo_inputs(dir.path()).unwrap_or_else(|e| {
            eprintln!("glm5v: no batcher cases: {e:#}");
            Vec::new()
        });
        let options = glm5v_reference::BatcherOptions::new(
            16384,
            crate::backend::default_decode_threads("gpu"),
        );
        for &clients in args.clients.iter().filter(|_| !photos.is_empty()) {
            eprintln!("glm5v: ours: {clients} clients through the batcher");
            match batcher::closed_loop(&embedder, &photos, clients, args.count, options) {
                Ok(c) => served.push(c),
                Err(e) => eprintln!("glm5v: ours failed with {clients} clients: {e}"),
            }
        }
    } else {
        drop(tower);
    } // the device memory goes back before upstream runs

    let up = match &py {
        Some(py) => {
            let pixels = dir.path().join("pixels.safetensors");
            let views = inputs
                .iter()
                .enumerate()
                .flat_map(|(k, (px, g))| {
                    [
                        (
                            format!("pixel_values.{k}"),
                            safetensors::Dtype::F32,
                            vec![px.nrows(), px.ncols()],
                            bytemuck::cast_slice::<f32, u8>(px.as_slice().expect("standard")),
                        ),
                        (
                            format!("image_grid_thw.{k}"),
                            safetensors::Dtype::I64,
                            vec![g.len() / 3, 3],
                            bytemuck::cast_slice::<i64, u8>(g),
                        ),
                    ]
                })
                .map(|(name, dt, shape, bytes)| {
                    Ok((
                        name,
                        safetensors::tensor::TensorView::new(dt, shape, bytes)?,
                    ))
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            safetensors::serialize_to_file(views, None, &pixels)
                .with_context(|| format!("cannot write {}", pixels.display()))?;
            drop(inputs);
            eprintln!("glm5v: our side done; running upstream ({})", py.display());
            upstream_streaming(
                py,
                dir.path(),
                &[
                    "gpu".into(),
                    args.reps.to_string(),
                    model.display().to_string(),
                    pixels.display().to_string(),
                ],
            )
        }
        None => Vec::new(),
    };

    // one JSON line per case, then the table
    let fmt = |x: Option<f64>, prec: usize| match x {
        Some(v) => format!("{v:.prec$}"),
        None => "n/a".to_string(),
    };
    let mut rows = Vec::new();
    for (k, (case, r)) in cases.iter().zip(&ours).enumerate() {
        let u = up
            .iter()
            .find(|v| v["what"] == "gpu" && v["index"].as_u64() == Some(k as u64))
            .cloned()
            .unwrap_or(Value::Null);
        let eager = u["eager_median_ms"].as_f64();
        let compiled = u["compiled_median_ms"].as_f64();
        let flop = flops_grids(&cfg, &case.grids);
        let (ms, min_ms) = match r {
            Ok(t) => (Some(median(t.clone())), t.iter().copied().reduce(f64::min)),
            Err(_) => (None, None),
        };
        let tflops = ms.map(|m| flop / (m / 1e3) / 1e12);
        let over = |x: Option<f64>| x.zip(ms).map(|(a, b)| a / b);
        println!(
            "{}",
            json!({
                "what": "gpu",
                "case": case.name,
                "images": case.images,
                "grid": case.grids[0],
                "patches": case.patches(),
                "flop": flop,
                "precision": "bf16",
                "device": info.name,
                "reps": args.reps,
                "ours_ms": ms,
                "ours_min_ms": min_ms,
                "ours_error": r.as_ref().err(),
                "upstream_eager_ms": eager,
                "upstream_compiled_ms": compiled,
                "upstream_eager_error": u.get("eager_error"),
                "upstream_compiled_error": u.get("compiled_error"),
                "eager_over_ours": over(eager),
                "compiled_over_ours": over(compiled),
                "ours_tflops": tflops,
            })
        );
        rows.push(format!(
            "{:<12} {:>7} {:>9} {:>10} {:>11} {:>13} {:>11} {:>14} {:>8}",
            case.name,
            case.images,
            case.patches(),
            fmt(ms, 2),
            fmt(eager, 2),
            fmt(compiled, 2),
            fmt(over(eager), 2),
            fmt(over(compiled), 2),
            fmt(tflops, 1)
        ));
    }
    println!(
        "\ngpu tower, bf16, {} on {}; CUDA events, median of {} timed forwards per case\n\
         upstream: transformers Glm5NextVisionModel, bf16, sdpa, eager and torch.compile{}\n",
        cfg_name(&cfg),
        info.name,
        args.reps,
        if py.is_none() {
            " (not run: no Python)"
        } else {
            ""
        }
    );
    println!(
        "{:<12} {:>7} {:>9} {:>10} {:>11} {:>13} {:>11} {:>14} {:>8}",
        "case",
        "images",
        "patches",
        "ours ms",
        "eager ms",
        "compiled ms",
        "eager/ours",
        "compiled/ours",
        "TFLOP/s"
    );
    for r in rows {
        println!("{r}");
    }
    println!("\nratios = upstream / ours (higher is faster); TFLOP/s = ours");
    if !served.is_empty() {
        // the tower's own rate on a packed batch of 448x448 images, when a case measured one
        let packed = cases.iter().zip(&ours).find_map(|(c, r)| {
            let all448 = c.images > 1 && c.grids.iter().all(|g| *g == [1, 32, 32]);
            match r {
                Ok(t) if all448 => Some(c.images as f64 / (median(t.clone()) / 1e3)),
                _ => None,
            }
        });
        println!(
            "\nthrough the batcher (as `serve` and corpus runs use it): {} 448x448 photos (8 distinct) a case, closed loop, --batch-tokens 16384; of packed = images/s over the tower's own on the packed 448x448 case{}\n",
            args.count,
            if packed.is_none() { " (not run)" } else { "" }
        );
        batcher::print_cases(&served, packed);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full() -> VisionConfig {
        Preset::Full.config()
    }

    #[test]
    fn default_cases_have_the_documented_grids() {
        let cfg = full();
        let want: [(&str, usize, Grid, usize); 4] = [
            ("1008", 1, [1, 72, 72], 5184),
            ("16x448", 16, [1, 32, 32], 16384),
            ("112", 1, [1, 8, 8], 64),
            ("2016x3024", 1, [1, 144, 216], 31104),
        ];
        for (name, images, grid, patches) in want {
            let c = parse_case(name, &cfg).unwrap();
            assert_eq!(
                (c.images, c.grids[0], c.patches()),
                (images, grid, patches),
                "{name}"
            );
            assert!(c.grids.iter().all(|g| *g == grid));
        }
        let c = parse_case("30x56x84", &cfg).unwrap();
        assert_eq!((c.images, c.grids[0]), (30, [1, 4, 6]));
    }

    #[test]
    fn bad_cases_are_errors() {
        let cfg = full();
        for bad in ["", "0", "100", "0x448", "16x450", "1x2x3x4", "abc", "28x-1"] {
            assert!(parse_case(bad, &cfg).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn noise_is_deterministic_and_roughly_standard() {
        let (mut a, mut b) = (Noise(7), Noise(7));
        let xs: Vec<f32> = (0..100_000).map(|_| a.normalish()).collect();
        assert!(xs.iter().all(|&x| x == b.normalish()));
        let mean = xs.iter().map(|&x| x as f64).sum::<f64>() / xs.len() as f64;
        let var = xs.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / xs.len() as f64;
        assert!(
            mean.abs() < 0.02 && (var - 1.0).abs() < 0.03,
            "{mean} {var}"
        );
        assert_ne!(Noise(8).normalish(), Noise(7).normalish());
    }
}
