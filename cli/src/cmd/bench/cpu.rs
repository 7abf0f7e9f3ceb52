//! `glm5v bench cpu`: the CPU tower against upstream's forward, f32 or bf16, full geometry,
//! both processes loaded and taking turns; the FMA and bf16-unit ceilings and the weight-read
//! floor measured in the same run.

use super::{
    Args, TURN_REPS, TURN_WARM_MS, Turns, cfg_name, flops, median_best, peak_rss_mb,
    reset_peak_rss, secs,
};
use anyhow::bail;
use glm5v_reference::synth::{Preset, SynthSpec, write_checkpoint};
use glm5v_reference::{EmbedOptions, Embedder, Precision, Threads, VisionConfig};
use ndarray::Array2;
use serde_json::Value;
use std::path::Path;
use std::time::Instant;

pub(super) fn bench_cpu(args: &Args, py: &Path, dir: &Path) -> anyhow::Result<()> {
    let model = match &args.model {
        Some(m) => m.clone(),
        None => {
            let m = dir.join("full");
            eprintln!(
                "glm5v: writing the synthetic full checkpoint (seed {}) to {}",
                args.seed,
                m.display()
            );
            write_checkpoint(&m, &SynthSpec::new(Preset::Full, args.seed))?;
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
    let bf16 = args.precision == "bf16";
    let emb = Embedder::load(
        &model,
        EmbedOptions {
            precision: if bf16 {
                Precision::Bf16
            } else {
                Precision::F32
            },
            threads: Threads::Global,
        },
    )?;
    eprintln!("glm5v: our side runs {}", emb.tower().describe());
    let load_s = t0.elapsed().as_secs_f64();
    let cfg = emb.config().clone();
    // the same number of timed forwards on both sides (their medians and fastest compare)
    let reps_of = |g: usize| if g >= 64 { args.reps.min(2) } else { args.reps };
    // Both processes loaded, taking turns of TURN_REPS timed forwards each (after an untimed
    // one, for short forwards): the two medians then sample the same minutes of a machine whose
    // speed drifts by tens of percent from one minute to the next, instead of ours one minute
    // and upstream's the next.
    eprintln!(
        "glm5v: our side loaded in {load_s:.1} s; upstream loading the same weights, then the two sides take turns"
    );
    let mut turns = Turns::start(
        py,
        dir,
        &[
            if bf16 { "cpu-bf16" } else { "cpu" }.into(),
            batches
                .iter()
                .map(|(g, _)| reps_of(*g).to_string())
                .collect::<Vec<_>>()
                .join(","),
            model.display().to_string(),
            pixels.display().to_string(),
        ],
    )?;
    let mut ours = Vec::new();
    for (k, (g, px)) in batches.iter().enumerate() {
        let grids = [[1, *g, *g]];
        let t0 = Instant::now();
        emb.embed_pixels(px.view(), &grids)?; // warm-up
        let warm = t0.elapsed().as_secs_f64() * 1e3 < TURN_WARM_MS;
        let ready = turns.wait_for("ready")?;
        if ready["index"] != k {
            bail!(
                "upstream benchmark out of step: ready for batch {} while we run {k}",
                ready["index"]
            );
        }
        let reps = reps_of(*g);
        let (mut ts, mut up_ts) = (Vec::with_capacity(reps), Vec::with_capacity(reps));
        while ts.len() < reps {
            let turn = TURN_REPS.min(reps - ts.len());
            if warm {
                emb.embed_pixels(px.view(), &grids)?;
            }
            for _ in 0..turn {
                let t0 = Instant::now();
                emb.embed_pixels(px.view(), &grids)?;
                ts.push(t0.elapsed().as_secs_f64() * 1e3);
            }
            if warm {
                turns.step("warm")?;
            }
            for _ in 0..turn {
                up_ts.push(turns.step("go")?);
            }
            eprintln!(
                "glm5v: {g}x{g} {}/{reps}: ours {} s, upstream {} s",
                ts.len(),
                secs(&ts[ts.len() - turn..]),
                secs(&up_ts[up_ts.len() - turn..])
            );
        }
        let (med, best) = median_best(ts);
        ours.push((*g, med, best));
    }
    let our_rss = peak_rss_mb();
    let describe = emb.tower().describe();
    drop(emb);
    let up = turns.finish()?;
    let threads = rayon::current_num_threads();
    // the ceilings, measured now on as many threads: register-only AVX-512 FMAs, and the bf16
    // unit the bf16 mode (or the f32 mode's three-part products) runs on
    let fma = glm5v_reference::kernels::peak::fma_peak_gflops(threads, 200_000_000);
    let isa = glm5v_reference::kernels::isa::isa();
    let (unit, unit_peak) = if isa >= glm5v_reference::kernels::isa::Isa::Amx {
        (
            "AMX tdpbf16ps",
            glm5v_reference::kernels::amx::amx_peak_gflops(threads, 5_000_000),
        )
    } else {
        (
            "AVX512-BF16 vdpbf16ps",
            glm5v_reference::kernels::dpbf16::dpbf16_peak_gflops(threads, 100_000_000),
        )
    };
    // the weight-read floor: a forward reads every Linear weight once (bf16 values on the bf16
    // units, also for the f32 mode's three-part products; f32 on the FMA panels)
    let read = glm5v_reference::kernels::peak::read_gbs(threads, 1 << 30);
    let kernel = describe;
    let weight_bytes = linear_params(&cfg)
        * if bf16 || kernel.contains("(amx") {
            2.0
        } else {
            4.0
        };
    let floor_ms = weight_bytes / (read * 1e9) * 1e3;
    // `of peak` against the unit that ran the products: the FMAs for the f32 panels (also the
    // bf16 mode's, where the bf16 unit is slower: Intel without AMX), the bf16 unit for bf16, a
    // third of AMX for the f32 mode's three-part products
    let on_fma = kernel.contains("(panels") || kernel.contains("(gemm");
    let peak = if on_fma {
        fma
    } else if bf16 {
        unit_peak
    } else if kernel.contains("(amx") {
        unit_peak.map(|p| p / 3.0)
    } else {
        fma
    };
    println!(
        "\ncpu tower, {}, {} ({} threads both sides), median of the timed reps (as many on each side)",
        args.precision,
        cfg_name(&cfg),
        threads
    );
    println!(
        "ours: {kernel}; upstream: {}",
        if bf16 { "bf16, SDPA" } else { "f32, eager" }
    );
    println!(
        "ceilings on {threads} threads, measured now (register-only loops): FMA {}, {unit} {} GFLOP/s; `of peak` = our GFLOP/s / the ceiling of the unit that ran the products{}\n",
        fma.map_or("-".into(), |p| format!("{p:.1}")),
        unit_peak.map_or("-".into(), |p| format!("{p:.1}")),
        if !bf16 && kernel.contains("(amx") {
            " (AMX / 3 for f32 by three products)"
        } else {
            ""
        }
    );
    println!(
        "weight-read floor: {:.2} GB of weights / {read:.1} GB/s read on {threads} threads (measured now) = {floor_ms:.0} ms a forward; `x floor` = our time / it\n",
        weight_bytes / 1e9
    );
    println!(
        "{:<8} {:>10} {:>13} {:>8} {:>10} {:>8} {:>8} {:>11}",
        "grid", "ours s", "upstream s", "ratio", "GFLOP/s", "of peak", "x floor", "best ratio"
    );
    for (k, (g, ms, best)) in ours.iter().enumerate() {
        let u = up
            .iter()
            .filter(|v| v["what"] == "cpu")
            .nth(k)
            .cloned()
            .unwrap_or(Value::Null);
        let um = u["median_ms"].as_f64().unwrap_or(f64::NAN);
        let u_best = u["min_ms"].as_f64().unwrap_or(f64::NAN);
        let gflops = flops(&cfg, g * g) / (ms / 1e3) / 1e9;
        println!(
            "{:<8} {:>10.3} {:>13.3} {:>7.2}x {:>10.1} {:>8} {:>8.1} {:>10.2}x",
            format!("{g}x{g}"),
            ms / 1e3,
            um / 1e3,
            um / ms,
            gflops,
            peak.map_or("-".into(), |p| format!("{:.0}%", 100.0 * gflops / p)),
            ms / floor_ms,
            u_best / best
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
    println!(
        "ratio = upstream / ours, medians (higher is faster); best ratio = the same of each side's fastest forward"
    );
    Ok(())
}

/// Values of the tower's `Linear` weights (the patch embedding, every block's qkv, proj and MLP,
/// the merger's downsample, projection and MLP): what one forward reads once each.
fn linear_params(cfg: &VisionConfig) -> f64 {
    let (d, i) = (cfg.hidden_size as f64, cfg.intermediate_size as f64);
    let (o, p) = (
        cfg.out_hidden_size as f64,
        cfg.projection_intermediate_size as f64,
    );
    let merge = (cfg.spatial_merge_size * cfg.spatial_merge_size) as f64;
    cfg.patch_dim() as f64 * d
        + cfg.depth as f64 * (4.0 * d * d + 3.0 * d * i)
        + merge * d * o
        + o * o
        + 3.0 * o * p
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The full geometry's Linear weights, counted from the config, equal the values of every
    /// weight of rank >= 2 that synth writes for it (the linears, the patch embedding's and the
    /// downsample's convolutions): 578.8 M, 1.16 GB as bf16.
    #[test]
    fn linear_params_of_the_full_geometry() {
        let cfg = Preset::Full.config();
        let synth_linear: usize = glm5v_reference::synth::tensor_specs(&cfg)
            .iter()
            .filter(|t| t.shape.len() >= 2)
            .map(|t| t.numel())
            .sum();
        assert_eq!(linear_params(&cfg), synth_linear as f64);
    }
}
