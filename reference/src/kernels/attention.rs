//! Segmented non-causal attention, blocked with an online softmax: no `[n, n]` matrix is ever
//! formed (memory is linear in the segment length), work is spread over heads x query blocks.

use crate::kernels::gemm::{Par, matmul_into};
use crate::kernels::team;
use crate::real::Real;
use ndarray::{Array2, ArrayView2, ArrayViewMut2, s};

/// Query rows per task (the 1024-token, 16-head attention of a 32x32 image measured 23-30 ms with
/// 256-1024 here against 34-51 ms with 128: fewer re-packings of each K and V block).
const Q_BLOCK: usize = 512;
/// Key rows per step of the online softmax.
const K_BLOCK: usize = 256;

/// `softmax(scale * q kᵀ) v` per head, tokens attending only inside their segment.
/// `q`, `k`, `v`: `[tokens, heads * head_dim]` (any row stride); `cu_seqlens`: segment
/// boundaries `[0, ..., tokens]` (non-decreasing). Returns `[tokens, heads * head_dim]`.
pub fn attention<F: Real>(
    q: ArrayView2<F>,
    k: ArrayView2<F>,
    v: ArrayView2<F>,
    cu_seqlens: &[usize],
    heads: usize,
    scale: F,
) -> Array2<F> {
    let (n, d) = q.dim();
    assert!(
        k.dim() == (n, d) && v.dim() == (n, d),
        "attention: q, k, v shapes differ"
    );
    assert_eq!(d % heads, 0);
    assert_eq!(
        cu_seqlens.last().copied().unwrap_or(0),
        n,
        "attention: cu_seqlens must end at tokens"
    );
    let hd = d / heads;

    assert!(
        cu_seqlens.first().is_none_or(|&s| s == 0) && cu_seqlens.windows(2).all(|w| w[0] <= w[1]),
        "attention: cu_seqlens must start at 0 and not decrease"
    );

    // Tasks (head, segment start, segment end, query start, query end): together they cover
    // every (token, head) once, the segments tiling 0..n (asserted above).
    let mut tasks = Vec::new();
    for h in 0..heads {
        for seg in cu_seqlens.windows(2) {
            let (s0, s1) = (seg[0], seg[1]);
            let mut r0 = s0;
            while r0 < s1 {
                let r1 = (r0 + Q_BLOCK).min(s1);
                tasks.push((h, s0, s1, r0, r1));
                r0 = r1;
            }
        }
    }
    // Each task writes its rows' head columns of y straight away: no head-major copy, and y is
    // not zeroed first (both cost ~0.5 MiB of serial writes a block at 8x8).
    let mut y: Vec<F> = Vec::with_capacity(n * d);
    let y_addr = y.as_mut_ptr() as usize;
    team::for_each(tasks.len(), |i| {
        let (h, s0, s1, r0, r1) = tasks[i];
        let cols = s![.., h * hd..(h + 1) * hd];
        // this task's queries, its segment's keys and values, of head h
        let qs = q.slice(cols).slice_move(s![r0..r1, ..]);
        let ks = k.slice(cols).slice_move(s![s0..s1, ..]);
        let vs = v.slice(cols).slice_move(s![s0..s1, ..]);
        if s1 - s0 <= SHORT {
            // SAFETY: rows r0..r1 of y (capacity n * d), the head's hd columns of each: inside
            // y, and written by no other task (tasks cover each (token, head) once).
            unsafe {
                let at = (y_addr as *mut F).add(r0 * d + h * hd);
                attend_short(qs, ks, vs, scale, at, d);
            }
            return;
        }
        let mut out = vec![F::ZERO; (r1 - r0) * hd];
        let outv = ArrayViewMut2::from_shape((r1 - r0, hd), &mut out[..]).expect("task size");
        attend_block(qs, ks, vs, scale, outv);
        for (r, row) in (r0..r1).zip(out.chunks_exact(hd)) {
            // SAFETY: y has capacity n * d; r < n and the head's columns are inside a row; no
            // other task writes these values (tasks cover each (token, head) once).
            unsafe {
                let dst = (y_addr as *mut F).add(r * d + h * hd);
                std::ptr::copy_nonoverlapping(row.as_ptr(), dst, hd);
            }
        }
    });
    // SAFETY: every value of y was written above (the tasks cover all n rows of every head).
    unsafe { y.set_len(n * d) };
    Array2::from_shape_vec((n, d), y).expect("n x d values")
}

/// Segments up to this many tokens take [`attend_short`] (an 8x8 image, 64 tokens and 16 heads
/// on 2 threads: ~0.4 ms a block through the general path's two small `gemm` calls per head,
/// ~0.15 ms this way; on this machine both paths give the same bits there).
pub(super) const SHORT: usize = 128;

/// [`attend_block`] for a short segment, all keys at once, without the `gemm` crate: the scores
/// of a query row accumulate over a transposed K (`s[j] += q[c] kᵀ[c][j]`, blocks of [`LANES`]
/// keys held in registers), then `scale`, the softmax, and `out = Σ_j p_j v[j] / Σ_j p_j` (blocks
/// of [`LANES`] head dims). Multiply-adds are fused where the CPU has AVX-512 (hence FMA).
/// q's rows are read where they are; row i of the output goes to `out + i * ldo` (hd values).
///
/// The set-up (kᵀ, v's rows, the scores) shares one allocation: with three zeroed vectors, q's
/// rows collected through `Cow`s, a copy of each output row, and the rows copied through
/// `memmove` calls, the set-up and copies took ~30% of an 8x8 block's attention (perf, one
/// thread). (A thread-local buffer instead, no zeroing at all, was no faster, and stayed
/// allocated: the load test's live heap grew by 30 KiB when it first served a thread.)
///
/// # Safety
/// `out + i * ldo .. + hd` must be valid for writes for every query row i, and not read or
/// written by anyone else meanwhile.
pub(super) unsafe fn attend_short<F: Real>(
    q: ArrayView2<F>,
    k: ArrayView2<F>,
    v: ArrayView2<F>,
    scale: F,
    out: *mut F,
    ldo: usize,
) {
    let (len, hd) = k.dim();
    let nq = q.nrows();
    assert!(len <= SHORT && nq <= SHORT && v.dim() == (len, hd) && q.ncols() == hd);
    let (len_p, hd_p) = (len.next_multiple_of(LANES), hd.next_multiple_of(LANES));
    // q's rows where they are when each is contiguous, else from a copy
    let q_copy;
    let q = if hd <= 1 || q.strides()[1] == 1 {
        q
    } else {
        q_copy = q.as_standard_layout().into_owned();
        q_copy.view()
    };
    let mut q_rows: [&[F]; SHORT] = [&[]; SHORT];
    for (dst, row) in q_rows.iter_mut().zip(q.outer_iter()) {
        *dst = row.to_slice().expect("contiguous rows");
    }
    {
        let mut buf = vec![F::ZERO; hd * len_p + len * hd_p + QR * len_p];
        let (kt, rest) = buf.split_at_mut(hd * len_p);
        let (vp, sc) = rest.split_at_mut(len * hd_p);
        // kᵀ [hd, len_p], zero-padded to whole blocks
        F::transpose_into(k, kt, len_p);
        // v's rows copied side by side (each padded to hd_p): read in place, rows 3D apart in
        // the qkv array, they all fell into the same few L1 sets and the P.V loop ran ~1.6x
        // slower
        for (row, dst) in v.outer_iter().zip(vp.chunks_exact_mut(hd_p)) {
            match row.to_slice() {
                Some(r) => dst.iter_mut().zip(r).for_each(|(d, &s)| *d = s),
                None => dst.iter_mut().zip(row).for_each(|(d, &s)| *d = s),
            }
        }
        let dims = Dims {
            len,
            hd,
            len_p,
            hd_p,
        };
        let (q, vp, sc) = (&q_rows[..nq], &*vp, &mut *sc);
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the features were detected at run time; the caller's contract for out.
            return unsafe { attend_short_avx512(q, kt, vp, dims, scale, sc, out, ldo) };
        }
        // SAFETY: the caller's contract for out.
        unsafe { attend_short_any::<F, false>(q, kt, vp, dims, scale, sc, out, ldo) }
    }
}

/// Keys, head dims, and both rounded up to whole [`LANES`] blocks.
#[derive(Clone, Copy)]
struct Dims {
    len: usize,
    hd: usize,
    len_p: usize,
    hd_p: usize,
}

/// Values per register block of [`attend_short`] (4 AVX-512 vectors of f32).
const LANES: usize = 64;

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn attend_short_avx512<F: Real>(
    q: &[&[F]],
    kt: &[F],
    vp: &[F],
    dims: Dims,
    scale: F,
    sc: &mut [F],
    out: *mut F,
    ldo: usize,
) {
    // SAFETY: the caller's contract for out.
    unsafe { attend_short_any::<F, true>(q, kt, vp, dims, scale, sc, out, ldo) }
}

/// `q` `[qb]` rows of hd, `kt` `[hd, len_p]`, `vp` `[len, hd_p]`, `sc` at least `QR * len_p`,
/// output row i at `out + i * ldo` (see [`attend_short`] for its safety contract).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn attend_short_any<F: Real, const FMA: bool>(
    q: &[&[F]],
    kt: &[F],
    vp: &[F],
    dims: Dims,
    scale: F,
    sc: &mut [F],
    out: *mut F,
    ldo: usize,
) {
    // QR query rows at a time: QR x 4 independent chains of multiply-adds instead of 4 (one
    // row's chains alone wait on the adder's latency); each row's sums keep their order.
    let mut qs = q.chunks_exact(QR);
    let mut i = 0;
    for qr in &mut qs {
        let qr: &[&[F]; QR] = qr.try_into().expect("QR rows");
        // SAFETY: rows i..i + QR exist (the caller's contract)
        unsafe { rows_short::<F, FMA, QR>(qr, kt, vp, dims, scale, sc, out.add(i * ldo), ldo) };
        i += QR;
    }
    for qr in qs.remainder() {
        // SAFETY: row i exists (the caller's contract)
        unsafe { rows_short::<F, FMA, 1>(&[*qr], kt, vp, dims, scale, sc, out.add(i * ldo), ldo) };
        i += 1;
    }
}

/// `R` query rows of [`attend_short_any`] (`sc` at least `R * len_p`; output row r at
/// `out + r * ldo`, hd values, valid for writes).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn rows_short<F: Real, const FMA: bool, const R: usize>(
    qs: &[&[F]; R],
    kt: &[F],
    vp: &[F],
    Dims {
        len,
        hd,
        len_p,
        hd_p,
    }: Dims,
    scale: F,
    sc: &mut [F],
    out: *mut F,
    ldo: usize,
) {
    let madd = |a: F, b: F, acc: F| if FMA { a.mul_add(b, acc) } else { acc + a * b };
    // each row's slice taken once: no bounds checks inside the multiply-add loops (with them,
    // the accumulators went through the stack on every step)
    let qs: [&[F]; R] = std::array::from_fn(|r| &qs[r][..hd]);
    for j0 in (0..len_p).step_by(LANES) {
        let mut acc = [[F::ZERO; LANES]; R];
        for c in 0..hd {
            let ktr: &[F; LANES] = kt[c * len_p + j0..][..LANES].try_into().expect("a block");
            for (a, q) in acc.iter_mut().zip(&qs) {
                let x = q[c];
                for (a, &kv) in a.iter_mut().zip(ktr) {
                    *a = madd(x, kv, *a);
                }
            }
        }
        for (r, a) in acc.iter().enumerate() {
            for (s, &a) in sc[r * len_p + j0..][..LANES].iter_mut().zip(a) {
                *s = a * scale;
            }
        }
    }
    // the softmax's loops inlined into this (vectorised) function, not through the
    // dispatching `F::max_slice` / `F::exp_shift_sum` (the same functions, the same bits)
    let mut inv = [F::ZERO; R];
    for (r, inv) in inv.iter_mut().enumerate() {
        let sc = &mut sc[r * len_p..r * len_p + len];
        let m = crate::kernels::act::max_lanes(sc);
        let sum = crate::kernels::act::exp_shift_sum_lanes(sc, m);
        *inv = F::ONE / sum;
    }
    let ps: [&[F]; R] = std::array::from_fn(|r| &sc[r * len_p..r * len_p + len]);
    assert!(vp.len() >= len * hd_p && hd_p.is_multiple_of(LANES));
    for c0 in (0..hd_p).step_by(LANES) {
        let mut acc = [[F::ZERO; LANES]; R];
        for j in 0..len {
            // SAFETY (both): j < len, the length of every `ps` row and at most vp's rows of
            // hd_p, a multiple of LANES, so c0 + LANES <= hd_p (asserted above). Unchecked
            // because with a panic possible in the loop the accumulators went through the
            // stack on every step (2x slower).
            let vr = unsafe { &*(vp.as_ptr().add(j * hd_p + c0) as *const [F; LANES]) };
            for (a, p) in acc.iter_mut().zip(&ps) {
                let p = unsafe { *p.get_unchecked(j) };
                for (a, &vc) in a.iter_mut().zip(vr) {
                    *a = madd(p, vc, *a);
                }
            }
        }
        let w = LANES.min(hd - c0);
        for (r, a) in acc.iter().enumerate() {
            for (j, &a) in a.iter().enumerate().take(w) {
                // SAFETY: value c0 + j < hd of output row r (the caller's contract); written,
                // not read (it may be uninitialised)
                unsafe { out.add(r * ldo + c0 + j).write(a * inv[r]) };
            }
        }
    }
}

/// [`Real::transpose_into`] one value at a time (unchecked inside the rows: a checked copy was
/// most of the short attention's set-up).
pub(crate) fn transpose_scalar<F: Real>(k: ArrayView2<F>, kt: &mut [F], ld: usize) {
    let (rows, cols) = k.dim();
    assert!(
        ld >= rows && kt.len() >= cols * ld,
        "transpose: output size"
    );
    for (j, row) in k.outer_iter().enumerate() {
        for (c, &x) in row.iter().enumerate() {
            // SAFETY: c < cols and j < rows <= ld, so c * ld + j < cols * ld <= kt.len().
            unsafe { *kt.get_unchecked_mut(c * ld + j) = x };
        }
    }
}

/// [`Real::transpose_into`] for f32: 16 x 16 blocks transposed in AVX-512 registers (four
/// rounds of 16 shuffles), the ragged edges one value at a time.
pub(crate) fn transpose_f32(k: ArrayView2<f32>, kt: &mut [f32], ld: usize) {
    let (rows, cols) = k.dim();
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") && k.strides()[1] == 1 && rows >= 16 {
        assert!(
            ld >= rows && kt.len() >= cols * ld,
            "transpose: output size"
        );
        let (r16, c16) = (rows / 16 * 16, cols / 16 * 16);
        let row_ptr = |j: usize| k.row(j).as_ptr();
        for j0 in (0..r16).step_by(16) {
            let src: [*const f32; 16] = std::array::from_fn(|i| row_ptr(j0 + i));
            for c0 in (0..c16).step_by(16) {
                // SAFETY: rows j0..j0 + 16 have at least c0 + 16 columns at unit stride;
                // rows c0..c0 + 16 of kt hold j0 + 16 <= ld values from their starts (asserted
                // above); AVX-512F was detected.
                unsafe { transpose16(&src, c0, kt.as_mut_ptr().add(c0 * ld + j0), ld) };
            }
        }
        // the edges: columns past c16 of the blocked rows, rows past r16
        for j in 0..rows {
            let row = k.row(j);
            let from = if j < r16 { c16 } else { 0 };
            for c in from..cols {
                kt[c * ld + j] = row[c];
            }
        }
        return;
    }
    transpose_scalar(k, kt, ld) // (checks the sizes itself)
}

/// `out[c * ld + i] = src[i][c0 + c]` for i, c < 16.
///
/// # Safety
/// Each `src[i]` readable for `c0 + 16` values, `out` writable at `c * ld .. c * ld + 16` for
/// c < 16; AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn transpose16(src: &[*const f32; 16], c0: usize, out: *mut f32, ld: usize) {
    use std::arch::x86_64::*;
    // SAFETY: the caller's contract.
    unsafe {
        let r: [__m512; 16] = std::array::from_fn(|i| _mm512_loadu_ps(src[i].add(c0)));
        // 32-bit interleave of row pairs (within 128-bit lanes)
        let t: [__m512; 16] = std::array::from_fn(|i| {
            let (a, b) = (r[i / 2 * 2], r[i / 2 * 2 + 1]);
            if i % 2 == 0 {
                _mm512_unpacklo_ps(a, b)
            } else {
                _mm512_unpackhi_ps(a, b)
            }
        });
        // 64-bit interleave: u[4g + m] holds columns m, m + 4, m + 8, m + 12 of rows 4g..4g + 4,
        // one per 128-bit lane
        let u: [__m512; 16] = std::array::from_fn(|i| {
            let (g, m) = (i / 4, i % 4);
            let (a, b) = (
                _mm512_castps_pd(t[4 * g + m / 2]),
                _mm512_castps_pd(t[4 * g + m / 2 + 2]),
            );
            _mm512_castpd_ps(if m % 2 == 0 {
                _mm512_unpacklo_pd(a, b)
            } else {
                _mm512_unpackhi_pd(a, b)
            })
        });
        // 128-bit lanes gathered across the four row groups
        for m in 0..4 {
            let (a, b, c, d) = (u[m], u[4 + m], u[8 + m], u[12 + m]);
            let v0 = _mm512_shuffle_f32x4::<0x88>(a, b);
            let v1 = _mm512_shuffle_f32x4::<0xdd>(a, b);
            let v2 = _mm512_shuffle_f32x4::<0x88>(c, d);
            let v3 = _mm512_shuffle_f32x4::<0xdd>(c, d);
            _mm512_storeu_ps(out.add(m * ld), _mm512_shuffle_f32x4::<0x88>(v0, v2));
            _mm512_storeu_ps(out.add((m + 4) * ld), _mm512_shuffle_f32x4::<0x88>(v1, v3));
            _mm512_storeu_ps(out.add((m + 8) * ld), _mm512_shuffle_f32x4::<0xdd>(v0, v2));
            _mm512_storeu_ps(out.add((m + 12) * ld), _mm512_shuffle_f32x4::<0xdd>(v1, v3));
        }
    }
}

/// Query rows per pass of [`attend_short`].
const QR: usize = 4;

/// One query block against one segment's keys: `out` `[qb, hd]` = softmax(scale q kᵀ) v.
///
/// Both products go through the `gemm` crate (perf on the 2-core VM, 1024 tokens x 16 heads:
/// 61% of the time in its kernel, 15% in its packing, 15% in the exponentials). An AVX-512
/// kernel of our own for the f32 mode (kᵀ transposed once a key block, 8 x 32 score tiles and
/// 6 x 64 output tiles in registers, the outputs rescaled and accumulated in place, no
/// packing) measured no faster on the GPU machine's Xeon, the two taking turns three times in
/// one call (`GLM5V_ATTN_ONLY=1 full_geometry 2` against `GLM5V_CPU_ISA=generic`): 1024 tokens
/// 30.6-41.1 ms against 32.0-36.6, 5184 tokens 794-1078 ms against 782-897; on the VM 28.4
/// against 30.6-32.0 ms (1024). Again with q and each key block's v copied into contiguous
/// rows (a head's slices of `[tokens, heads x head_dim]` lie a multiple of 4 KiB apart, in the
/// same few L1 sets) and the softmax's exponentials four lane groups at a time (the same bits),
/// against this path, four turns each: 1024 tokens 22.0-29.5 ms against 23.7-25.9, 5184 tokens
/// 581-646 against 592-705. Neither was kept.
fn attend_block<F: Real>(
    q: ArrayView2<F>,
    k: ArrayView2<F>,
    v: ArrayView2<F>,
    scale: F,
    mut out: ArrayViewMut2<F>,
) {
    let qb = q.nrows();
    let len = k.nrows();
    let mut row_max = vec![F::ZERO; qb];
    let mut row_sum = vec![F::ZERO; qb];
    let mut scores = Array2::<F>::from_elem((qb, K_BLOCK.min(len)), F::ZERO);
    out.fill(F::ZERO);
    let mut c0 = 0;
    while c0 < len {
        let c1 = (c0 + K_BLOCK).min(len);
        let mut sc = scores.slice_mut(s![.., ..c1 - c0]);
        matmul_into(
            sc.view_mut(),
            q,
            k.slice(s![c0..c1, ..]).t(),
            false,
            scale,
            Par::Seq,
        );
        let first = c0 == 0;
        for i in 0..qb {
            let mut row = sc.row_mut(i);
            let row = row.as_slice_mut().expect("scores rows are contiguous");
            let block_max = F::max_slice(row);
            let m_new = if first {
                block_max
            } else {
                row_max[i].max(block_max)
            };
            let block_sum = F::exp_shift_sum(row, m_new);
            if first {
                row_sum[i] = block_sum;
            } else {
                let corr = (row_max[i] - m_new).exp();
                row_sum[i] = row_sum[i] * corr + block_sum;
                out.row_mut(i).mapv_inplace(|o| o * corr);
            }
            row_max[i] = m_new;
        }
        matmul_into(
            out.view_mut(),
            sc.view(),
            v.slice(s![c0..c1, ..]),
            !first,
            F::ONE,
            Par::Seq,
        );
        c0 = c1;
    }
    for (i, &sum) in row_sum.iter().enumerate() {
        let inv = F::ONE / sum;
        out.row_mut(i).mapv_inplace(|o| o * inv);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rnd_matrix(rows: usize, cols: usize, seed: &mut u64) -> Array2<f64> {
        let mut lcg = crate::kernels::Lcg(*seed);
        let m = Array2::from_shape_fn((rows, cols), |_| lcg.unit() * 4.0 - 2.0);
        *seed = lcg.0;
        m
    }

    /// softmax(scale q kᵀ) v computed directly in f64, one segment and head at a time.
    fn naive(
        q: &Array2<f64>,
        k: &Array2<f64>,
        v: &Array2<f64>,
        cu: &[usize],
        heads: usize,
        scale: f64,
    ) -> Array2<f64> {
        let (n, d) = q.dim();
        let hd = d / heads;
        let mut y = Array2::zeros((n, d));
        for seg in cu.windows(2) {
            for h in 0..heads {
                for i in seg[0]..seg[1] {
                    let logits: Vec<f64> = (seg[0]..seg[1])
                        .map(|j| {
                            (0..hd)
                                .map(|c| q[[i, h * hd + c]] * k[[j, h * hd + c]])
                                .sum::<f64>()
                                * scale
                        })
                        .collect();
                    let m = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = logits.iter().map(|l| (l - m).exp()).collect();
                    let z: f64 = e.iter().sum();
                    for c in 0..hd {
                        y[[i, h * hd + c]] = (seg[0]..seg[1])
                            .map(|j| e[j - seg[0]] * v[[j, h * hd + c]])
                            .sum::<f64>()
                            / z;
                    }
                }
            }
        }
        y
    }

    /// Both transposes put every value where it belongs, for blocked and ragged shapes and a
    /// view with a row stride (a head's columns of a wider array); values past ld stay.
    #[test]
    fn transposes_blocks_and_edges() {
        for (rows, cols) in [(16, 16), (64, 64), (70, 40), (15, 33), (37, 17), (128, 80)] {
            let wide = Array2::from_shape_fn((rows, cols + 24), |(j, c)| (j * 1000 + c) as f32);
            let k = wide.slice(s![.., 8..8 + cols]);
            let ld = rows.next_multiple_of(64);
            for f in [
                transpose_f32 as fn(ArrayView2<f32>, &mut [f32], usize),
                transpose_scalar,
            ] {
                let mut kt = vec![-1.0f32; cols * ld];
                f(k, &mut kt, ld);
                for c in 0..cols {
                    for j in 0..ld {
                        let want = if j < rows { k[[j, c]] } else { -1.0 };
                        assert_eq!(kt[c * ld + j], want, "{rows}x{cols}: column {c} row {j}");
                    }
                }
            }
        }
    }

    #[test]
    fn matches_naive_softmax_over_several_segments() {
        let mut seed = 7;
        // segment lengths chosen to cross the query and key block sizes and the short path's
        // limit (5, 1 and SHORT take it; 300 and 140 do not)
        let cu = [0, 5, 305, 306, 446, 446 + SHORT];
        let n = *cu.last().unwrap();
        let (heads, hd) = (3, 8);
        let q = rnd_matrix(n, heads * hd, &mut seed);
        let k = rnd_matrix(n, heads * hd, &mut seed);
        let v = rnd_matrix(n, heads * hd, &mut seed);
        let scale = (hd as f64).powf(-0.5);
        let got = attention(q.view(), k.view(), v.view(), &cu, heads, scale);
        let want = naive(&q, &k, &v, &cu, heads, scale);
        let err = (&got - &want).iter().fold(0.0f64, |a, d| a.max(d.abs()));
        assert!(err < 1e-13, "max abs error {err}");

        // f32 path against the f64 truth
        let (q32, k32, v32) = (
            q.mapv(|x| x as f32),
            k.mapv(|x| x as f32),
            v.mapv(|x| x as f32),
        );
        let got32 = attention(q32.view(), k32.view(), v32.view(), &cu, heads, scale as f32);
        let err32 = (&got32.mapv(|x| x as f64) - &want)
            .iter()
            .fold(0.0f64, |a, d| a.max(d.abs()));
        assert!(err32 < 1e-5, "f32 max abs error {err32}");
    }

    #[test]
    fn no_leakage_across_segments() {
        let mut seed = 11;
        let cu = [0, 70, 400];
        let (heads, hd) = (2, 4);
        let q = rnd_matrix(400, heads * hd, &mut seed);
        let k = rnd_matrix(400, heads * hd, &mut seed);
        let mut v = rnd_matrix(400, heads * hd, &mut seed);
        let before = attention(q.view(), k.view(), v.view(), &cu, heads, 0.5);
        // changing keys and values of the second segment must not move the first one's output
        let k2 = {
            let mut k2 = k.clone();
            k2.slice_mut(s![70.., ..]).mapv_inplace(|x| x * -3.0 + 1.0);
            k2
        };
        v.slice_mut(s![70.., ..]).mapv_inplace(|x| x + 100.0);
        let after = attention(q.view(), k2.view(), v.view(), &cu, heads, 0.5);
        assert_eq!(before.slice(s![..70, ..]), after.slice(s![..70, ..]));
        assert!(before.slice(s![70.., ..]) != after.slice(s![70.., ..]));
    }

    /// The short path and the blocked one agree on the same segment (f64: to rounding; f32: to
    /// a few ulps of the outputs), with head_dim 64 as in the tower and a ragged one.
    #[test]
    fn short_path_agrees_with_the_blocked_path() {
        /// max |short - blocked| over the outputs, the inputs cast to F.
        fn max_diff<F: Real>(q: &Array2<f64>, k: &Array2<f64>, v: &Array2<f64>) -> f64 {
            let [q, k, v] = [q, k, v].map(|m| m.mapv(F::from_f64));
            let (len, hd) = k.dim();
            let scale = F::from_f64(0.125);
            let mut short = vec![F::ZERO; len * hd];
            // SAFETY: len rows of hd values
            unsafe { attend_short(q.view(), k.view(), v.view(), scale, short.as_mut_ptr(), hd) };
            // q, k and v in column-major order (q's rows then come from a copy): the same bits
            let [qf, kf, vf] =
                [&q, &k, &v].map(|m| m.t().as_standard_layout().into_owned().reversed_axes());
            assert_ne!(qf.strides()[1], 1);
            let mut short_f = vec![F::ZERO; len * hd];
            // SAFETY: as above
            unsafe {
                attend_short(
                    qf.view(),
                    kf.view(),
                    vf.view(),
                    scale,
                    short_f.as_mut_ptr(),
                    hd,
                )
            };
            assert!(
                short
                    .iter()
                    .zip(&short_f)
                    .all(|(a, b)| a.to_f64() == b.to_f64())
            );
            let mut blocked = Array2::from_elem((len, hd), F::ZERO);
            attend_block(q.view(), k.view(), v.view(), scale, blocked.view_mut());
            short
                .iter()
                .zip(blocked.iter())
                .fold(0.0f64, |a, (x, y)| a.max((x.to_f64() - y.to_f64()).abs()))
        }
        let mut seed = 5;
        for (len, hd) in [(SHORT, 64), (37, 20)] {
            let q = rnd_matrix(len, hd, &mut seed);
            let k = rnd_matrix(len, hd, &mut seed);
            let v = rnd_matrix(len, hd, &mut seed);
            let err = max_diff::<f64>(&q, &k, &v);
            assert!(err < 1e-13, "f64 ({len}, {hd}): {err}");
            let err = max_diff::<f32>(&q, &k, &v);
            assert!(err < 2e-6, "f32 ({len}, {hd}): {err}");
        }
    }
}
