//! f32 `Linear` products over a weight repacked once at load (AVX-512): `W` `[n, k]` stored as
//! 64-column panels of its transpose, panel `p` holding `W[64p + c][kk]` at `kk * 64 + c`.
//!
//! Why not the `gemm` crate here: it packs the weight on every call (the transpose read through
//! strides), which on this 2-core machine cost 10-30% of a 1024-row product and most of a 64-row
//! one, where the product is a stream over the weight. With the panels in memory the kernel reads
//! each weight once per call in address order and needs no packing: per `kk`, four 16-lane loads
//! of the panel row and one broadcast per input row feed 6 x 4 accumulators (the classic 6 x 64
//! register tile), the panel chunk staying in L2 across the row blocks.
//!
//! Summation, blocked as in packed GEMMs: each output sums the products of a chunk of [`KC`]
//! inputs in order (`kk` ascending, one fused multiply-add each, from zero), then adds the chunk's
//! sum to the running value, which starts at the bias. With one long chain instead (a 10240-input
//! merger row), the full-geometry fixture's worst tap against upstream went from 0.51 to 0.92 of
//! its tolerance.

use ndarray::ArrayView2;
use rayon::prelude::*;

/// Columns per panel (four AVX-512 vectors).
pub const NP: usize = 64;
/// Rows of the register tile.
const MR: usize = 6;
/// `k` per pass over the rows (and per summation block): a panel chunk of `KC * NP * 4` bytes
/// (64 KiB) stays in L2.
pub const KC: usize = 256;

/// Whether this CPU runs the panel kernel (AVX-512F).
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// A `Linear` weight `[n, k]` in panel layout (the last panel zero-padded to 64 columns).
#[derive(Debug, Clone)]
pub struct Panels {
    data: Vec<f32>,
    n: usize,
    k: usize,
}

impl Panels {
    /// Repacks `w` `[n, k]` (any strides).
    pub fn pack(w: ArrayView2<f32>) -> Self {
        let (n, k) = w.dim();
        let np = n.div_ceil(NP);
        let mut data = vec![0.0f32; np * k * NP];
        data.par_chunks_mut((k * NP).max(1))
            .enumerate()
            .for_each(|(p, panel)| {
                for c in 0..NP.min(n - p * NP) {
                    let row = w.row(p * NP + c);
                    for (kk, &v) in row.iter().enumerate() {
                        panel[kk * NP + c] = v;
                    }
                }
            });
        Self { data, n, k }
    }

    /// Output features.
    pub fn rows(&self) -> usize {
        self.n
    }
    /// Input features.
    pub fn cols(&self) -> usize {
        self.k
    }

    /// `y = x · wᵀ + bias` with `x` `[m, k]` (row-major, contiguous), `y` `[m, n]` (overwritten),
    /// parallel over panels in the current rayon pool.
    ///
    /// # Panics
    /// If the lengths disagree with the shapes or the CPU lacks AVX-512 ([`available`]).
    pub fn linear_into(&self, x: &[f32], m: usize, bias: Option<&[f32]>, y: &mut [f32]) {
        let (n, k) = (self.n, self.k);
        assert_eq!(x.len(), m * k, "panel linear: input length");
        assert_eq!(y.len(), m * n, "panel linear: output length");
        assert!(
            bias.is_none_or(|b| b.len() == n),
            "panel linear: bias length"
        );
        assert!(available(), "panel linear needs AVX-512F");
        if m == 0 || n == 0 {
            return;
        }
        let y_addr = y.as_mut_ptr() as usize;
        let np = n.div_ceil(NP);
        // Rows split too when there are few panels for the threads.
        let row_tasks = if np >= 4 * rayon::current_num_threads() {
            1
        } else {
            m.div_ceil(MR * 8).clamp(1, 8)
        };
        let rows_per = m.div_ceil(row_tasks).div_ceil(MR) * MR;
        (0..np * row_tasks).into_par_iter().for_each(|t| {
            let (p, rt) = (t / row_tasks, t % row_tasks);
            let r0 = rt * rows_per;
            let r1 = (r0 + rows_per).min(m);
            if r0 >= r1 {
                return;
            }
            #[cfg(target_arch = "x86_64")]
            // SAFETY: AVX-512F was checked; each task writes rows r0..r1 of columns
            // 64p..64p+64 (clipped to n) of `y`, disjoint from every other task's; reads stay
            // inside `x`, the panel and `bias` (lengths asserted above).
            unsafe {
                panel_task(
                    x,
                    &self.data,
                    p * k * NP,
                    bias.map(|b| &b[p * NP..(p * NP + NP).min(n)]),
                    y_addr as *mut f32,
                    n,
                    k,
                    p * NP,
                    r0,
                    r1,
                );
            }
        });
    }
}

/// Rows r0..r1 of one panel's 64 output columns (starting at column `j0` of `y`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn panel_task(
    x: &[f32],
    data: &[f32],
    off: usize,
    bias: Option<&[f32]>,
    y: *mut f32,
    n: usize,
    k: usize,
    j0: usize,
    r0: usize,
    r1: usize,
) {
    let width = NP.min(n - j0);
    let mut bias_pad = [0.0f32; NP];
    if let Some(b) = bias {
        bias_pad[..b.len()].copy_from_slice(b);
    }
    let panel = &data[off..off + k * NP];
    let mut kc0 = 0;
    // SAFETY: see the caller; every pointer below stays inside its slice (comments per arm).
    while kc0 < k {
        let kc1 = (kc0 + KC).min(k);
        let first = kc0 == 0;
        let chunk_lines = (kc1 - kc0) * NP / 16; // cache lines of this chunk
        let mut r = r0;
        let mut block = 0;
        while r < r1 {
            let rows = MR.min(r1 - r);
            // The first passes over a chunk also prefetch the data that follows it in memory
            // (this panel's next chunk or, after its last, most likely the next panel this
            // thread takes), one line per step, a quarter of a chunk per pass: the stream from
            // memory overlaps the arithmetic on the chunk already in L2.
            let pf_start = off + kc1 * NP + block * chunk_lines * 16 / 4;
            let pf = if block < 4 && pf_start + chunk_lines * 16 / 4 * 4 <= data.len() {
                Some(pf_start)
            } else {
                None
            };
            // SAFETY (all arms): rows r..r+rows exist in x and y; the panel chunk holds
            // (kc1 - kc0) * NP values from pp; prefetches stay inside `data` (checked above) and
            // cannot fault anyway; AVX-512F is enabled in this function.
            unsafe {
                let xp = x.as_ptr().add(r * k);
                let pp = panel.as_ptr().add(kc0 * NP);
                let yp = y.add(r * n + j0);
                let pfp = pf.map_or(std::ptr::null(), |o| data.as_ptr().add(o));
                let a = (xp, k, pp, kc0, kc1, yp, n, width, first, &bias_pad, pfp);
                match rows {
                    6 => tile::<6>(a),
                    5 => tile::<5>(a),
                    4 => tile::<4>(a),
                    3 => tile::<3>(a),
                    2 => tile::<2>(a),
                    _ => tile::<1>(a),
                }
            }
            r += rows;
            block += 1;
        }
        kc0 = kc1;
    }
}

/// (x, ldx, panel chunk, kc0, kc1, y, ldy, valid columns, first chunk, bias, prefetch or null)
type TileArgs<'a> = (
    *const f32,
    usize,
    *const f32,
    usize,
    usize,
    *mut f32,
    usize,
    usize,
    bool,
    &'a [f32; NP],
    *const f32,
);

/// One R x 64 tile over kk in kc0..kc1, added to the bias on the first chunk, else to `y`;
/// prefetches one line per step from `pf` into L2 when it is not null.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
#[inline]
unsafe fn tile<const R: usize>(args: TileArgs<'_>) {
    let (x, ldx, panel, kc0, kc1, y, ldy, width, first, bias, pf) = args;
    use std::arch::x86_64::*;
    // lanes of the last (partial) panel that exist in y
    let masks: [__mmask16; 4] = std::array::from_fn(|c| {
        let have = width.saturating_sub(16 * c).min(16);
        if have == 16 {
            0xffff
        } else {
            ((1u32 << have) - 1) as __mmask16
        }
    });
    // SAFETY: the caller's contract (R rows of x from `x` with stride ldx over kc0..kc1, the
    // panel chunk from `panel`, R rows of `width` columns of y); AVX-512F is enabled here.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); 4]; R];
        if !pf.is_null() {
            let mut q = pf;
            for kk in kc0..kc1 {
                _mm_prefetch::<_MM_HINT_T1>(q as *const i8);
                q = q.add(16);
                step::<R>(&mut acc, x, ldx, panel.add((kk - kc0) * NP), kk);
            }
        } else {
            for kk in kc0..kc1 {
                step::<R>(&mut acc, x, ldx, panel.add((kk - kc0) * NP), kk);
            }
        }
        for (r, row) in acc.iter().enumerate() {
            for (c, a) in row.iter().enumerate() {
                let base = if first {
                    _mm512_loadu_ps(bias.as_ptr().add(16 * c))
                } else {
                    _mm512_maskz_loadu_ps(masks[c], y.add(r * ldy + 16 * c))
                };
                let sum = _mm512_add_ps(base, *a);
                _mm512_mask_storeu_ps(y.add(r * ldy + 16 * c), masks[c], sum);
            }
        }
    }
}

/// One `kk` of an R x 64 tile: four 16-lane loads of the panel row `p`, one broadcast of
/// `x[r, kk]` per row, 4R fused multiply-adds.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn step<const R: usize>(
    acc: &mut [[std::arch::x86_64::__m512; 4]; R],
    x: *const f32,
    ldx: usize,
    p: *const f32,
    kk: usize,
) {
    use std::arch::x86_64::*;
    // SAFETY: the caller's (tile's) contract: 64 values from p, R rows of x with stride ldx.
    unsafe {
        let w0 = _mm512_loadu_ps(p);
        let w1 = _mm512_loadu_ps(p.add(16));
        let w2 = _mm512_loadu_ps(p.add(32));
        let w3 = _mm512_loadu_ps(p.add(48));
        for (r, row) in acc.iter_mut().enumerate() {
            let xb = _mm512_set1_ps(*x.add(r * ldx + kk));
            row[0] = _mm512_fmadd_ps(xb, w0, row[0]);
            row[1] = _mm512_fmadd_ps(xb, w1, row[1]);
            row[2] = _mm512_fmadd_ps(xb, w2, row[2]);
            row[3] = _mm512_fmadd_ps(xb, w3, row[3]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Array2;

    #[test]
    fn matches_f64_sums_on_ragged_shapes() {
        if !available() {
            eprintln!("skipped: no AVX-512 on this CPU");
            return;
        }
        let mut lcg = crate::kernels::Lcg(5);
        let mut rnd = || lcg.unit() as f32 - 0.5;
        // ragged rows (tile edges), columns (a partial panel), k over one chunk (KC)
        for (m, k, n) in [
            (1, 1, 1),
            (7, 13, 5),
            (13, 70, 130),
            (6, KC + 37, 64),
            (20, 3, 200),
        ] {
            let x: Vec<f32> = (0..m * k).map(|_| rnd()).collect();
            let w = Array2::from_shape_fn((n, k), |_| rnd());
            let b: Vec<f32> = (0..n).map(|_| rnd()).collect();
            let p = Panels::pack(w.view());
            assert_eq!((p.rows(), p.cols()), (n, k));
            for bias in [Some(&b[..]), None] {
                let mut y = vec![f32::NAN; m * n];
                p.linear_into(&x, m, bias, &mut y);
                for i in 0..m {
                    for j in 0..n {
                        let want: f64 = bias.map_or(0.0, |b| b[j] as f64)
                            + (0..k)
                                .map(|c| x[i * k + c] as f64 * w[[j, c]] as f64)
                                .sum::<f64>();
                        let err = (y[i * n + j] as f64 - want).abs();
                        assert!(
                            err < 1e-5 * (k as f64).sqrt(),
                            "({m},{k},{n}) at ({i},{j}): {} vs {want}",
                            y[i * n + j]
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn sums_in_blocks_of_kc_onto_the_bias() {
        if !available() {
            eprintln!("skipped: no AVX-512 on this CPU");
            return;
        }
        // per chunk of KC: an fma chain from zero over kk ascending, added to the running sum
        // that starts at the bias; exactly
        let (m, k, n) = (3, 2 * KC + 5, 17);
        let x: Vec<f32> = (0..m * k)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.013)
            .collect();
        let w = Array2::from_shape_fn((n, k), |(j, c)| {
            ((j * 31 + c * 7) % 97) as f32 * 0.021 - 1.0
        });
        let b: Vec<f32> = (0..n).map(|j| j as f32 * 0.1 - 0.7).collect();
        let mut y = vec![0.0f32; m * n];
        Panels::pack(w.view()).linear_into(&x, m, Some(&b), &mut y);
        for i in 0..m {
            for j in 0..n {
                let mut s = b[j];
                for c0 in (0..k).step_by(KC) {
                    let mut part = 0.0f32;
                    for c in c0..(c0 + KC).min(k) {
                        part = x[i * k + c].mul_add(w[[j, c]], part);
                    }
                    s += part;
                }
                assert_eq!(y[i * n + j].to_bits(), s.to_bits(), "({i},{j})");
            }
        }
    }
}
