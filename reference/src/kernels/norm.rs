//! RMSNorm (upstream `Glm5NextRMSNorm`) and LayerNorm (`torch.nn.LayerNorm`).
//! Sums of squares and means accumulate in f64, so the f32 path rounds once per row statistic.

use crate::kernels::{row_slice, team};
use crate::real::Real;
use ndarray::{Array2, ArrayView1, ArrayView2};

/// `w * (x * rsqrt(mean(x^2) + eps))` over each row; `x` `[rows, n]`, `w` `[n]`.
pub fn rms_norm<F: Real>(x: ArrayView2<F>, w: ArrayView1<F>, eps: f64) -> Array2<F> {
    rms_norm_groups(x, w, eps)
}

/// RMSNorm over each group of `w.len()` consecutive columns (the per-head q/k norms: `x` is
/// `[tokens, heads * head_dim]`, `w` `[head_dim]`). `x` may be a strided column block.
pub fn rms_norm_groups<F: Real>(x: ArrayView2<F>, w: ArrayView1<F>, eps: f64) -> Array2<F> {
    let mut y = vec![F::ZERO; x.len()];
    rms_norm_groups_into(x, w, eps, &mut y);
    Array2::from_shape_vec(x.raw_dim(), y).expect("as many values as x")
}

/// [`rms_norm`] into the caller's `y` (`x`'s shape, row-major, every value overwritten): a
/// forward reuses one buffer instead of a fresh zeroed array (a serial 256 KiB memset per norm
/// at 8x8).
pub fn rms_norm_into<F: Real>(x: ArrayView2<F>, w: ArrayView1<F>, eps: f64, y: &mut [F]) {
    rms_norm_groups_into(x, w, eps, y)
}

/// [`rms_norm_groups`] into the caller's `y`, as [`rms_norm_into`].
pub fn rms_norm_groups_into<F: Real>(x: ArrayView2<F>, w: ArrayView1<F>, eps: f64, y: &mut [F]) {
    let g = w.len();
    assert_eq!(
        x.ncols() % g,
        0,
        "rms_norm: width is not a multiple of the weight length"
    );
    assert_eq!(y.len(), x.len(), "rms_norm: output length");
    if x.is_empty() {
        return;
    }
    let eps = F::from_f64(eps);
    let w = w.to_vec();
    team::for_each_chunk_mut(y, x.ncols(), |i, yr| {
        let xr = row_slice(x.row(i));
        for (xg, yg) in xr.chunks_exact(g).zip(yr.chunks_exact_mut(g)) {
            norm_group(xg, &w, eps, yg);
        }
    });
}

/// One RMSNorm group, `y = w * (x * r)` with `r = 1 / sqrt(mean(x * x) + eps)`: the squares are
/// taken in `F` and summed in f64 (eight interleaved partial sums, so the loop vectorises; the
/// mean is rounded to `F` once). The AVX-512 build of the loops is used where the CPU has it;
/// both builds give the same bits (no fused multiply-adds).
pub fn norm_group<F: Real>(x: &[F], w: &[F], eps: F, y: &mut [F]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: the feature was detected at run time.
        return unsafe { norm_group_avx512(x, w, eps, y) };
    }
    norm_group_any(x, w, eps, y)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn norm_group_avx512<F: Real>(x: &[F], w: &[F], eps: F, y: &mut [F]) {
    norm_group_any(x, w, eps, y)
}

/// [`norm_group`] inlined into the caller's build (callers built for AVX-512 themselves, like
/// the rope's per-token function, call it directly; the same bits either way).
#[inline(always)]
pub(crate) fn norm_group_any<F: Real>(x: &[F], w: &[F], eps: F, y: &mut [F]) {
    assert!(
        x.len() == w.len() && y.len() == w.len(),
        "norm_group: lengths"
    );
    let var = F::from_f64(sum_squares(x) / x.len() as f64);
    let r = F::ONE / (var + eps).sqrt();
    for ((y, &x), &w) in y.iter_mut().zip(x).zip(w) {
        *y = w * (x * r);
    }
}

/// The sum of `x * x` (each square in `F`) in f64: value `c` goes to partial sum `c % 8`, and the
/// eight are added pairwise in a fixed order.
#[inline(always)]
fn sum_squares<F: Real>(x: &[F]) -> f64 {
    let mut acc = [0.0f64; 8];
    let mut chunks = x.chunks_exact(8);
    for c in &mut chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += (v * v).to_f64();
        }
    }
    for (a, &v) in acc.iter_mut().zip(chunks.remainder()) {
        *a += (v * v).to_f64();
    }
    ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]))
}

/// LayerNorm over each row: `(x - mean) / sqrt(var + eps) * w + b` (biased variance).
pub fn layer_norm<F: Real>(
    x: ArrayView2<F>,
    w: ArrayView1<F>,
    b: ArrayView1<F>,
    eps: f64,
) -> Array2<F> {
    let n = x.ncols();
    let mut y = Array2::<F>::from_elem(x.raw_dim(), F::ZERO);
    let ys = y.as_slice_mut().expect("a fresh array is contiguous");
    team::for_each_chunk_mut(ys, n, |i, yr| {
        let xr = x.row(i);
        let mean = xr.iter().map(|v| v.to_f64()).sum::<f64>() / n as f64;
        let var = xr.iter().map(|v| (v.to_f64() - mean).powi(2)).sum::<f64>() / n as f64;
        let mean = F::from_f64(mean);
        let rstd = F::from_f64(1.0 / (var + eps).sqrt());
        for c in 0..n {
            yr[c] = (xr[c] - mean) * rstd * w[c] + b[c];
        }
    });
    y
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{Array1, array};

    #[test]
    fn rms_norm_matches_the_formula() {
        let x = array![[1.0f64, -2.0, 3.0, 0.5], [0.0, 0.0, 0.0, 0.0]];
        let w = array![0.5f64, 1.0, 2.0, -1.0];
        let eps = 1e-3;
        let y = rms_norm(x.view(), w.view(), eps);
        let ms: f64 = (1.0 + 4.0 + 9.0 + 0.25) / 4.0;
        let r = 1.0 / (ms + eps).sqrt();
        let want = array![[0.5 * r, -2.0 * r, 6.0 * r, -0.5 * r], [0.0, 0.0, 0.0, 0.0]];
        assert!((&y - &want).iter().all(|d| d.abs() < 1e-15), "{y}");
    }

    #[test]
    fn per_head_groups_are_independent() {
        let x = Array2::from_shape_fn((3, 8), |(i, j)| (i * 8 + j) as f64 * 0.37 - 2.0);
        let w = array![1.5f64, -0.5, 2.0, 0.25];
        let y = rms_norm_groups(x.view(), w.view(), 1e-6);
        for h in 0..2 {
            let part = x.slice(ndarray::s![.., h * 4..h * 4 + 4]);
            let yh = rms_norm(part, w.view(), 1e-6);
            assert_eq!(y.slice(ndarray::s![.., h * 4..h * 4 + 4]), yh);
        }
    }

    #[test]
    fn layer_norm_matches_the_formula() {
        let x = array![[1.0f64, 2.0, 4.0, 7.0]];
        let w = Array1::from(vec![1.0, 2.0, 0.5, -1.0]);
        let b = Array1::from(vec![0.1, 0.0, -0.1, 0.2]);
        let y = layer_norm(x.view(), w.view(), b.view(), 1e-5);
        let mean = 3.5;
        let var = (6.25 + 2.25 + 0.25 + 12.25) / 4.0;
        for c in 0..4 {
            let want = (x[[0, c]] - mean) / (var + 1e-5f64).sqrt() * w[c] + b[c];
            assert!((y[[0, c]] - want).abs() < 1e-15);
        }
    }
}
