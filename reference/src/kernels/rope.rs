//! The axial 2-D rope (upstream `Glm5NextVisionRotaryEmbedding` + `apply_rotary_pos_emb_vision`).

use crate::kernels::row_slice;
use crate::real::Real;
use ndarray::{Array2, ArrayView1, ArrayView2, ArrayViewMut2, Axis, Zip};
use rayon::prelude::*;

/// `inv_freq[j] = 1 / theta^((2j) / (head_dim/2))` for `j < head_dim/4`, each step rounded in `F`
/// as torch does in f32 (the exponent, the power, the reciprocal).
pub fn inv_freq<F: Real>(head_dim: usize, theta: f64) -> Vec<F> {
    let spatial = head_dim / 2;
    let base = F::from_f64(theta).to_f64();
    (0..spatial)
        .step_by(2)
        .map(|k| {
            let e = F::from_f64(k as f64) / F::from_f64(spatial as f64);
            F::ONE / F::from_f64(base.powf(e.to_f64()))
        })
        .collect()
}

/// The (cos, sin) tables the blocks receive, each `[tokens, head_dim]`: for a token at (h, w),
/// angles = cat(h * inv_freq, w * inv_freq) repeated twice over head_dim.
pub fn tables<F: Real>(
    positions: &[[usize; 2]],
    head_dim: usize,
    theta: f64,
) -> (Array2<F>, Array2<F>) {
    let inv = inv_freq::<F>(head_dim, theta);
    let q = inv.len(); // head_dim / 4
    let n = positions.len();
    let mut cos = Array2::<F>::from_elem((n, head_dim), F::ZERO);
    let mut sin = Array2::<F>::from_elem((n, head_dim), F::ZERO);
    Zip::from(cos.axis_iter_mut(Axis(0)))
        .and(sin.axis_iter_mut(Axis(0)))
        .and(ndarray::ArrayView1::from(positions))
        .par_for_each(|mut c, mut s, &[h, w]| {
            for (axis, pos) in [h, w].into_iter().enumerate() {
                for (j, &f) in inv.iter().enumerate() {
                    let angle = F::from_f64(pos as f64) * f;
                    let (cv, sv) = (angle.cos(), angle.sin());
                    for rep in 0..2 {
                        let col = rep * 2 * q + axis * q + j;
                        c[col] = cv;
                        s[col] = sv;
                    }
                }
            }
        });
    (cos, sin)
}

/// Rotates `x` `[tokens, heads * head_dim]` in place: `x * cos + rotate_half(x) * sin` per head,
/// rotate_half pairing d with d + head_dim/2 (`[-x2, x1]`).
pub fn apply<F: Real>(mut x: ArrayViewMut2<F>, cos: ArrayView2<F>, sin: ArrayView2<F>) {
    let hd = cos.ncols();
    assert_eq!(
        x.ncols() % hd,
        0,
        "rope: width is not a multiple of head_dim"
    );
    assert_eq!(x.nrows(), cos.nrows(), "rope: table rows");
    Zip::from(x.axis_iter_mut(Axis(0)))
        .and(cos.axis_iter(Axis(0)))
        .and(sin.axis_iter(Axis(0)))
        .par_for_each(|mut row, c, s| {
            let (c, s) = (row_slice(c), row_slice(s));
            let mut head = vec![F::ZERO; hd];
            let mut out = vec![F::ZERO; hd];
            for h0 in (0..row.len()).step_by(hd) {
                for (d, v) in head.iter_mut().enumerate() {
                    *v = row[h0 + d];
                }
                rotate(&head, &c, &s, &mut out);
                for (d, &v) in out.iter().enumerate() {
                    row[h0 + d] = v;
                }
            }
        });
}

/// A block's q and k from its fused projection `qkv` `[tokens, 3 * d]`: upstream's per-head
/// RMSNorm of the q and k column blocks (weights `wq`, `wk` `[head_dim]`), then the rope, one
/// pass per token; returns `[tokens, 2 * d]` (q's columns, then k's). The same bits as
/// [`crate::kernels::norm::rms_norm_groups`] followed by [`apply`]. With `keep_normed`, also
/// returns q and k normalized, before the rope (the `q_norm` / `k_norm` taps), likewise.
#[allow(clippy::too_many_arguments)]
pub fn qk_norm_rope<F: Real>(
    qkv: ArrayView2<F>,
    d: usize,
    wq: ArrayView1<F>,
    wk: ArrayView1<F>,
    eps: f64,
    cos: ArrayView2<F>,
    sin: ArrayView2<F>,
    keep_normed: bool,
) -> (Array2<F>, Option<Array2<F>>) {
    let n = qkv.nrows();
    let mut qk = vec![F::ZERO; n * 2 * d];
    let mut normed = keep_normed.then(|| vec![F::ZERO; n * 2 * d]);
    qk_norm_rope_into(
        qkv,
        d,
        wq,
        wk,
        eps,
        cos,
        sin,
        &mut qk,
        normed.as_deref_mut(),
    );
    let shaped = |v: Vec<F>| Array2::from_shape_vec((n, 2 * d), v).expect("n x 2d values");
    (shaped(qk), normed.map(shaped))
}

/// [`qk_norm_rope`] into the caller's `qk` `[tokens, 2 d]` (and `normed`, same shape, when
/// given), every value overwritten (a forward reuses one buffer: a fresh zeroed 512 KiB at
/// 8x8 was a serial memset of ~15 us per block).
#[allow(clippy::too_many_arguments)]
pub fn qk_norm_rope_into<F: Real>(
    qkv: ArrayView2<F>,
    d: usize,
    wq: ArrayView1<F>,
    wk: ArrayView1<F>,
    eps: f64,
    cos: ArrayView2<F>,
    sin: ArrayView2<F>,
    qk: &mut [F],
    normed: Option<&mut [F]>,
) {
    let n = qkv.nrows();
    let hd = cos.ncols();
    assert!(qkv.ncols() >= 2 * d, "qk_norm_rope: qkv narrower than 2 d");
    assert!(
        d.is_multiple_of(hd) && wq.len() == hd && wk.len() == hd,
        "qk_norm_rope: head_dim"
    );
    assert!(
        cos.nrows() == n && sin.dim() == cos.dim(),
        "qk_norm_rope: table rows"
    );
    let eps = F::from_f64(eps);
    let (wq, wk) = (wq.to_vec(), wk.to_vec());
    #[cfg(target_arch = "x86_64")]
    let wide = std::arch::is_x86_feature_detected!("avx512f");
    // token t: q and k normalized per head, rotated into `out`, kept in `keep` when asked
    let work = |t: usize, out: &mut [F], keep: Option<&mut [F]>| {
        let row = row_slice(qkv.row(t));
        let (c, s) = (row_slice(cos.row(t)), row_slice(sin.row(t)));
        let args = TokenArgs {
            qk: &row[..2 * d],
            d,
            wq: &wq,
            wk: &wk,
            eps,
            cos: &c,
            sin: &s,
        };
        #[cfg(target_arch = "x86_64")]
        if wide {
            // SAFETY: AVX-512F was detected above.
            return unsafe { token_avx512(args, out, keep) };
        }
        token(args, out, keep)
    };
    assert_eq!(qk.len(), n * 2 * d, "qk_norm_rope: output length");
    // (rotate_half pairs the two halves of a head: with an odd head_dim its last value would
    // stay unwritten)
    assert!(hd.is_multiple_of(2), "qk_norm_rope: odd head_dim");
    if n == 0 || d == 0 {
        return;
    }
    match normed {
        Some(normed) => {
            assert_eq!(normed.len(), n * 2 * d, "qk_norm_rope: normed length");
            qk.par_chunks_mut(2 * d)
                .zip(normed.par_chunks_mut(2 * d))
                .enumerate()
                .for_each(|(t, (out, keep))| work(t, out, Some(keep)))
        }
        None => crate::kernels::team::for_each_chunk_mut(qk, 2 * d, |t, out| work(t, out, None)),
    }
}

/// One token's q and k (`[2 d]`) with their weights, eps and rope rows.
struct TokenArgs<'a, F> {
    qk: &'a [F],
    d: usize,
    wq: &'a [F],
    wk: &'a [F],
    eps: F,
    cos: &'a [F],
    sin: &'a [F],
}

/// [`token`] built for AVX-512 (the norm, the rope and their loops inlined into one function:
/// per head, an out-of-line norm call and the rope's loops in baseline SSE2 took 2-4x longer).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn token_avx512<F: Real>(a: TokenArgs<'_, F>, out: &mut [F], keep: Option<&mut [F]>) {
    token(a, out, keep)
}

/// One token: each head of q and k normalized (the head buffer on the stack), rotated into
/// `out`, copied into `keep` when asked. No fused multiply-adds: the same bits in every build.
#[inline(always)]
fn token<F: Real>(a: TokenArgs<'_, F>, out: &mut [F], mut keep: Option<&mut [F]>) {
    let hd = a.cos.len();
    let mut stack = [F::ZERO; 256];
    let mut heap = Vec::new();
    let head: &mut [F] = if hd <= stack.len() {
        &mut stack[..hd]
    } else {
        heap.resize(hd, F::ZERO);
        &mut heap
    };
    for (h, x) in a.qk.chunks_exact(hd).enumerate() {
        let w = if h * hd < a.d { a.wq } else { a.wk };
        super::norm::norm_group_any(x, w, a.eps, head);
        if let Some(keep) = keep.as_deref_mut() {
            keep[h * hd..(h + 1) * hd].copy_from_slice(head);
        }
        rotate(head, a.cos, a.sin, &mut out[h * hd..(h + 1) * hd]);
    }
}

/// `out = x * cos + rotate_half(x) * sin` for one head (`rotate_half` pairs d with d + hd/2:
/// `[-x2, x1]`).
#[inline(always)]
fn rotate<F: Real>(x: &[F], c: &[F], s: &[F], out: &mut [F]) {
    let half = x.len() / 2;
    let (x1, x2) = x.split_at(half);
    let (o1, o2) = out.split_at_mut(half);
    for (((o, &a), &b), (&cv, &sv)) in o1.iter_mut().zip(x1).zip(x2).zip(c.iter().zip(s)) {
        *o = a * cv + -b * sv;
    }
    for (((o, &a), &b), (&cv, &sv)) in o2
        .iter_mut()
        .zip(x2)
        .zip(x1)
        .zip(c[half..].iter().zip(&s[half..]))
    {
        *o = a * cv + b * sv;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_match_a_hand_computed_case() {
        // head_dim 8: inv_freq = [1, theta^-0.5]; token at (h, w) = (2, 3), theta 100.
        let (cos, sin) = tables::<f64>(&[[0, 0], [2, 3]], 8, 100.0);
        let f = [1.0, 0.1];
        let angles = [2.0 * f[0], 2.0 * f[1], 3.0 * f[0], 3.0 * f[1]];
        for col in 0..8 {
            let a = angles[col % 4];
            assert!((cos[[1, col]] - a.cos()).abs() < 1e-15, "cos col {col}");
            assert!((sin[[1, col]] - a.sin()).abs() < 1e-15, "sin col {col}");
            assert_eq!((cos[[0, col]], sin[[0, col]]), (1.0, 0.0));
        }
        let inv32 = inv_freq::<f32>(16, 10_000.0);
        assert_eq!(inv32.len(), 4);
        for (j, v) in inv32.iter().enumerate() {
            let want = 1.0 / 10_000f64.powf(2.0 * j as f64 / 8.0);
            assert!(((*v as f64) - want).abs() <= 1e-7 * want);
        }
    }

    #[test]
    fn apply_is_rotate_half() {
        // one token, two heads of 4: angle pairs (d, d+2)
        let (cos, sin) = tables::<f64>(&[[1, 2]], 4, 10.0);
        let mut x = ndarray::array![[1.0f64, 2.0, 3.0, 4.0, -1.0, 0.5, 0.25, 2.0]];
        let orig = x.clone();
        apply(x.view_mut(), cos.view(), sin.view());
        for h in 0..2 {
            let o = |d: usize| orig[[0, h * 4 + d]];
            let (c, s) = (|d: usize| cos[[0, d]], |d: usize| sin[[0, d]]);
            let want = [
                o(0) * c(0) - o(2) * s(0),
                o(1) * c(1) - o(3) * s(1),
                o(2) * c(2) + o(0) * s(2),
                o(3) * c(3) + o(1) * s(3),
            ];
            for d in 0..4 {
                assert!((x[[0, h * 4 + d]] - want[d]).abs() < 1e-15);
            }
        }
        // a rotation keeps each (d, d + half) pair's norm
        let n0 = orig[[0, 0]].powi(2) + orig[[0, 2]].powi(2);
        let n1 = x[[0, 0]].powi(2) + x[[0, 2]].powi(2);
        assert!((n0 - n1).abs() < 1e-12);
    }

    /// The fused pass computes what the two separate ones do, bit for bit, in f32 and f64, with
    /// and without the normalized copies (the taps), on a row-strided qkv.
    #[test]
    fn qk_norm_rope_is_norm_then_apply() {
        fn check<F: Real>() {
            let (n, heads, hd) = (7, 3, 8);
            let d = heads * hd;
            let mut lcg = crate::kernels::Lcg(3);
            let qkv = ndarray::Array2::from_shape_fn((n, 3 * d + 5), |_| {
                F::from_f64(lcg.unit() * 6.0 - 3.0)
            });
            let qkv = qkv.slice(ndarray::s![.., ..3 * d]);
            let wq = ndarray::Array1::from_shape_fn(hd, |c| F::from_f64(0.5 + c as f64 * 0.1));
            let wk = ndarray::Array1::from_shape_fn(hd, |c| F::from_f64(1.5 - c as f64 * 0.07));
            let pos: Vec<[usize; 2]> = (0..n).map(|t| [t / 3, t % 3]).collect();
            let (cos, sin) = tables::<F>(&pos, hd, 100.0);
            let eps = 1e-6;
            let mut q = crate::kernels::norm::rms_norm_groups(
                qkv.slice(ndarray::s![.., ..d]),
                wq.view(),
                eps,
            );
            let mut k = crate::kernels::norm::rms_norm_groups(
                qkv.slice(ndarray::s![.., d..2 * d]),
                wk.view(),
                eps,
            );
            let (qn, kn) = (q.clone(), k.clone());
            apply(q.view_mut(), cos.view(), sin.view());
            apply(k.view_mut(), cos.view(), sin.view());
            let bits = |a: ndarray::ArrayView2<F>| -> Vec<u64> {
                a.iter().map(|v| v.to_f64().to_bits()).collect()
            };
            for keep in [false, true] {
                let (qk, normed) = qk_norm_rope(
                    qkv,
                    d,
                    wq.view(),
                    wk.view(),
                    eps,
                    cos.view(),
                    sin.view(),
                    keep,
                );
                assert_eq!(bits(qk.slice(ndarray::s![.., ..d])), bits(q.view()));
                assert_eq!(bits(qk.slice(ndarray::s![.., d..])), bits(k.view()));
                assert_eq!(normed.is_some(), keep);
                if let Some(normed) = normed {
                    assert_eq!(bits(normed.slice(ndarray::s![.., ..d])), bits(qn.view()));
                    assert_eq!(bits(normed.slice(ndarray::s![.., d..])), bits(kn.view()));
                }
            }
        }
        check::<f32>();
        check::<f64>();
    }
}
