//! Tests of `kernels::amx`: the unit's path (or, on a CPU without AMX, its emulation: the
//! same packing, blocking and summation) against f64 products, and the bf16 split's exactness.

use super::*;
use ndarray::Array2;

/// Finding G2 (the `gemm` fuzz target, AMX emulated): an input whose split has zero parts
/// (0.5: mid = lo = 0) times an infinite weight gave NaN (0 x inf) where the f32 product is
/// an infinity. The split-f32 path now takes finite bf16-exact weights only (the FMA panels
/// keep the others); the bf16 mode, which rounds its inputs to one part, still packs them.
#[test]
fn split_product_takes_finite_weights_only() {
    let [_, mid, lo] = split3(0.5);
    assert_eq!((bf16_value(mid), bf16_value(lo)), (0.0, 0.0));
    for bad in [f32::INFINITY, f32::NEG_INFINITY, f32::NAN] {
        let w = Array2::from_shape_vec((2, 2), vec![1.0, bad, 0.5, 2.0]).unwrap();
        assert!(AmxWeight::pack(w.view(), false).is_none(), "{bad}");
        assert!(AmxWeight::pack(w.view(), true).is_some(), "{bad}");
    }
    let w = Array2::from_shape_vec((1, 2), vec![1.0f32, -2.0]).unwrap();
    assert!(AmxWeight::pack(w.view(), false).is_some());
    // and the f32 mode's weight then takes the panels, whose product is the infinity
    let w = Array2::from_shape_vec((1, 2), vec![f32::INFINITY, 1.0]).unwrap();
    let lw = crate::kernels::gemm::LinearWeight::new(w);
    assert_ne!(lw.kernel(), "amx");
    let x = Array2::from_shape_vec((1, 2), vec![0.5f32, 0.25]).unwrap();
    let y = lw.apply(x.view(), None, crate::kernels::gemm::Par::Seq);
    assert_eq!(y[[0, 0]], f32::INFINITY);
}

#[test]
fn three_parts_are_exact() {
    let mut lcg = crate::kernels::Lcg(7);
    for _ in 0..100_000 {
        let e = (lcg.unit() * 60.0 - 30.0).exp2();
        let x = ((lcg.unit() - 0.5) * e) as f32;
        let [h, m, l] = split3(x);
        let sum = bf16_value(h) as f64 + bf16_value(m) as f64 + bf16_value(l) as f64;
        assert_eq!(sum, x as f64, "{x:e}");
    }
    for x in [f32::INFINITY, f32::NEG_INFINITY] {
        assert_eq!(split3(x), [bf16_bits(x), 0, 0]);
    }
    // finding G1: finite values above bf16's largest finite one split exactly too
    for x in [f32::MAX, -f32::MAX, 3.3896e38f32, 3.39e38] {
        let [h, m, l] = split3(x);
        let sum = bf16_value(h) as f64 + bf16_value(m) as f64 + bf16_value(l) as f64;
        assert_eq!(sum, x as f64, "{x:e}");
    }
    assert!(bf16_value(split3(f32::NAN)[0]).is_nan());
    assert_eq!(bf16_bits(1.0 + 1.0 / 256.0), bf16_bits(1.0)); // a tie: to even
    assert_eq!(bf16_bits(1.0 + 3.0 / 256.0), bf16_bits(1.0 + 4.0 / 256.0));
}

fn naive(x: &[f32], m: usize, k: usize, w: &Array2<f32>, bias: Option<&[f32]>) -> Vec<f64> {
    let n = w.nrows();
    let mut y = vec![0.0; m * n];
    for i in 0..m {
        for o in 0..n {
            let mut s = bias.map_or(0.0, |b| b[o] as f64);
            for j in 0..k {
                s += x[i * k + j] as f64 * w[[o, j]] as f64;
            }
            y[i * n + o] = s;
        }
    }
    y
}

/// Against f64 on shapes that hit every edge: rows not a multiple of the tiles, k not a
/// multiple of 32, a k longer than one chunk, strided weights; bias and residual.
/// `aw.linear` on the unit, or where there is none its emulation (the same packing,
/// blocking and summation chunks; `chunk` inputs a chunk, the mode's own when `None`).
#[allow(clippy::too_many_arguments)]
fn product(
    aw: &AmxWeight,
    x: &[f32],
    m: usize,
    bias: Option<&[f32]>,
    res: Option<&[f32]>,
    y: &mut [f32],
    parts: Parts,
    chunk: Option<usize>,
) {
    if available() && chunk.is_none() {
        aw.linear(x, m, bias, res, y, parts);
    } else {
        let chunk = chunk.unwrap_or(kc(parts));
        aw.linear_emulated(x, m, bias, res, y, parts, chunk, order());
    }
}

#[test]
fn matches_f64_on_edge_shapes() {
    eprintln!(
        "{}",
        if available() {
            "on the unit"
        } else {
            "emulated: no AMX"
        }
    );
    for chunk in [None, Some(64)] {
        edge_shapes(chunk);
    }
}

fn edge_shapes(chunk: Option<usize>) {
    let mut lcg = crate::kernels::Lcg(11);
    for (m, k, n) in [
        (1, 1, 1),
        (5, 31, 17),
        (33, 64, 70),
        (64, 1100, 96),
        (100, 33, 300),
        (300, 96, 40),   // rows split among tasks (few column blocks)
        (40, 4096, 520), // groups of column blocks (three parts outgrow L2)
    ] {
        let mut rnd = || (lcg.unit() - 0.5) as f32;
        let wide = Array2::from_shape_fn((n, 2 * k), |_| round_bf16(rnd()));
        let w = wide.slice(ndarray::s![.., ..;2]);
        let x: Vec<f32> = (0..m * k).map(|_| rnd()).collect();
        let bias: Vec<f32> = (0..n).map(|_| rnd()).collect();
        let res: Vec<f32> = (0..m * n).map(|_| rnd()).collect();
        let aw = AmxWeight::pack(w, false).expect("bf16-exact");
        assert_eq!(aw.to_f32(), w.to_owned());
        let want = naive(&x, m, k, &w.to_owned(), Some(&bias));
        // f32 by three products: within f32 rounding of a k-term sum
        let mut y = vec![f32::NAN; m * n];
        product(
            &aw,
            &x,
            m,
            Some(&bias),
            Some(&res),
            &mut y,
            Parts::Three,
            chunk,
        );
        let bound = 4.0 * (k as f64).sqrt() * f32::EPSILON as f64;
        for i in 0..m * n {
            let scale: f64 = 1.0
                + (0..k)
                    .map(|j| (x[i / n * k + j] * w[[i % n, j]]).abs() as f64)
                    .sum::<f64>();
            let d = (y[i] as f64 - want[i] - res[i] as f64).abs();
            assert!(
                d <= bound * scale,
                "{m}x{k}x{n} at {i}: {} vs {}",
                y[i],
                want[i]
            );
        }
        // bf16: the same product of the rounded inputs
        let xr: Vec<f32> = x.iter().map(|&v| round_bf16(v)).collect();
        let want = naive(&xr, m, k, &w.to_owned(), None);
        product(&aw, &x, m, None, None, &mut y, Parts::One, chunk);
        for i in 0..m * n {
            let scale: f64 = 1.0
                + (0..k)
                    .map(|j| (xr[i / n * k + j] * w[[i % n, j]]).abs() as f64)
                    .sum::<f64>();
            assert!(
                (y[i] as f64 - want[i]).abs() <= bound * scale,
                "bf16 {m}x{k}x{n} at {i}"
            );
        }
        // half inputs: the product of the inputs rounded to 11 significant bits
        let xh: Vec<f32> = x
            .iter()
            .map(|&v| crate::kernels::gemm::round_half_precision(v))
            .collect();
        let want = naive(&xh, m, k, &w.to_owned(), None);
        product(&aw, &x, m, None, None, &mut y, Parts::Two, chunk);
        for i in 0..m * n {
            let scale: f64 = 1.0
                + (0..k)
                    .map(|j| (xh[i / n * k + j] * w[[i % n, j]]).abs() as f64)
                    .sum::<f64>();
            assert!(
                (y[i] as f64 - want[i]).abs() <= bound * scale,
                "half {m}x{k}x{n} at {i}"
            );
        }
    }
}

/// The block-major order (each block's chunks in turn, summed in a scratch, y written
/// once) gives the chunk-major order's bits: the same additions in the same order. Shapes
/// with several chunks, bias and residual, a right edge (n not a multiple of 32), rows
/// split among tasks, groups of column blocks (three parts of k = 2048 outgrow L2).
#[test]
fn block_major_order_gives_the_same_bits() {
    let mut lcg = crate::kernels::Lcg(23);
    for (m, k, n, parts) in [
        (70, 300, 50, Parts::One),
        (70, 300, 50, Parts::Two),
        (33, 1100, 300, Parts::Three),
        (300, 2048, 520, Parts::Three),
    ] {
        let mut rnd = || (lcg.unit() - 0.5) as f32;
        let w = Array2::from_shape_fn((n, k), |_| round_bf16(rnd()));
        let x: Vec<f32> = (0..m * k).map(|_| rnd()).collect();
        let bias: Vec<f32> = (0..n).map(|_| rnd()).collect();
        let res: Vec<f32> = (0..m * n).map(|_| rnd()).collect();
        let aw = AmxWeight::pack(w.view(), false).unwrap();
        let mut ys = [vec![f32::NAN; m * n], vec![f32::NAN; m * n]];
        for (y, order) in ys.iter_mut().zip([Order::Auto, Order::ChunkMajor]) {
            aw.linear_emulated(&x, m, Some(&bias), Some(&res), y, parts, 64, order);
        }
        assert!(ys[0].iter().all(|v| v.is_finite()), "{m}x{k}x{n}");
        let same = ys[0]
            .iter()
            .zip(&ys[1])
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "{m}x{k}x{n} {parts:?}");
    }
}

/// Under bf16's normal range (~1.2e-38) the unit reads a part as zero: a subnormal input
/// adds nothing, and a tiny normal one keeps its parts that are normal (here hi and mid:
/// the product is exact to 2^-16 of itself).
#[test]
fn parts_under_the_normal_range_are_zero() {
    if !available() {
        return;
    }
    let w = Array2::from_elem((1, 2), 1.0f32);
    let aw = AmxWeight::pack(w.view(), false).unwrap();
    let mut y = [0.0f32];
    aw.linear(&[1e-39, 3.0], 1, None, None, &mut y, Parts::Three);
    assert_eq!(y[0], 3.0);
    // x is normal, its second and third parts are not: the unit reads them as zero (then
    // y is x's first part exactly) or, on a unit that keeps subnormal inputs, y is x to
    // f32's accuracy; nothing else
    let x = 1.2345678e-36f32;
    aw.linear(&[x, 0.0], 1, None, None, &mut y, Parts::Three);
    let hi = round_bf16(x);
    assert!(
        y[0] == hi || ((y[0] - x) / x).abs() < 2f32.powi(-16),
        "{:e} is neither x = {x:e} nor its first part {hi:e}",
        y[0]
    );
    eprintln!(
        "subnormal parts {}",
        if y[0] == hi { "read as zero" } else { "kept" }
    );
}

#[test]
fn refuses_inexact_weights_unless_rounding() {
    let w = Array2::from_shape_fn((3, 4), |(i, j)| 0.1 * (i + j) as f32);
    assert!(AmxWeight::pack(w.view(), false).is_none());
    let aw = AmxWeight::pack(w.view(), true).unwrap();
    assert_eq!(aw.to_f32(), w.mapv(round_bf16));
}

#[test]
fn propagates_nan_and_inf() {
    let (m, k, n) = (3, 40, 5);
    let w = Array2::from_shape_fn((n, k), |(i, j)| if (i + j) % 3 == 0 { 0.5 } else { -0.25 });
    let mut x = vec![1.0f32; m * k];
    x[k + 3] = f32::INFINITY; // row 1
    x[2 * k + 7] = f32::NAN; // row 2
    let aw = AmxWeight::pack(w.view(), false).unwrap();
    for parts in [Parts::One, Parts::Three] {
        let mut y = vec![0.0; m * n];
        product(&aw, &x, m, None, None, &mut y, parts, None);
        assert!(y[..n].iter().all(|v| v.is_finite()), "{parts:?}");
        for o in 0..n {
            let want = if (o + 3) % 3 == 0 {
                f32::INFINITY
            } else {
                f32::NEG_INFINITY
            };
            assert_eq!(y[n + o], want, "{parts:?} col {o}");
            assert!(y[2 * n + o].is_nan(), "{parts:?}");
        }
    }
}

#[test]
fn peak_runs() {
    if let Some(g) = amx_peak_gflops(1, 100_000) {
        assert!(g > 0.0);
    }
}
