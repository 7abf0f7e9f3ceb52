//! Speed of the reference tower at the GLM-5.3-Flash geometry (depth 24, hidden 1024, 16 heads,
//! MLP 4096, out 4096, merger 10240) with synthetic weights built in memory.
//!
//!     cargo run --release -p glm5v-reference --example full_geometry -- [threads] [grid ...]
//!
//! Defaults: 2 threads, grids 8 and 32 (an 8x8 and a 32x32 patch image). Prints GEMM GFLOP/s
//! for the tower's shapes (skipped with GLM5V_FORWARD_ONLY=1) and the forward time per grid
//! (best of a few runs). The weights are rounded to bf16, as `glm5v synth` writes them (so the
//! panels store them as bf16); `GLM5V_SYNTH_F32=1` keeps them f32. `GLM5V_AB_TEAM=1` instead
//! times forwards alternating with and without the spinning team of `kernels::team` (40 per
//! grid up to 16x16, else 8) and prints both distributions. `GLM5V_GLOBAL_POOL=1` runs in
//! rayon's global pool (as `glm5v bench cpu` does: the forward's leader is then the calling
//! thread, outside the pool) instead of a pool of `threads`. `GLM5V_CPU_BF16=1` times the bf16
//! mode's tower instead of the f32 one. `GLM5V_AMX_PROBE=1` (with AMX) first times the unit's
//! block kernel alone over data resident in L1, L2 or memory (`kernels::amx::block_gflops`).
//! `GLM5V_AB_AMX=grouped:t1,pipelined:first:4,...` alternates the AMX kernel's settings (the
//! one-part step, the weight prefetch, the L1 prefetch distance) in one process: probe lines,
//! GEMM lines (medians over turns) and forwards for each. `GLM5V_AMX_PROFILE=1` splits the
//! GEMM lines' and the bf16 attention lines' time; `GLM5V_ATTN_ONLY=1` prints the attention
//! lines alone (f32 at 1024 and 5184 tokens, and bf16's where there is AMX; no weights built).

use glm5v_reference::kernels::amx::{Order, Step, profile, set_for_measuring};
use glm5v_reference::kernels::amx_attention;
use glm5v_reference::kernels::attention::attention;
use glm5v_reference::kernels::gemm::{LinearWeight, Par, SKINNY_MAX_ROWS, matmul_into};
use glm5v_reference::kernels::team;
use glm5v_reference::{CpuTower, Embedder, Threads, TowerWeights, VisionConfig};
use ndarray::{Array2, ArrayView2};
use rayon::prelude::*;
use std::time::Instant;

fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// A deterministic value in [-1, 1) for element `i` of the tensor whose name hashes to `seed`.
fn hash01(seed: u64, i: usize) -> f32 {
    let mut h = seed ^ i as u64;
    h = h.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^= h >> 29;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 32;
    (h >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
}

/// CPU seconds (user + system) this process has used, from /proc/self/stat (Linux; 0 elsewhere).
/// On a shared machine, CPU time is steadier than wall time.
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    let after = &stat[stat.rfind(')').map_or(0, |p| p + 2)..];
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    ticks / 100.0
}

/// `rounds` forwards for each of `names`' settings, taking turns (`forward(i)` sets the i-th
/// and times one), then each setting's best, median and worst.
fn turns(names: &[String], rounds: usize, g: usize, mut forward: impl FnMut(usize) -> f64) {
    let mut alt: Vec<Vec<f64>> = vec![vec![]; names.len()];
    for r in 0..rounds * names.len() {
        alt[r % names.len()].push(forward(r % names.len()));
    }
    for (name, mut v) in names.iter().zip(alt) {
        v.sort_by(f64::total_cmp);
        println!(
            "grid {g}x{g} {name:18}: {} forwards, best {:.3} s, median {:.3}, worst {:.3}",
            v.len(),
            v[0],
            v[v.len() / 2],
            v[v.len() - 1]
        );
    }
}

/// One probe line: `label`, then the block kernel's GFLOP/s alone
/// (`kernels::amx::block_gflops`) on one thread and on `threads`.
fn probe(
    label: &str,
    threads: usize,
    peak: f64,
    parts: glm5v_reference::kernels::amx::Parts,
    span: usize,
    steps: usize,
    blocks: usize,
) {
    let mut line = label.to_string();
    for t in [1, threads] {
        let g = glm5v_reference::kernels::amx::block_gflops(t, parts, span, steps, blocks)
            .expect("the probe runs with AMX only");
        line += &format!("  {t} thread(s) {g:6.0} GFLOP/s");
    }
    println!("{line}  (ceiling {peak:.0} on {threads})");
}

/// One of `GLM5V_AB_AMX`'s settings.
struct AmxSetting {
    name: String,
    step: Step,
    pf: String,
    ahead: usize,
    order: Order,
}

impl AmxSetting {
    fn set(&self) {
        set_for_measuring(&self.pf, self.step, self.ahead, self.order);
    }
}

/// Seconds a call of `f` takes on q, k and v of one segment of `n` tokens (`d` wide, 16 heads),
/// after one warm-up call and `warm` (2 calls past 2048 tokens, else 5), and the calls timed;
/// prints the line `{what} {n} tokens x 16 heads: ms, GFLOP/s`.
fn time_attention(
    what: &str,
    n: usize,
    d: usize,
    f: impl Fn(ArrayView2<f32>, ArrayView2<f32>, ArrayView2<f32>) -> Array2<f32>,
    warm: impl FnOnce(),
) -> (f64, usize) {
    let q = Array2::from_shape_fn((n, d), |(i, j)| hash01(4, i * d + j));
    let k = Array2::from_shape_fn((n, d), |(i, j)| hash01(5, i * d + j));
    let v = Array2::from_shape_fn((n, d), |(i, j)| hash01(6, i * d + j));
    let _ = f(q.view(), k.view(), v.view());
    warm();
    let reps = if n > 2048 { 2 } else { 5 };
    let t = Instant::now();
    for _ in 0..reps {
        std::hint::black_box(f(q.view(), k.view(), v.view()));
    }
    let s = t.elapsed().as_secs_f64() / reps as f64;
    println!(
        "{what} {n} tokens x 16 heads: {:.1} ms, {:.1} GFLOP/s",
        s * 1e3,
        4.0 * (n * n * d) as f64 / s / 1e9
    );
    (s, reps)
}

/// The f32 attention (`kernels::attention`, the f32 mode's) on one segment of each of `lens`
/// tokens, 16 heads of `d / 16`: time and GFLOP/s.
fn f32_attention_lines(d: usize, lens: &[usize]) {
    for &n in lens {
        time_attention(
            "attention",
            n,
            d,
            |q, k, v| attention(q, k, v, &[0, n], 16, 0.125f32),
            || {},
        );
    }
}

/// The bf16 mode's attention on the unit at 1024 and 5184 tokens (16 heads of `d / 16`):
/// time and GFLOP/s, and with `GLM5V_AMX_PROFILE=1` where the time goes.
fn amx_attention_lines(d: usize) {
    if !amx_attention::enabled() {
        println!("amx attention: not timed (no AMX here, or GLM5V_CPU_AMX_ATTN=0)");
        return;
    }
    for n in [1024, 5184] {
        let (s, reps) = time_attention(
            "amx attention",
            n,
            d,
            |q, k, v| amx_attention::attention(q, k, v, &[0, n], 16, 0.125),
            || {
                profile::take();
            },
        );
        if profile::on() {
            let p = profile::take().map(|v| v * 1e3 / reps as f64);
            println!(
                "profile amx attention {n}: ms a call (thread-summed): pack K,V {:.2}, \
                 q·kᵀ {:.2}, softmax {:.2}, p·v {:.2}; the rest {:.2}",
                p[3],
                p[4],
                p[5],
                p[6],
                s * 1e3 * rayon::current_num_threads() as f64 - p[3..].iter().sum::<f64>()
            );
        }
    }
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("numbers"))
        .collect();
    let threads = args.first().copied().unwrap_or(2);
    let grids: Vec<usize> = if args.len() > 1 {
        args[1..].to_vec()
    } else {
        vec![8, 32]
    };
    let cfg = VisionConfig::glm53_flash();
    // GLM5V_ATTN_ONLY=1: the attention lines alone (no weights built)
    if std::env::var("GLM5V_ATTN_ONLY").as_deref() == Ok("1") {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("a thread pool");
        pool.install(|| {
            team::with_team(|| {
                f32_attention_lines(cfg.hidden_size, &[1024, 5184]);
                amx_attention_lines(cfg.hidden_size)
            })
        });
        return;
    }

    let t0 = Instant::now();
    let keep_f32 = std::env::var("GLM5V_SYNTH_F32").as_deref() == Ok("1");
    // rounded to bf16 as `glm5v synth` checkpoints are (GLM5V_SYNTH_F32=1: not)
    let weight = |x: f32| {
        if keep_f32 {
            x
        } else {
            half::bf16::from_f32(x).to_f32()
        }
    };
    let weights = TowerWeights::<f32>::from_fn(&cfg, |name, values| {
        let seed = name_hash(name);
        let (base, amp) = if name.contains("norm") && name.ends_with("weight") {
            (1.0, 0.1)
        } else if name.ends_with("bias") {
            (0.0, 0.02)
        } else {
            (0.0, 0.03)
        };
        values
            .par_iter_mut()
            .enumerate()
            .for_each(|(i, v)| *v = weight(base + amp * hash01(seed, i)));
    })
    .expect("synthetic weights");
    println!(
        "built synthetic weights in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    // GLM5V_CPU_BF16=1: the bf16 mode's tower (and its Linear weights in the GEMM lines)
    let bf16 = std::env::var("GLM5V_CPU_BF16").as_deref() == Ok("1");
    let tower = if bf16 {
        CpuTower::new_bf16(weights)
    } else {
        CpuTower::new(weights)
    };
    let pool = if std::env::var("GLM5V_GLOBAL_POOL").as_deref() == Ok("1") {
        Threads::Global
    } else {
        Threads::Count(threads)
    };
    let emb = Embedder::from_tower(Box::new(tower), pool).unwrap();

    // GEMM throughput on the tower's shapes (GLM5V_FORWARD_ONLY=1 skips it, e.g. under perf).
    let micro = std::env::var_os("GLM5V_FORWARD_ONLY").is_none();
    // GLM5V_AB_AMX=grouped:t1,pipelined:first:4:chunk,...: the AMX kernel's settings to
    // alternate (one-part step [: weight prefetch (auto) [: L1 prefetch steps ahead (2) [:
    // order of blocks and chunks (auto|chunk)]]]; probe lines, GEMM lines and forwards, in one
    // process)
    let ab_amx: Vec<AmxSetting> = std::env::var("GLM5V_AB_AMX")
        .map(|v| {
            v.split(',')
                .map(|x| {
                    let f: Vec<&str> = x.split(':').collect();
                    let step = match f[0] {
                        "grouped" => Step::Grouped,
                        "pipelined" => Step::Pipelined,
                        other => panic!("GLM5V_AB_AMX: unknown step {other}"),
                    };
                    let num = |i: usize, d: usize| {
                        f.get(i)
                            .map_or(d, |v| v.parse().expect("GLM5V_AB_AMX: a number"))
                    };
                    let order = match f.get(3).copied() {
                        None | Some("auto") => Order::Auto,
                        Some("chunk") => Order::ChunkMajor,
                        Some(other) => panic!("GLM5V_AB_AMX: unknown order {other}"),
                    };
                    AmxSetting {
                        name: x.to_string(),
                        step,
                        pf: f.get(1).unwrap_or(&"auto").to_string(),
                        ahead: num(2, 2),
                        order,
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    let amx_peak = glm5v_reference::kernels::amx::amx_peak_gflops(threads, 2_000_000);
    if let Some(p) = amx_peak {
        println!("AMX ceiling on {threads} threads: {p:.0} GFLOP/s");
    }
    // GLM5V_AMX_PROBE=1: the block kernel alone over inputs and weights resident in L1, L2,
    // or memory (`kernels::amx::block_gflops`), one thread and all of them
    if let Some(peak) = amx_peak
        && std::env::var("GLM5V_AMX_PROBE").as_deref() == Ok("1")
    {
        use glm5v_reference::kernels::amx::Parts;
        if !ab_amx.is_empty() {
            // the one-part step's settings side by side: the same tiles re-read (span 0),
            // then L2- and memory-resident blocks
            for (span, where_, steps) in [
                (0, "same", 4),
                (0, "same", 32),
                (512 << 10, "L2", 32),
                (64 << 20, "memory", 32),
            ] {
                for a in &ab_amx {
                    a.set();
                    let label = format!(
                        "probe bf16 {:18} span {:6} KiB ({where_:6}) steps {steps:2}:",
                        a.name,
                        span >> 10
                    );
                    probe(
                        &label,
                        threads,
                        peak,
                        Parts::One,
                        span,
                        steps,
                        2_000_000 / steps,
                    );
                }
            }
            ab_amx[0].set();
        }
        for (parts, name) in [(Parts::One, "bf16"), (Parts::Three, "f32 x3")] {
            for (span, where_) in [
                (32 << 10, "L1"),
                (512 << 10, "L2"),
                (1536 << 10, "L2 full"),
                (64 << 20, "memory"),
            ] {
                // a 32 KiB span holds 8 steps of one part, or 4 of three (with their weights)
                let short = if parts == Parts::One { 8 } else { 4 };
                for steps in [short, 32] {
                    if span < (256 << 10) && steps == 32 {
                        continue;
                    }
                    let label = format!(
                        "probe {name:6} span {:6} KiB ({where_:7}) steps {steps:2}:",
                        span >> 10
                    );
                    let blocks = 2_000_000 / steps / if parts == Parts::One { 1 } else { 3 };
                    probe(&label, threads, peak, parts, span, steps, blocks);
                }
            }
        }
    }
    emb.install(|| {
        if !micro {
            return;
        }
        let big = std::env::var("GLM5V_GEMM_72").as_deref() == Ok("1");
        let shapes72: &[(usize, usize, usize, &str)] = if big {
            &[
                (5184, 1024, 3072, "qkv, 72x72"),
                (5184, 4096, 1024, "down, 72x72"),
                (1296, 4096, 20480, "merger gate+up, 72x72"),
            ]
        } else {
            &[]
        };
        for &(m, k, n, what) in [
            (64, 1024, 3072, "qkv, 8x8"),
            (64, 1024, 8192, "gate+up, 8x8"),
            (64, 4096, 1024, "down, 8x8"),
            (1024, 1024, 3072, "qkv, 32x32"),
            (1024, 1024, 8192, "gate+up, 32x32"),
            (1024, 4096, 1024, "down, 32x32"),
            (16, 4096, 20480, "merger gate+up, 8x8"),
            (256, 4096, 20480, "merger gate+up, 32x32"),
            (256, 10240, 4096, "merger down, 32x32"),
        ]
        .iter()
        .chain(shapes72)
        {
            let x = Array2::from_shape_fn((m, k), |(i, j)| hash01(1, i * k + j));
            let w = Array2::from_shape_fn((n, k), |(i, j)| weight(hash01(2, i * k + j)));
            // as the forward holds it: packed once (panels where the CPU has them)
            let lw = if bf16 {
                LinearWeight::new_bf16(w.clone())
            } else {
                LinearWeight::new(w.clone())
            };
            let mut y = vec![0.0f32; m * n];
            lw.apply_into(x.view(), None, Par::Pool, &mut y);
            let reps = ((2e10 / (2.0 * (m * k * n) as f64)) as usize).clamp(2, 50);
            if !ab_amx.is_empty() {
                // the settings taking turns, one product each, `reps` turns
                let mut times: Vec<Vec<f64>> = vec![vec![]; ab_amx.len()];
                // GLM5V_AMX_PROFILE=1: seconds packing, in the kernel, adding sums (summed
                // over threads) for each setting
                let mut spent = vec![[0.0f64; 3]; ab_amx.len()];
                for _ in 0..reps.max(6) {
                    for (i, a) in ab_amx.iter().enumerate() {
                        a.set();
                        profile::take();
                        let t = Instant::now();
                        lw.apply_into(x.view(), None, Par::Pool, &mut y);
                        std::hint::black_box(&y);
                        times[i].push(t.elapsed().as_secs_f64());
                        for (s, v) in spent[i].iter_mut().zip(profile::take()) {
                            *s += v;
                        }
                    }
                }
                if profile::on() {
                    let calls = reps.max(6) as f64;
                    let mut line = format!(
                        "profile {m:5} x {k:5} x {n:5} ms a call (thread-summed): pack/kernel/adds"
                    );
                    for (a, s) in ab_amx.iter().zip(&spent) {
                        line += &format!(
                            "  {} {:.2}/{:.2}/{:.2}",
                            a.name,
                            s[0] * 1e3 / calls,
                            s[1] * 1e3 / calls,
                            s[2] * 1e3 / calls
                        );
                    }
                    println!("{line}");
                }
                let mut line =
                    format!("gemm {m:5} x {k:5} x {n:5} ({what:22}) GFLOP/s, median [range]:");
                for (AmxSetting { name, .. }, mut v) in ab_amx.iter().zip(times) {
                    v.sort_by(f64::total_cmp);
                    let g = |s: f64| 2.0 * (m * k * n) as f64 / s / 1e9;
                    line += &format!(
                        "  {name} {:.0} [{:.0}-{:.0}]",
                        g(v[v.len() / 2]),
                        g(v[v.len() - 1]),
                        g(v[0])
                    );
                }
                println!("{line}");
                ab_amx[0].set();
                continue;
            }
            let t = Instant::now();
            for _ in 0..reps {
                lw.apply_into(x.view(), None, Par::Pool, &mut y);
                std::hint::black_box(&y);
            }
            let s = t.elapsed().as_secs_f64() / reps as f64;
            let gflops = 2.0 * (m * k * n) as f64 / s / 1e9;
            let mut line = format!("gemm {m:5} x {k:5} x {n:5} ({what:22}): {gflops:7.1} GFLOP/s");
            if let Some(p) = amx_peak {
                // the unit's work: three products a product in the f32 mode
                let work = if bf16 { 1.0 } else { 3.0 };
                line += &format!(" ({:.0}% of the AMX ceiling)", 100.0 * work * gflops / p);
            }
            if m <= SKINNY_MAX_ROWS {
                // the same product through the gemm crate, for comparison
                let mut y = Array2::<f32>::zeros((m, n));
                matmul_into(y.view_mut(), x.view(), w.t(), false, 1.0, Par::Pool);
                let t = Instant::now();
                for _ in 0..reps {
                    matmul_into(y.view_mut(), x.view(), w.t(), false, 1.0, Par::Pool);
                }
                let s = t.elapsed().as_secs_f64() / reps as f64;
                line += &format!("  (gemm crate {:.1})", 2.0 * (m * k * n) as f64 / s / 1e9);
            }
            println!("{line}");
        }
    });

    // Attention alone: one segment of 1024 tokens, 16 heads of 64.
    emb.install(|| {
        if !micro {
            return;
        }
        f32_attention_lines(1024, &[1024]);
        // the bf16 mode's attention on the unit, where it runs
        if bf16 && amx_attention::enabled() {
            amx_attention_lines(1024);
        }
    });

    let ab_team = std::env::var("GLM5V_AB_TEAM").as_deref() == Ok("1");
    // GLM5V_AB_KC=512,1024: forwards alternating between the bf16 mode's AMX summation chunks
    let ab_kc: Vec<usize> = std::env::var("GLM5V_AB_KC")
        .map(|v| {
            v.split(',')
                .map(|x| x.parse().expect("GLM5V_AB_KC: numbers"))
                .collect()
        })
        .unwrap_or_default();
    for g in grids {
        let n = g * g;
        let px =
            Array2::from_shape_fn((n, cfg.patch_dim()), |(i, j)| hash01(3, i * 1176 + j) * 2.0);
        let grid = [[1, g, g]];
        let mut best = f64::INFINITY;
        let mut best_cpu = f64::INFINITY;
        let runs = if g <= 16 { 5 } else { 3 };
        if !ab_kc.is_empty() {
            let names: Vec<String> = ab_kc.iter().map(|kc| format!("kc {kc:5}")).collect();
            turns(&names, if g <= 16 { 12 } else { 4 }, g, |i| {
                glm5v_reference::kernels::amx::set_bf16_chunk_for_measuring(ab_kc[i]);
                let t = Instant::now();
                emb.embed_pixels(px.view(), &grid).unwrap();
                t.elapsed().as_secs_f64()
            });
            continue;
        }
        if !ab_amx.is_empty() {
            let names: Vec<String> = ab_amx.iter().map(|a| a.name.clone()).collect();
            turns(&names, if g <= 16 { 8 } else { 3 }, g, |i| {
                ab_amx[i].set();
                let t = Instant::now();
                emb.embed_pixels(px.view(), &grid).unwrap();
                t.elapsed().as_secs_f64()
            });
            continue;
        }
        if ab_team {
            // forwards alternating with and without the spinning team (kernels::team), so
            // that both see the same minutes of this machine
            let mut alt: [Vec<f64>; 2] = [vec![], vec![]];
            for r in 0..(if g <= 16 { 40 } else { 8 }) {
                team::set_enabled(r % 2 == 0);
                let t = Instant::now();
                emb.embed_pixels(px.view(), &grid).unwrap();
                alt[r % 2].push(t.elapsed().as_secs_f64());
            }
            team::set_enabled(true);
            for (name, mut v) in ["team", "rayon"].into_iter().zip(alt) {
                v.sort_by(f64::total_cmp);
                let mean = v.iter().sum::<f64>() / v.len() as f64;
                println!(
                    "grid {g}x{g} {name:5}: {} forwards, best {:.3} s, quartile {:.3}, median {:.3}, mean {:.3}",
                    v.len(),
                    v[0],
                    v[v.len() / 4],
                    v[v.len() / 2],
                    mean
                );
            }
            continue;
        }
        for _ in 0..runs {
            let mut marks = Vec::new();
            let c0 = cpu_seconds();
            let t = Instant::now();
            let mut cb = |done: usize, _total: usize| marks.push((done, t.elapsed().as_secs_f64()));
            let out = emb
                .embed_pixels_with(px.view(), &grid, None, Some(&mut cb))
                .unwrap();
            let s = t.elapsed().as_secs_f64();
            best_cpu = best_cpu.min(cpu_seconds() - c0);
            assert!(out.embeddings.iter().all(|v| v.is_finite()));
            if s < best {
                best = s;
                let embed = marks[0].1;
                let blocks = marks[marks.len() - 2].1 - embed;
                let head = s - marks[marks.len() - 2].1;
                println!(
                    "grid {g}x{g} ({n} patches): {s:.3} s  [embed+rope {embed:.3}, 24 blocks {blocks:.3}, head {head:.3}]"
                );
            }
        }
        println!(
            "grid {g}x{g}: best of {runs} = {best:.3} s on {threads} threads ({}); least CPU time {best_cpu:.2} s",
            emb.tower().describe()
        );
    }
}
