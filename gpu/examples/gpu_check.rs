//! Correctness and timing of the GPU tower on a CUDA machine (docs/GPU.md):
//!
//! ```text
//! gpu_check [--tiny DIR] [--full DIR [--synth-seed N] [--full-taps FILE]] [--bench] [--largest] [--seed N]
//!           [--bf16-only] [--no-check] [--cases 1008,16x448,112,2016x3024] [--iters WARM,N] [--ptx FILE]
//!           [--packings]
//! ```
//!
//! - `--tiny DIR`: a checkpoint whose `taps.safetensors` holds upstream's taps and inputs
//!   (reference/tests/data/tiny): GPU f32 / bf16 and the CPU reference against upstream, per tap.
//! - `--full DIR`: a full-geometry checkpoint (written there first with the reference crate's synth
//!   when DIR has no config.json): per-tap relative L2 of GPU f32 / bf16 against the CPU reference
//!   on a 28x28 grid (and against upstream's taps of that synthetic checkpoint with
//!   `--full-taps`, e.g. fixtures/tower/full/taps.safetensors for synth seed 5), then the final embeddings of a 1008x1008 image (72x72 grid).
//! - `--bench`: CUDA-event timings (3 warm-ups, median of 10) of one 72x72 image and 16 32x32
//!   images in bf16 (and f32); `--largest` adds a 144x216 grid (31104 patches).
//! - `--no-check`: with `--full`, skip the correctness checks (timing only).
//! - `--packings`: with `--full`, batch invariance at full geometry: eight images (8x8 to 72x72,
//!   three of 32x32 and two of 72x72, packed side by side too) each alone, then in six packings;
//!   every packed row must carry the image-alone bits (a
//!   fail otherwise). The first forwards run plain, the repeats replay CUDA graphs.
//! - `--bf16-only`: skip the f32 parity mode; `--cases`: time only these cases; `--iters`: warm-ups
//!   and timed runs (for a profiler: `--iters 1,1`).
//! - `--ptx FILE`: write the bf16 / head_dim 64 kernel module's PTX for compute_90 and exit (no
//!   device needed; feed it to `ptxas -v` for the register and spill report).
//!
//! Prints tables on stdout; exits non-zero when a tolerance is missed.

use glm5v_gpu::{GpuOptions, GpuTower, Precision, device_available};
use glm5v_reference::synth::{Preset, SynthSpec, write_checkpoint};
use glm5v_reference::{CpuTower, Grid, TapFilter, TapMap, Tower, TowerWeights};
use ndarray::Array2;
use rand::{Rng, SeedableRng};
use std::path::PathBuf;
use std::time::Instant;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn main() {
    match run() {
        Ok(true) => {}
        Ok(false) => {
            println!("RESULT: FAIL (a tolerance was missed)");
            std::process::exit(2);
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}

fn rel_l2(a: &[f32], b: &[f32]) -> f64 {
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        num += (x as f64 - y as f64).powi(2);
        den += (y as f64).powi(2);
    }
    if a.len() != b.len() {
        return f64::NAN;
    }
    (num / den.max(1e-300)).sqrt()
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let (mut ab, mut aa, mut bb) = (0.0f64, 0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        ab += x as f64 * y as f64;
        aa += (x as f64).powi(2);
        bb += (y as f64).powi(2);
    }
    ab / (aa.sqrt() * bb.sqrt()).max(1e-300)
}

fn pixels(rng: &mut rand_chacha::ChaCha8Rng, grids: &[Grid], cols: usize) -> Array2<f32> {
    let n: usize = grids.iter().map(|g| g[0] * g[1] * g[2]).sum();
    Array2::from_shape_fn((n, cols), |_| rng.random_range(-1.79f32..2.15))
}

/// Per-tap comparison; returns the worst relative L2 (NaN counts as infinite).
fn compare(label: &str, got: &TapMap, want: &TapMap, names: &[String]) -> f64 {
    let mut worst = 0.0f64;
    let mut worst_name = String::new();
    let mut lines = Vec::new();
    for name in names {
        let (Some(g), Some(w)) = (got.get(name), want.get(name)) else {
            continue;
        };
        let e = if (g.rows, g.cols) == (w.rows, w.cols) {
            rel_l2(&g.data, &w.data)
        } else {
            f64::NAN
        };
        let e = if e.is_nan() { f64::INFINITY } else { e };
        lines.push(format!("  {label:<28} {name:<34} {e:.3e}"));
        if e > worst {
            worst = e;
            worst_name = name.clone();
        }
    }
    // print every tap of the first two blocks and the head, then a summary
    for l in &lines {
        if !l.contains("blocks.")
            || l.contains("blocks.0.")
            || l.contains("blocks.1.")
            || l.contains("blocks.23 ")
            || l.contains("blocks.12 ")
        {
            println!("{l}");
        }
    }
    let only_g: Vec<_> = got.taps.keys().filter(|k| want.get(k).is_none()).collect();
    let only_w: Vec<_> = want.taps.keys().filter(|k| got.get(k).is_none()).collect();
    println!(
        "  {label}: {} taps compared, worst {worst:.3e} at {worst_name}; only GPU: {only_g:?}; only other: {only_w:?}",
        lines.len()
    );
    worst
}

/// Each image alone against the same image in packings (see `--packings`), twice each (plain,
/// then from a graph); true when every packed row has the bits of the image alone.
fn check_packings(
    gpus: &[(Precision, GpuTower)],
    rng: &mut rand_chacha::ChaCha8Rng,
    cols: usize,
) -> Res<bool> {
    // three 32x32 and two 72x72 images: side by side they are one cuDNN call of two segments,
    // or (three) a call of two and one of one (runs cut into powers of two)
    let grids: Vec<Grid> = vec![
        [1, 8, 8],
        [1, 32, 32],
        [1, 18, 24],
        [1, 72, 72],
        [2, 8, 12],
        [1, 32, 32],
        [1, 72, 72],
        [1, 32, 32],
    ];
    let px: Vec<Array2<f32>> = grids.iter().map(|g| pixels(rng, &[*g], cols)).collect();
    let orders: [&[usize]; 6] = [
        &[0, 1, 5, 2, 3, 4],
        &[4, 3, 6, 2, 1, 0],
        &[2, 0, 4],
        &[5, 1],
        &[6, 3, 1],
        &[7, 5, 1, 0],
    ];
    let mut ok = true;
    for (p, gpu) in gpus {
        let alone: Vec<Array2<f32>> = grids
            .iter()
            .zip(&px)
            .map(|(g, x)| gpu.forward(x.view(), &[*g], None))
            .collect::<Result<_, _>>()?;
        let mut differ = 0usize;
        for order in orders {
            let gs: Vec<Grid> = order.iter().map(|&i| grids[i]).collect();
            let views: Vec<_> = order.iter().map(|&i| px[i].view()).collect();
            let x = ndarray::concatenate(ndarray::Axis(0), &views)?;
            for _ in 0..3 {
                let out = gpu.forward(x.view(), &gs, None)?;
                let mut row = 0;
                for &i in order {
                    let n = alone[i].nrows();
                    let got = out.slice(ndarray::s![row..row + n, ..]);
                    differ += got
                        .iter()
                        .zip(alone[i].iter())
                        .filter(|(a, b)| a.to_bits() != b.to_bits())
                        .count();
                    row += n;
                }
            }
        }
        println!(
            "  packings {}: {} images, {} packings x 3 forwards: {differ} values differ from the images alone{}",
            p.name(),
            grids.len(),
            orders.len(),
            if differ == 0 { " (bit-identical)" } else { "" }
        );
        ok &= differ == 0;
    }
    Ok(ok)
}

fn load_upstream(path: &std::path::Path) -> Res<(TapMap, Array2<f32>, Vec<Grid>)> {
    let bytes = std::fs::read(path)?;
    let st = safetensors::SafeTensors::deserialize(&bytes)?;
    let mut map = TapMap::new(TapFilter::all());
    let mut px = None;
    let mut grids = Vec::new();
    for (name, t) in st.tensors() {
        match name.as_str() {
            "image_grid_thw" => {
                let v: Vec<i64> = bytemuck::pod_collect_to_vec(t.data());
                grids = v
                    .chunks(3)
                    .map(|c| [c[0] as usize, c[1] as usize, c[2] as usize])
                    .collect();
            }
            _ => {
                let shape = t.shape().to_vec();
                let data: Vec<f32> = bytemuck::pod_collect_to_vec(t.data());
                if name == "pixel_values" {
                    px = Some(Array2::from_shape_vec((shape[0], shape[1]), data)?);
                } else {
                    use glm5v_reference::TapSink;
                    map.tap(&name, shape[0], shape[1], &data);
                }
            }
        }
    }
    Ok((map, px.ok_or("no pixel_values in the tap file")?, grids))
}

fn run() -> Res<bool> {
    let mut tiny: Option<PathBuf> = None;
    let mut full: Option<PathBuf> = None;
    let (mut bench, mut largest) = (false, false);
    let mut seed: u64 = rand::rng().random();
    let mut synth_seed: u64 = 5;
    let mut full_taps: Option<PathBuf> = None;
    let mut bf16_only = false;
    let mut no_check = false;
    let mut packings = false;
    let mut only: Option<Vec<String>> = None;
    let mut iters_arg: Option<(usize, usize)> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--tiny" => tiny = Some(args.next().ok_or("--tiny DIR")?.into()),
            "--full" => full = Some(args.next().ok_or("--full DIR")?.into()),
            "--bench" => bench = true,
            "--largest" => largest = true,
            "--synth-seed" => synth_seed = args.next().ok_or("--synth-seed N")?.parse()?,
            "--full-taps" => full_taps = Some(args.next().ok_or("--full-taps FILE")?.into()),
            "--seed" => seed = args.next().ok_or("--seed N")?.parse()?,
            "--bf16-only" => bf16_only = true,
            "--no-check" => no_check = true,
            "--packings" => packings = true,
            "--cases" => {
                only = Some(
                    args.next()
                        .ok_or("--cases LIST")?
                        .split(',')
                        .map(str::to_string)
                        .collect(),
                )
            }
            "--iters" => {
                let v = args.next().ok_or("--iters WARM,N")?;
                let (w, n) = v.split_once(',').ok_or("--iters WARM,N")?;
                iters_arg = Some((w.parse()?, n.parse()?));
            }
            "--ptx" => {
                let out = args.next().ok_or("--ptx FILE")?;
                let ptx = glm5v_gpu::device::compile_kernels(true, 64, "compute_90")?;
                std::fs::write(&out, ptx)?;
                println!("wrote {out}");
                return Ok(true);
            }
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    let info = device_available()?;
    println!(
        "device: {} cc {:?}, {:.1} GiB total, {:.1} GiB free; seed {seed}",
        info.name,
        info.compute_capability,
        info.total_bytes as f64 / (1u64 << 30) as f64,
        info.free_bytes as f64 / (1u64 << 30) as f64
    );
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut ok = true;

    if let Some(dir) = &tiny {
        println!(
            "\n== tiny checkpoint {} against upstream taps",
            dir.display()
        );
        let (up, px, grids) = load_upstream(&dir.join("taps.safetensors"))?;
        let w = TowerWeights::<f32>::load(dir)?;
        let names = glm5v_reference::tap_names(w.config.depth);
        let cpu = CpuTower::new(w.clone());
        let mut cpu_taps = TapMap::new(TapFilter::all());
        cpu.forward(px.view(), &grids, Some(&mut cpu_taps))?;
        compare("cpu-f32 vs upstream", &cpu_taps, &up, &names);
        for (p, tol) in [(Precision::F32, 1e-4), (Precision::Bf16, 3e-2)] {
            let t0 = Instant::now();
            let gpu = GpuTower::from_weights(&w, GpuOptions::new(p))?;
            println!(
                "  gpu {} ready in {:.2} s (kernels compiled, weights uploaded)",
                p.name(),
                t0.elapsed().as_secs_f64()
            );
            let mut g = TapMap::new(TapFilter::all());
            gpu.forward(px.view(), &grids, Some(&mut g))?;
            let w1 = compare(&format!("gpu-{} vs upstream", p.name()), &g, &up, &names);
            let w2 = compare(
                &format!("gpu-{} vs cpu-f32", p.name()),
                &g,
                &cpu_taps,
                &names,
            );
            if w1.max(w2) > tol {
                println!(
                    "  FAIL gpu-{}: worst {:.3e} > {tol:e}",
                    p.name(),
                    w1.max(w2)
                );
                ok = false;
            }
        }
    }

    if let Some(dir) = &full {
        println!("\n== full-geometry checkpoint {}", dir.display());
        if !dir.join("config.json").is_file() {
            let t0 = Instant::now();
            let spec = SynthSpec::new(Preset::Full, synth_seed);
            let r = write_checkpoint(dir, &spec)?;
            println!(
                "  wrote synthetic checkpoint ({} params) in {:.1} s",
                r.num_params,
                t0.elapsed().as_secs_f64()
            );
        }
        let t0 = Instant::now();
        let w = TowerWeights::<f32>::load(dir)?;
        println!("  loaded in {:.1} s", t0.elapsed().as_secs_f64());
        let cfg = w.config.clone();
        let names = glm5v_reference::tap_names(cfg.depth);
        let cpu = CpuTower::new(w.clone());
        let precisions: &[Precision] = if bf16_only {
            &[Precision::Bf16]
        } else {
            &[Precision::F32, Precision::Bf16]
        };
        let gpus: Vec<(Precision, GpuTower)> = precisions
            .iter()
            .map(|&p| GpuTower::from_weights(&w, GpuOptions::new(p)).map(|g| (p, g)))
            .collect::<Result<_, _>>()?;
        for (p, g) in &gpus {
            println!(
                "  gpu {}: {:.2} GB of weights on the device",
                p.name(),
                g.weight_bytes() as f64 / 1e9
            );
        }
        if packings {
            ok &= check_packings(&gpus, &mut rng, cfg.patch_dim())?;
        }
        if !no_check {
            if let Some(f) = &full_taps {
                println!("  -- against upstream taps {}", f.display());
                let (up, px, grids) = load_upstream(f)?;
                for (p, gpu) in &gpus {
                    let mut g = TapMap::new(TapFilter::all());
                    gpu.forward(px.view(), &grids, Some(&mut g))?;
                    compare(&format!("gpu-{} vs upstream", p.name()), &g, &up, &names);
                }
            }
            // per-tap, two segments (a 28x28 image and a 2-frame 8x12 video)
            let grids: Vec<Grid> = vec![[1, 28, 28], [2, 8, 12]];
            let px = pixels(&mut rng, &grids, cfg.patch_dim());
            let t0 = Instant::now();
            let mut cpu_taps = TapMap::new(TapFilter::all());
            cpu.forward(px.view(), &grids, Some(&mut cpu_taps))?;
            println!(
                "  cpu reference forward with taps: {:.1} s",
                t0.elapsed().as_secs_f64()
            );
            for (p, gpu) in &gpus {
                let mut g = TapMap::new(TapFilter::all());
                gpu.forward(px.view(), &grids, Some(&mut g))?;
                let worst = compare(
                    &format!("gpu-{} vs cpu-f32", p.name()),
                    &g,
                    &cpu_taps,
                    &names,
                );
                let fin = (g.get("merger"), cpu_taps.get("merger"));
                if let (Some(a), Some(b)) = fin {
                    println!(
                        "  gpu-{} final: rel L2 {:.3e}, cosine {:.6}",
                        p.name(),
                        rel_l2(&a.data, &b.data),
                        cosine(&a.data, &b.data)
                    );
                }
                if *p == Precision::F32 && worst > 1e-4 {
                    println!("  FAIL gpu-f32 worst tap {worst:.3e} > 1e-4");
                    ok = false;
                }
            }
            drop(cpu_taps);
            // final embeddings of one 1008x1008 image
            let grids: Vec<Grid> = vec![[1, 72, 72]];
            let px = pixels(&mut rng, &grids, cfg.patch_dim());
            let t0 = Instant::now();
            let want = cpu.forward(px.view(), &grids, None)?;
            println!(
                "  cpu reference 72x72 forward: {:.1} s",
                t0.elapsed().as_secs_f64()
            );
            for (p, gpu) in &gpus {
                let got = gpu.forward(px.view(), &grids, None)?;
                let (e, c) = (
                    rel_l2(got.as_slice().unwrap(), want.as_slice().unwrap()),
                    cosine(got.as_slice().unwrap(), want.as_slice().unwrap()),
                );
                println!(
                    "  72x72 final embeddings gpu-{} vs cpu-f32: rel L2 {e:.3e}, cosine {c:.6}",
                    p.name()
                );
                let pass = match p {
                    Precision::F32 => e <= 1e-4,
                    Precision::Bf16 => e <= 2e-2 && c >= 0.999,
                };
                if !pass {
                    println!("  FAIL gpu-{} 72x72", p.name());
                    ok = false;
                }
            }
        }
        if bench {
            println!(
                "\n== timing (CUDA events, pixels on the device, no taps; 3 warm-ups, median of 10)"
            );
            let mut cases: Vec<(&str, &str, Vec<Grid>, f64, f64)> = vec![
                (
                    "1008",
                    "1x 1008x1008 (72x72)",
                    vec![[1, 72, 72]],
                    51.5,
                    36.2,
                ),
                (
                    "16x448",
                    "16x 448x448 (32x32)",
                    vec![[1, 32, 32]; 16],
                    104.0,
                    55.2,
                ),
                ("112", "1x 112x112 (8x8)", vec![[1, 8, 8]], 38.3, 26.8),
            ];
            if largest {
                cases.push((
                    "2016x3024",
                    "1x 2016x3024 (144x216)",
                    vec![[1, 144, 216]],
                    345.0,
                    274.0,
                ));
            }
            if let Some(only) = &only {
                cases.retain(|c| only.iter().any(|o| o == c.0));
            }
            println!(
                "  {:<24} {:>6} {:>10} {:>10} {:>10} {:>12} {:>12}",
                "case", "prec", "median ms", "min ms", "max ms", "upstream eager", "compiled"
            );
            for (_, label, grids, eager, compiled) in &cases {
                let px = pixels(&mut rng, grids, cfg.patch_dim());
                for (p, gpu) in &gpus {
                    let big = grids.iter().map(|g| g[1] * g[2]).max().unwrap_or(0) > 20000;
                    let (warm, iters) = iters_arg.unwrap_or(if big { (1, 3) } else { (3, 10) });
                    let mut t = gpu.time_forward(px.view(), grids, warm, iters)?;
                    t.sort_by(|a, b| a.partial_cmp(b).unwrap());
                    println!(
                        "  {label:<24} {:>6} {:>10.2} {:>10.2} {:>10.2} {eager:>12.1} {compiled:>12.1}",
                        p.name(),
                        t[t.len() / 2],
                        t[0],
                        t[t.len() - 1]
                    );
                }
            }
            for (p, gpu) in &gpus {
                for line in gpu.attention_log() {
                    println!("  cuDNN attention plan: {line}");
                }
                let s = gpu.graph_stats();
                let mib = |b: Option<u64>| {
                    b.map_or("?".into(), |b| format!("{:.0}", b as f64 / 1048576.0))
                };
                println!(
                    "  CUDA graphs ({}): {} kept ({} tokens), {} captures, {} replays, {} evicted; graph memory {} MiB reserved, {} MiB high-water{}",
                    p.name(),
                    s.entries,
                    s.tokens,
                    s.captures,
                    s.replays,
                    s.evictions,
                    mib(s.reserved_bytes),
                    mib(s.used_high_bytes),
                    s.disabled
                        .map_or(String::new(), |d| format!("; disabled: {d}"))
                );
            }
        }
    }
    println!("RESULT: {}", if ok { "PASS" } else { "FAIL" });
    Ok(ok)
}
