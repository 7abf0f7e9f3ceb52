//! Tests of the GPU backend. Without a CUDA device they check that detection fails with a typed
//! error (and print "skipped: no CUDA device"); with NVRTC present (a CUDA install or PyPI's
//! `nvidia-cuda-nvrtc` on LD_LIBRARY_PATH) every kernel variant is compiled; with a device, the GPU
//! tower is compared with the CPU reference on a small random tower, tap by tap.

use glm5v_gpu::{
    GpuError, GpuOptions, GpuTower, GraphLimits, Precision, compile_kernels, device_available,
    nvrtc_available,
};
use glm5v_reference::geometry::Grid;
use glm5v_reference::{CpuTower, TapFilter, TapMap, Tower, TowerWeights, VisionConfig};
use ndarray::Array2;
use rand::{Rng, SeedableRng};

#[test]
fn detection_is_typed_and_never_panics() {
    match device_available() {
        Ok(info) => {
            assert!(info.device_count >= 1);
            assert!(info.total_bytes > 0);
            eprintln!("device: {info:?}");
        }
        Err(e) => {
            assert!(
                matches!(
                    e,
                    GpuError::NoDevice { .. } | GpuError::MissingLibrary { .. }
                ),
                "{e:?}"
            );
            let msg = e.to_string();
            assert!(msg.contains("CUDA"), "{msg}");
            println!("skipped: no CUDA device ({msg})");
        }
    }
}

#[test]
fn loading_without_a_device_is_an_error_not_a_panic() {
    if device_available().is_ok() {
        println!("a device is present: covered by gpu_matches_reference");
        return;
    }
    let r = GpuTower::load(std::path::Path::new("/nonexistent"), GpuOptions::default());
    let e = r.err().expect("no device: load must fail");
    assert!(
        matches!(
            e,
            GpuError::NoDevice { .. } | GpuError::MissingLibrary { .. }
        ),
        "{e:?}"
    );
    println!("skipped: no CUDA device");
}

#[test]
fn kernels_compile_with_nvrtc() {
    if !nvrtc_available() {
        // CI installs PyPI's nvidia-cuda-nvrtc and sets GLM5V_REQUIRE_NVRTC=1, so a kernel that
        // fails to compile fails there before any GPU run; elsewhere a missing NVRTC is a skip.
        assert!(
            std::env::var_os("GLM5V_REQUIRE_NVRTC").is_none(),
            "GLM5V_REQUIRE_NVRTC is set but NVRTC was not found (put nvidia-cuda-nvrtc's lib on LD_LIBRARY_PATH)"
        );
        println!(
            "skipped: NVRTC not found (no CUDA toolkit or nvidia-cuda-nvrtc on LD_LIBRARY_PATH)"
        );
        return;
    }
    println!("NVRTC found: compiling every kernel variant for compute_90");
    for bf16 in [false, true] {
        for hd in [16, 64] {
            let ptx = compile_kernels(bf16, hd, "compute_90")
                .unwrap_or_else(|e| panic!("bf16={bf16} hd={hd}: {e}"));
            for k in [
                "rms_norm",
                "qk_norm_rope",
                "attention",
                "swiglu",
                "layer_norm_gelu",
                "cast_act",
                "add_bias",
                "bias_residual",
                "bias_residual_rms",
                "bias_residual_rms_1024",
            ] {
                assert!(
                    ptx.contains(&format!(".entry {k}")),
                    "{k} missing from the PTX (bf16={bf16} hd={hd})"
                );
            }
            let mma = ptx.contains(".entry attention_mma");
            assert_eq!(
                mma,
                bf16 && hd == 64,
                "the tensor-core attention is built for bf16 with head_dim 64 only"
            );
            if mma {
                assert!(ptx.contains("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"));
            }
        }
    }
}

fn small_cfg() -> VisionConfig {
    VisionConfig {
        depth: 2,
        hidden_size: 128,
        num_heads: 2, // head_dim 64: the model's fast path
        intermediate_size: 256,
        out_hidden_size: 96,
        projection_intermediate_size: 160,
        rms_norm_eps: 1e-5,
        swiglu_limit: 7.0,
        ..VisionConfig::default()
    }
}

/// Random weights: norms near 1, everything else small and centred (a stable random tower).
fn random_weights(cfg: &VisionConfig, rng: &mut rand_chacha::ChaCha8Rng) -> TowerWeights<f32> {
    let seed: u64 = rng.random();
    TowerWeights::<f32>::from_fn(cfg, |name, values| {
        let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(
            seed ^ name.len() as u64 ^ (name.as_bytes()[name.len() / 2] as u64) << 32,
        );
        let fan_in = if name.ends_with("weight") && values.len() > 1024 {
            1024.0f32
        } else {
            1.0
        };
        for v in values.iter_mut() {
            let u: f32 = r.random_range(-1.0..1.0);
            *v = if name.contains("norm") {
                1.0 + 0.2 * u
            } else {
                u * (3.0 / fan_in).sqrt() * 0.5
            };
        }
    })
    .unwrap()
}

fn rel_l2(a: &[f32], b: &[f32]) -> f64 {
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        num += (x as f64 - y as f64).powi(2);
        den += (y as f64).powi(2);
    }
    (num / den.max(1e-300)).sqrt()
}

/// The worst relative L2 over `want`'s taps (every one must exist in `got` with its shape and
/// be finite), printing each.
fn worst_tap(label: &str, want: &TapMap, got: &TapMap) -> f64 {
    let mut worst = 0.0f64;
    for (name, w) in &want.taps {
        let g = got
            .get(name)
            .unwrap_or_else(|| panic!("GPU has no tap {name}"));
        assert_eq!((g.rows, g.cols), (w.rows, w.cols), "{name}");
        let e = rel_l2(&g.data, &w.data);
        println!("{label:>5} {name:<32} {e:.3e}");
        assert!(e.is_finite(), "{name}");
        worst = worst.max(e);
    }
    worst
}

/// The small config, a generator from a fresh seed (printed, so a failure can be rerun) and
/// random weights drawn from it.
fn random_case() -> (VisionConfig, rand_chacha::ChaCha8Rng, TowerWeights<f32>) {
    let cfg = small_cfg();
    let seed: u64 = rand::rng().random();
    println!("seed {seed}");
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let weights = random_weights(&cfg, &mut rng);
    (cfg, rng, weights)
}

/// Random pixel rows for `grids`, in the range of upstream's normalised values.
fn random_pixels(
    rng: &mut rand_chacha::ChaCha8Rng,
    cfg: &VisionConfig,
    grids: &[Grid],
) -> Array2<f32> {
    let n: usize = grids.iter().map(|g| g[0] * g[1] * g[2]).sum();
    Array2::from_shape_fn((n, cfg.patch_dim()), |_| rng.random_range(-1.8f32..2.1))
}

/// A random small tower (seed printed), pixels for `grids` and the CPU reference's taps.
fn reference_case(grids: &[Grid]) -> (TowerWeights<f32>, Array2<f32>, TapMap) {
    let (cfg, mut rng, weights) = random_case();
    let px = random_pixels(&mut rng, &cfg, grids);
    let cpu = CpuTower::new(weights.clone());
    let mut want = TapMap::new(TapFilter::all());
    cpu.forward(px.view(), grids, Some(&mut want)).unwrap();
    (weights, px, want)
}

#[test]
fn gpu_matches_reference() {
    if device_available().is_err() {
        println!("skipped: no CUDA device");
        return;
    }
    // two images (two segments, one longer than a query tile) and a two-frame video
    let grids = [[1, 12, 10], [1, 4, 6], [2, 4, 4]];
    let (weights, px, want) = reference_case(&grids);
    for (precision, tol) in [(Precision::F32, 1e-4), (Precision::Bf16, 3e-2)] {
        let gpu = GpuTower::from_weights(&weights, GpuOptions::new(precision)).unwrap();
        let mut got = TapMap::new(TapFilter::all());
        let out = gpu.forward(px.view(), &grids, Some(&mut got)).unwrap();
        let worst = worst_tap(precision.name(), &want, &got);
        let fin = rel_l2(out.as_slice().unwrap(), &want.get("merger").unwrap().data);
        println!(
            "{} final rel L2 {fin:.3e}, worst tap {worst:.3e}",
            precision.name()
        );
        assert!(
            worst <= tol,
            "{}: worst tap {worst:e} > {tol:e}",
            precision.name()
        );
    }
}

/// cuDNN's fused attention (taken for segments of >= 1024 tokens when libcudnn loads) against the
/// CPU reference: runs of equal segments (1024 tokens: two images and a two-frame video; one of
/// 1536) with a 48-token image between them, which our kernel takes in the same forward.
#[test]
fn cudnn_attention_matches_reference() {
    if device_available().is_err() {
        println!("skipped: no CUDA device");
        return;
    }
    if !glm5v_gpu::cudnn::available() {
        println!("skipped: libcudnn not found (put its directory on LD_LIBRARY_PATH)");
        return;
    }
    let grids = [
        [1, 32, 32],
        [1, 32, 32],
        [1, 8, 6],
        [2, 32, 32],
        [1, 32, 48],
    ];
    let (weights, px, want) = reference_case(&grids);
    let gpu = GpuTower::from_weights(&weights, GpuOptions::new(Precision::Bf16)).unwrap();
    let engine = gpu.attention_engine(&grids).unwrap();
    println!("attention: {engine}");
    assert!(
        engine.starts_with("cudnn") && engine.contains("for segments under 1024 tokens"),
        "cuDNN and our kernel not both taken: {engine}"
    );
    let mut got = TapMap::new(TapFilter::all());
    gpu.forward(px.view(), &grids, Some(&mut got)).unwrap();
    for line in gpu.attention_log() {
        println!("plan: {line}");
    }
    let worst = worst_tap("bf16", &want, &got);
    assert!(worst <= 3e-2, "cuDNN bf16: worst tap {worst:e} > 3e-2");
}

/// Batch invariance (the default mode): each image's output rows are the same bits computed
/// alone or packed with others in any order, in f32 and bf16; the images include equal sizes
/// (which the fast mode would batch into one cuDNN call), segments of 1024 tokens (cuDNN's,
/// where it loads) and ones shorter than a query tile (our kernel's), so most packings run
/// both paths in one forward.
/// Whether a device is there and the batch-invariant mode is on (the tests of that mode's
/// bits); prints why not.
fn invariant_device() -> bool {
    if device_available().is_err() {
        println!("skipped: no CUDA device");
        return false;
    }
    if std::env::var("GLM5V_GPU_BATCH_INVARIANT").as_deref() == Ok("0") {
        println!("skipped: GLM5V_GPU_BATCH_INVARIANT=0");
        return false;
    }
    true
}

#[test]
fn packings_are_batch_invariant() {
    if !invariant_device() {
        return;
    }
    let grids: Vec<Grid> = vec![
        [1, 4, 4],
        [1, 8, 6],
        [1, 32, 32],
        [1, 6, 10],
        [1, 32, 32],
        [2, 4, 4],
        [1, 8, 6],
        [1, 32, 32],
    ];
    let (cfg, mut rng, weights) = random_case();
    let pix: Vec<Array2<f32>> = grids
        .iter()
        .map(|g| random_pixels(&mut rng, &cfg, std::slice::from_ref(g)))
        .collect();
    // the 1024-token images side by side: one cuDNN call of a batch of two segments, which
    // must run the single segment's engine and knobs; three of them: a run cut into a batch
    // of two and one of one (`pow2_runs`), or one batch of three with GLM5V_CUDNN_POW2=0
    let mut orders: Vec<Vec<usize>> = vec![
        (0..grids.len()).collect(),
        (0..grids.len()).rev().collect(),
        vec![2, 4],
        vec![0, 4, 2, 1],
        vec![7, 2, 4],
        vec![1, 4, 7, 2, 0],
    ];
    for _ in 0..3 {
        let mut o: Vec<usize> = (0..grids.len()).collect();
        for i in (1..o.len()).rev() {
            o.swap(i, rng.random_range(0..=i));
        }
        o.truncate(rng.random_range(2..=o.len()));
        orders.push(o);
    }
    for precision in [Precision::F32, Precision::Bf16] {
        let gpu = GpuTower::from_weights(&weights, GpuOptions::new(precision)).unwrap();
        let alone: Vec<Array2<f32>> = grids
            .iter()
            .zip(&pix)
            .map(|(g, p)| gpu.forward(p.view(), &[*g], None).unwrap())
            .collect();
        for order in &orders {
            let gs: Vec<Grid> = order.iter().map(|&i| grids[i]).collect();
            let views: Vec<_> = order.iter().map(|&i| pix[i].view()).collect();
            let px = ndarray::concatenate(ndarray::Axis(0), &views).unwrap();
            let out = gpu.forward(px.view(), &gs, None).unwrap();
            let mut row = 0;
            for &i in order {
                let n = alone[i].nrows();
                let got = out.slice(ndarray::s![row..row + n, ..]);
                let same = got
                    .iter()
                    .zip(alone[i].iter())
                    .filter(|(a, b)| a.to_bits() == b.to_bits())
                    .count();
                assert_eq!(
                    same,
                    got.len(),
                    "{}: image {i} {:?} in packing {order:?}: {} of {} values differ from the \
                     image alone",
                    precision.name(),
                    grids[i],
                    got.len() - same,
                    got.len()
                );
                row += n;
            }
            assert_eq!(row, out.nrows());
        }
        println!(
            "{}: {} packings bit-identical to each image alone",
            precision.name(),
            orders.len()
        );
    }
}

/// A forward replayed from a CUDA graph gives the plain forward's bits, the first replay and
/// later ones (new pixels into the graph's input), in both precisions; the cache keeps its
/// bounds (entries and tokens) and counts captures, replays and evictions.
#[test]
fn graphs_match_plain_forward() {
    if device_available().is_err() {
        println!("skipped: no CUDA device");
        return;
    }
    let (cfg, mut rng, weights) = random_case();
    let layouts: Vec<Vec<Grid>> = vec![
        vec![[1, 4, 4]],
        vec![[1, 8, 6], [1, 32, 32], [2, 4, 4]],
        vec![[1, 32, 32]],
    ];
    let bits = |a: &Array2<f32>| a.iter().map(|v| v.to_bits()).collect::<Vec<u32>>();
    for precision in [Precision::F32, Precision::Bf16] {
        let gpu = GpuTower::from_weights(&weights, GpuOptions::new(precision)).unwrap();
        let p = precision.name();
        for gs in &layouts {
            let inputs: Vec<Array2<f32>> =
                (0..4).map(|_| random_pixels(&mut rng, &cfg, gs)).collect();
            gpu.set_graph_limits(GraphLimits {
                entries: 0,
                tokens: 0,
            });
            let plain: Vec<Vec<u32>> = inputs
                .iter()
                .map(|x| bits(&gpu.forward(x.view(), gs, None).unwrap()))
                .collect();
            gpu.set_graph_limits(GraphLimits::default());
            let before = gpu.graph_stats();
            for (k, x) in inputs.iter().enumerate() {
                let got = bits(&gpu.forward(x.view(), gs, None).unwrap());
                let differ = got.iter().zip(&plain[k]).filter(|(a, b)| a != b).count();
                assert_eq!(
                    differ,
                    0,
                    "{p}: layout {gs:?}, input {k}: {differ} of {} values differ from the plain \
                     forward",
                    got.len()
                );
            }
            let s = gpu.graph_stats();
            assert!(
                s.disabled.is_none(),
                "{p}: graphs disabled: {:?}",
                s.disabled
            );
            // the first forward of a layout runs plain, the second captures, then replays
            assert_eq!(s.captures - before.captures, 1, "{p}: {s:?}");
            assert_eq!(s.replays - before.replays, 3, "{p}: {s:?}");
        }
        // Bounds: two entries at most, then tokens.
        gpu.set_graph_limits(GraphLimits {
            entries: 2,
            tokens: 1 << 20,
        });
        for gs in layouts.iter().chain(&layouts) {
            for _ in 0..2 {
                gpu.forward(random_pixels(&mut rng, &cfg, gs).view(), gs, None)
                    .unwrap();
            }
        }
        let s = gpu.graph_stats();
        assert_eq!(s.entries, 2, "{p}: {s:?}");
        assert!(s.evictions >= 1, "{p}: {s:?}");
        gpu.set_graph_limits(GraphLimits {
            entries: 16,
            tokens: 1100,
        });
        let s = gpu.graph_stats();
        assert!(s.tokens <= 1100, "{p}: {s:?}");
        println!(
            "{p}: graphs bit-identical to the plain forward over {} layouts x 4 inputs; {s:?}",
            layouts.len()
        );
    }
}

/// The queue the batcher drives (staged pixels, overlapped copies, two forwards in flight)
/// gives the plain forward's bits, through graphs and plain forwards alike, with its buffers
/// growing for a larger batch; a third forward while two are queued and an unknown ticket are
/// errors, not hangs.
#[test]
fn queued_forward_matches_forward() {
    if device_available().is_err() {
        println!("skipped: no CUDA device");
        return;
    }
    let (cfg, mut rng, weights) = random_case();
    let a: Vec<Grid> = vec![[1, 8, 6], [1, 4, 4]];
    let b: Vec<Grid> = vec![[1, 32, 32]];
    let c: Vec<Grid> = vec![[1, 32, 32], [2, 8, 8], [1, 16, 12]];
    // a and b come back (captured on their second forward, then replayed); c is larger
    let layouts = [&a, &b, &a, &c, &a, &b, &b, &c, &a];
    let bits = |a: &Array2<f32>| a.iter().map(|v| v.to_bits()).collect::<Vec<u32>>();
    for precision in [Precision::F32, Precision::Bf16] {
        let p = precision.name();
        let gpu = GpuTower::from_weights(&weights, GpuOptions::new(precision)).unwrap();
        let q = gpu.queued().expect("the GPU tower queues its forwards");
        assert_eq!(q.depth(), 2);
        let inputs: Vec<Array2<f32>> = layouts
            .iter()
            .map(|gs| random_pixels(&mut rng, &cfg, gs))
            .collect();
        let enqueue = |k: usize| {
            let x = &inputs[k];
            let mut fill = |dst: &mut [f32]| dst.copy_from_slice(x.as_slice().unwrap());
            q.enqueue(x.nrows(), layouts[k], &mut fill).unwrap()
        };
        let mut tickets = std::collections::VecDeque::new();
        let mut got: Vec<Option<Array2<f32>>> = vec![None; inputs.len()];
        for k in 0..inputs.len() {
            if tickets.len() == 2 {
                let mut fill = |_: &mut [f32]| panic!("not called when the queue is full");
                let err = q
                    .enqueue(inputs[k].nrows(), layouts[k], &mut fill)
                    .unwrap_err();
                assert!(err.to_string().contains("queued already"), "{p}: {err}");
                let (j, t) = tickets.pop_front().unwrap();
                let done = q.finish(t).unwrap();
                assert!(done.device > std::time::Duration::ZERO, "{p}: {done:?}");
                got[j] = Some(done.embeddings);
            }
            tickets.push_back((k, enqueue(k)));
        }
        while let Some((j, t)) = tickets.pop_front() {
            got[j] = Some(q.finish(t).unwrap().embeddings);
        }
        assert!(q.finish(glm5v_reference::Ticket(u64::MAX)).is_err());
        for (k, x) in inputs.iter().enumerate() {
            let want = bits(&gpu.forward(x.view(), layouts[k], None).unwrap());
            let have = bits(got[k].as_ref().unwrap());
            let differ = want.iter().zip(&have).filter(|(a, b)| a != b).count();
            assert_eq!(want.len(), have.len(), "{p}: batch {k}");
            assert_eq!(
                differ, 0,
                "{p}: batch {k} ({:?}): {differ} values differ",
                layouts[k]
            );
        }
        let s = gpu.graph_stats();
        assert!(s.replays > 0 && s.disabled.is_none(), "{p}: {s:?}");
        println!(
            "{p}: {} queued forwards bit-identical to forward; {s:?}",
            inputs.len()
        );
    }
}

/// A tower keeps the largest q/k/v head stride it has used under cuDNN (one plan per segment
/// length once the largest batch has run): an image's rows are the same bits before and after
/// a batch of more than 4096 tokens raised it.
#[test]
fn a_raised_head_stride_keeps_the_bits() {
    if device_available().is_err() {
        println!("skipped: no CUDA device");
        return;
    }
    let (cfg, mut rng, weights) = random_case();
    let gpu = GpuTower::from_weights(&weights, GpuOptions::new(Precision::Bf16)).unwrap();
    gpu.set_graph_limits(GraphLimits {
        entries: 0,
        tokens: 0,
    });
    // a 1024-token image (cuDNN, which reads at the stride) beside a short one (our kernel)
    let small: Vec<Grid> = vec![[1, 8, 6], [1, 32, 32]];
    let x = random_pixels(&mut rng, &cfg, &small);
    let before = gpu.forward(x.view(), &small, None).unwrap();
    let big: Vec<Grid> = vec![[1, 64, 72], [1, 8, 8]];
    let y = random_pixels(&mut rng, &cfg, &big);
    gpu.forward(y.view(), &big, None).unwrap();
    let after = gpu.forward(x.view(), &small, None).unwrap();
    let differ = before
        .iter()
        .zip(after.iter())
        .filter(|(a, b)| a.to_bits() != b.to_bits())
        .count();
    assert_eq!(differ, 0, "{differ} values differ after the stride grew");
    println!(
        "bf16: the same bits before and after a {}-token batch (attention: {})",
        64 * 72 + 64,
        gpu.attention_engine(&small).unwrap()
    );
}

/// The batch-invariant GEMMs run another algorithm per bucket of row counts (`lt::BUCKET_ROWS`),
/// each one probed to give the reference's bits: a product's first rows must carry the same
/// bits whatever the row count, across every bucket, for the tower's GEMM shapes and types.
#[test]
fn gemm_rows_keep_their_bits_at_every_row_count() {
    use glm5v_gpu::device::{Dev, Dt};
    if !invariant_device() {
        return;
    }
    let dev = Dev::open(0, true, 64).unwrap();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(77);
    let counts = [37usize, 64, 200, 1000, 3000, 9000, 20000];
    let max = *counts.last().unwrap();
    // (k, out, input type, output type): qkv, down and gate_up of the full geometry
    for (k, out, t, yt) in [
        (1024, 3072, Dt::Bf16, Dt::F32),
        (4096, 1024, Dt::Bf16, Dt::F32),
        (1024, 8192, Dt::F16, Dt::F16),
        (1024, 3072, Dt::F16, Dt::F16),
    ] {
        let w: Vec<f32> = (0..out * k)
            .map(|_| rng.random_range(-0.05f32..0.05))
            .collect();
        let x: Vec<f32> = (0..max * k)
            .map(|_| rng.random_range(-1.0f32..1.0))
            .collect();
        let w = dev.upload_f32("w", &w, t).unwrap();
        let x = dev.upload_f32("x", &x, t).unwrap();
        let y = dev.alloc("y", max * out, yt).unwrap();
        let mut first: Option<Vec<f32>> = None;
        for &rows in &counts {
            dev.linear_to(&x, &w, &y, yt, rows, k, out).unwrap();
            let got = dev.download_as(&y, yt, 0, counts[0] * out).unwrap();
            assert!(got.iter().all(|v| v.is_finite()));
            match &first {
                None => first = Some(got),
                Some(want) => {
                    let differ = got
                        .iter()
                        .zip(want)
                        .filter(|(a, b)| a.to_bits() != b.to_bits())
                        .count();
                    assert_eq!(
                        differ,
                        0,
                        "[{rows} x {k}] x [{k} x {out}] {t:?} -> {yt:?}: {differ} of {} values of \
                         the first {} rows differ from the {}-row product",
                        got.len(),
                        counts[0],
                        counts[0]
                    );
                }
            }
        }
        println!("[{k} -> {out}] {t:?} -> {yt:?}: the first rows bit-identical at {counts:?} rows");
    }
}
