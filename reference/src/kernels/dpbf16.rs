//! bf16 `Linear` products on AVX512-BF16 (`vdpbf16ps`): inputs rounded to bf16, bf16 weights,
//! f32 accumulation — the bf16 mode's product on CPUs without AMX (this is twice the f32 FMA
//! rate: each instruction adds two products per lane).
//!
//! Layout. A weight `W` `[n, k]` is stored as panels of 64 columns; per pair of inputs `q`, a
//! panel row of 64 columns x 2 values (256 bytes, four vectors): lane `j` of vector `t` holds
//! `W[64p + 16t + j][2q]` in its low half and `[2q + 1]` in its high half, the layout
//! `vdpbf16ps` multiplies against a broadcast pair of inputs. Inputs are packed per call as
//! bf16 pairs (`u32`), rows of `k / 2` pairs (k padded to even with a zero).
//!
//! Blocking, as in packed GEMMs: per chunk of `KC` inputs (a panel's chunk, 32 KiB, stays in
//! L1 while the row tiles of a row block run over it), per block of `MC` rows (their inputs
//! for the chunk stay in L2 across the panels of a task's group), per panel, per tile of 6 rows
//! x 64 columns (24 accumulators in registers). The running sums wait in `y` between chunks;
//! the bias and the residual are added after the last chunk: `y = (x · wᵀ + bias) + residual`.

use super::panel::PanelBuf;
use ndarray::ArrayView2;

/// Columns per panel.
const NP: usize = 64;
/// Rows of the register tile.
const MR: usize = 6;
/// Inputs per chunk (even).
const KC: usize = 256;
/// Rows per block.
const MC: usize = 96;

/// Whether this process can run the kernel (AVX512-BF16, as [`super::isa::isa`] decides).
pub fn available() -> bool {
    super::isa::isa() >= super::isa::Isa::Avx512Bf16
}

/// Whether the bf16 mode's weights are packed for this kernel: [`available`] and the faster
/// unit on this CPU ([`super::isa::dpbf16_preferred`]); else they take the f32 panels.
pub fn preferred() -> bool {
    available() && super::isa::dpbf16_preferred()
}

/// A `Linear` weight `[n, k]` as bf16 pair panels.
#[derive(Debug, Clone)]
pub struct Bf16Panels {
    data: PanelBuf<u16>,
    n: usize,
    k: usize,
}

impl Bf16Panels {
    /// `w` `[n, k]` (any strides) with every value rounded to bf16 (to nearest even).
    pub fn pack(w: ArrayView2<f32>) -> Self {
        use rayon::prelude::*;
        let (n, k) = w.dim();
        let pairs = k.div_ceil(2);
        let panel = pairs * 2 * NP;
        let mut data = PanelBuf::<u16>::zeroed(n.div_ceil(NP) * panel);
        data.as_mut_slice()
            .par_chunks_mut(panel.max(1))
            .enumerate()
            .for_each(|(p, out)| {
                for c in 0..NP.min(n - p * NP) {
                    let row = w.row(p * NP + c);
                    for (kk, &v) in row.iter().enumerate() {
                        out[kk / 2 * 2 * NP + c * 2 + kk % 2] = super::amx::bf16_bits(v);
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

    /// `y = bf16(x) · wᵀ + bias (+ residual)`, `x` `[m, k]` row-major, `y` `[m, n]`
    /// (overwritten); parallel over panels (and rows when there are few panels) on the team's
    /// threads.
    ///
    /// # Panics
    /// If the lengths disagree with the shapes, or the CPU lacks AVX512-BF16 ([`available`]).
    pub fn linear(
        &self,
        x: &[f32],
        m: usize,
        bias: Option<&[f32]>,
        residual: Option<&[f32]>,
        y: &mut [f32],
    ) {
        let (n, k) = (self.n, self.k);
        assert_eq!(x.len(), m * k, "bf16 linear: input length");
        assert_eq!(y.len(), m * n, "bf16 linear: output length");
        assert!(
            bias.is_none_or(|b| b.len() == n),
            "bf16 linear: bias length"
        );
        assert!(
            residual.is_none_or(|r| r.len() == m * n),
            "bf16 linear: residual length"
        );
        assert!(available(), "bf16 linear needs AVX512-BF16");
        if m == 0 || n == 0 {
            return;
        }
        if k == 0 {
            for (i, v) in y.iter_mut().enumerate() {
                *v = bias.map_or(0.0, |b| b[i % n]) + residual.map_or(0.0, |r| r[i]);
            }
            return;
        }
        let pairs = k.div_ceil(2);
        let xp = pack_pairs(x, m, k);
        let np = n.div_ceil(NP);
        let threads = rayon::current_num_threads().max(1);
        let row_tasks = if np >= 4 * threads {
            1
        } else {
            m.div_ceil(MR * 8).clamp(1, 8)
        };
        let rows_per = m.div_ceil(row_tasks).div_ceil(MR) * MR;
        // a task's inputs past L2: groups of panels share each row block's inputs
        let group = if rows_per * pairs * 4 > (1 << 20) {
            (np / (4 * threads)).clamp(1, 8)
        } else {
            1
        };
        let groups = np.div_ceil(group);
        let y_addr = y.as_mut_ptr() as usize;
        let resid_addr = residual.map_or(0, |r| r.as_ptr() as usize);
        let w = self.data.as_slice();
        super::team::for_each(groups * row_tasks, |t| {
            let (g, rt) = (t / row_tasks, t % row_tasks);
            let (r0, r1) = (rt * rows_per, ((rt + 1) * rows_per).min(m));
            if r0 >= r1 {
                return;
            }
            let panels = g * group..((g + 1) * group).min(np);
            // SAFETY: AVX512-BF16 was checked; each task writes rows r0..r1 of its panels'
            // columns (clipped to n) of y, disjoint from every other task's; the reads stay in
            // the packed inputs, the panels, the bias and the residual (lengths asserted).
            unsafe {
                task(
                    &xp,
                    pairs,
                    w,
                    (n, pairs),
                    panels,
                    r0..r1,
                    bias,
                    y_addr as *mut f32,
                    resid_addr as *const f32,
                );
            }
        });
    }
}

/// `x` `[m, k]` as rows of bf16 pairs (`k / 2` rounded up per row).
fn pack_pairs(x: &[f32], m: usize, k: usize) -> Vec<u32> {
    let pairs = k.div_ceil(2);
    let mut out = vec![0u32; m * pairs];
    super::team::for_each_chunk_mut(&mut out, pairs, |r, row| {
        let xr = &x[r * k..(r + 1) * k];
        let mut it = xr.chunks_exact(2);
        for (o, p) in row.iter_mut().zip(&mut it) {
            *o = super::amx::bf16_bits(p[0]) as u32 | (super::amx::bf16_bits(p[1]) as u32) << 16;
        }
        if let [last] = it.remainder() {
            row[pairs - 1] = super::amx::bf16_bits(*last) as u32;
        }
    });
    out
}

/// One task: rows `rows` of the columns of panels `panels`.
///
/// # Safety
/// AVX512-BF16; `y` (and `resid`, when not null) valid for `[.., n]` rows covering `rows`, the
/// task's region written by no one else.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
#[allow(clippy::too_many_arguments)]
unsafe fn task(
    xp: &[u32],
    ldx: usize,
    w: &[u16],
    (n, pairs): (usize, usize),
    panels: std::ops::Range<usize>,
    rows: std::ops::Range<usize>,
    bias: Option<&[f32]>,
    y: *mut f32,
    resid: *const f32,
) {
    let panel_len = pairs * 2 * NP;
    let mut q0 = 0;
    // SAFETY (the pointer arithmetic below): the caller's contract.
    unsafe {
        while q0 < pairs {
            let q1 = (q0 + KC / 2).min(pairs);
            let (start, last) = (q0 == 0, q1 == pairs);
            let mut a0 = rows.start;
            while a0 < rows.end {
                let a1 = (a0 + MC).min(rows.end);
                for p in panels.clone() {
                    let j0 = p * NP;
                    let width = NP.min(n - j0);
                    let mut bias_pad = [0.0f32; NP];
                    if last && let Some(b) = bias {
                        bias_pad[..width].copy_from_slice(&b[j0..j0 + width]);
                    }
                    let wp = w[p * panel_len + q0 * 2 * NP..].as_ptr();
                    let mut r = a0;
                    while r < a1 {
                        let rs = MR.min(a1 - r);
                        let t = Tile {
                            x: xp.as_ptr().add(r * ldx + q0),
                            ldx,
                            w: wp,
                            pairs: q1 - q0,
                            y: y.add(r * n + j0),
                            ldy: n,
                            width,
                            start,
                            bias: last.then_some(&bias_pad),
                            resid: if last && !resid.is_null() {
                                resid.add(r * n + j0)
                            } else {
                                std::ptr::null()
                            },
                        };
                        // rows r..r+rs exist in x and y; the chunk's pairs in the panel
                        match rs {
                            6 => tile::<6>(t),
                            5 => tile::<5>(t),
                            4 => tile::<4>(t),
                            3 => tile::<3>(t),
                            2 => tile::<2>(t),
                            _ => tile::<1>(t),
                        }
                        r += rs;
                    }
                }
                a0 = a1;
            }
            q0 = q1;
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
#[allow(clippy::too_many_arguments)]
unsafe fn task(
    _: &[u32],
    _: usize,
    _: &[u16],
    _: (usize, usize),
    _: std::ops::Range<usize>,
    _: std::ops::Range<usize>,
    _: Option<&[f32]>,
    _: *mut f32,
    _: *const f32,
) {
    unreachable!("AVX512-BF16 is x86-64 only")
}

/// A register tile's arguments.
struct Tile<'a> {
    x: *const u32,
    ldx: usize,
    w: *const u16,
    pairs: usize,
    y: *mut f32,
    ldy: usize,
    width: usize,
    start: bool,
    bias: Option<&'a [f32; NP]>,
    resid: *const f32,
}

/// `R` rows x 64 columns over a chunk's pairs: the sums continue from y (unless `start`), and
/// after the last chunk the bias and the residual are added.
///
/// # Safety
/// As [`task`]'s, for the tile's rows.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
#[inline]
unsafe fn tile<const R: usize>(t: Tile<'_>) {
    use std::arch::x86_64::*;
    let masks: [__mmask16; 4] = std::array::from_fn(|v| {
        let live = t.width.saturating_sub(16 * v).min(16);
        ((1u32 << live) - 1) as __mmask16
    });
    // SAFETY: every load and store below is inside the tile's rows of x, y and the residual,
    // and inside the chunk's panel rows (the caller's contract); masked lanes are not touched.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); 4]; R];
        if !t.start {
            for (r, a) in acc.iter_mut().enumerate() {
                for (v, av) in a.iter_mut().enumerate() {
                    *av = _mm512_maskz_loadu_ps(masks[v], t.y.add(r * t.ldy + 16 * v));
                }
            }
        }
        for q in 0..t.pairs {
            let wq = t.w.add(q * 2 * NP);
            let wv: [__m512bh; 4] = std::array::from_fn(|v| {
                std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(
                    wq.add(32 * v) as *const __m512i
                ))
            });
            for (r, a) in acc.iter_mut().enumerate() {
                let xb = std::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(
                    *t.x.add(r * t.ldx + q) as i32,
                ));
                for v in 0..4 {
                    a[v] = _mm512_dpbf16_ps(a[v], xb, wv[v]);
                }
            }
        }
        for (r, a) in acc.iter_mut().enumerate() {
            for (v, av) in a.iter_mut().enumerate() {
                if let Some(b) = t.bias {
                    *av = _mm512_add_ps(*av, _mm512_loadu_ps(b.as_ptr().add(16 * v)));
                }
                if !t.resid.is_null() {
                    let rr = _mm512_maskz_loadu_ps(masks[v], t.resid.add(r * t.ldy + 16 * v));
                    *av = _mm512_add_ps(*av, rr);
                }
                _mm512_mask_storeu_ps(t.y.add(r * t.ldy + 16 * v), masks[v], *av);
            }
        }
    }
}

/// Register-only `vdpbf16ps` on twelve accumulators.
///
/// # Safety
/// AVX512-BF16.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn dp_loop(iters: usize) {
    // SAFETY: registers only.
    unsafe {
        std::arch::asm!(
            "vxorps zmm0, zmm0, zmm0", "vxorps zmm1, zmm1, zmm1", "vxorps zmm2, zmm2, zmm2",
            "vxorps zmm3, zmm3, zmm3", "vxorps zmm4, zmm4, zmm4", "vxorps zmm5, zmm5, zmm5",
            "vxorps zmm6, zmm6, zmm6", "vxorps zmm7, zmm7, zmm7", "vxorps zmm8, zmm8, zmm8",
            "vxorps zmm9, zmm9, zmm9", "vxorps zmm10, zmm10, zmm10", "vxorps zmm11, zmm11, zmm11",
            "vxorps zmm30, zmm30, zmm30", "vxorps zmm31, zmm31, zmm31",
            "2:",
            "vdpbf16ps zmm0, zmm30, zmm31", "vdpbf16ps zmm1, zmm30, zmm31",
            "vdpbf16ps zmm2, zmm30, zmm31", "vdpbf16ps zmm3, zmm30, zmm31",
            "vdpbf16ps zmm4, zmm30, zmm31", "vdpbf16ps zmm5, zmm30, zmm31",
            "vdpbf16ps zmm6, zmm30, zmm31", "vdpbf16ps zmm7, zmm30, zmm31",
            "vdpbf16ps zmm8, zmm30, zmm31", "vdpbf16ps zmm9, zmm30, zmm31",
            "vdpbf16ps zmm10, zmm30, zmm31", "vdpbf16ps zmm11, zmm30, zmm31",
            "dec {n}",
            "jnz 2b",
            n = inout(reg) iters.max(1) => _,
            out("zmm0") _, out("zmm1") _, out("zmm2") _, out("zmm3") _, out("zmm4") _,
            out("zmm5") _, out("zmm6") _, out("zmm7") _, out("zmm8") _, out("zmm9") _,
            out("zmm10") _, out("zmm11") _, out("zmm30") _, out("zmm31") _,
            options(nostack, nomem),
        );
    }
}

/// GFLOP/s of `threads` threads running a register-only `vdpbf16ps` loop at once (12
/// accumulators, 64 flops an instruction), best of three runs of `iters` iterations; `None`
/// without AVX512-BF16.
pub fn dpbf16_peak_gflops(threads: usize, iters: usize) -> Option<f64> {
    if !available() {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    {
        let threads = threads.max(1);
        let flops = (threads * iters.max(1)) as f64 * 12.0 * 64.0;
        // SAFETY: AVX512-BF16 was checked above.
        let best = super::peak::best_of_three(threads, flops, || unsafe { dp_loop(iters) });
        Some(best)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::amx::round_bf16;
    use ndarray::Array2;

    /// Against f64 products of the rounded inputs, on shapes that hit every edge: rows not a
    /// multiple of the tile, odd k, k past one chunk, n not a multiple of 64, strided weights,
    /// many rows (groups of panels); bias and residual; NaN and Inf propagate.
    #[test]
    fn matches_f64_on_edge_shapes() {
        if !available() {
            eprintln!("skipped: no AVX512-BF16");
            return;
        }
        let mut lcg = crate::kernels::Lcg(5);
        for (m, k, n) in [
            (1, 1, 1),
            (5, 31, 17),
            (13, 257, 70),
            (64, 600, 130),
            (700, 40, 64),
        ] {
            let mut rnd = || (lcg.unit() - 0.5) as f32;
            let wide = Array2::from_shape_fn((n, 2 * k), |_| rnd());
            let w = wide.slice(ndarray::s![.., ..;2]);
            let x: Vec<f32> = (0..m * k).map(|_| rnd()).collect();
            let bias: Vec<f32> = (0..n).map(|_| rnd()).collect();
            let res: Vec<f32> = (0..m * n).map(|_| rnd()).collect();
            let p = Bf16Panels::pack(w);
            let mut y = vec![f32::NAN; m * n];
            p.linear(&x, m, Some(&bias), Some(&res), &mut y);
            for i in 0..m {
                for o in 0..n {
                    let (mut s, mut mag) = (0.0f64, 1.0f64);
                    for j in 0..k {
                        let t = round_bf16(x[i * k + j]) as f64 * round_bf16(w[[o, j]]) as f64;
                        s += t;
                        mag += t.abs();
                    }
                    let want = s + bias[o] as f64 + res[i * n + o] as f64;
                    let d = (y[i * n + o] as f64 - want).abs();
                    assert!(
                        d <= 4.0 * (k as f64).sqrt() * f32::EPSILON as f64 * mag,
                        "{m}x{k}x{n} at ({i}, {o}): {} vs {want}",
                        y[i * n + o]
                    );
                }
            }
        }
        // values under bf16's (= f32's) normal range: vdpbf16ps reads them as zero
        let w1 = Array2::from_elem((1, 2), 1.0f32);
        let mut y1 = [7.0f32];
        Bf16Panels::pack(w1.view()).linear(&[1e-39, 3.0], 1, None, None, &mut y1);
        assert_eq!(y1[0], 3.0);
        // specials: an Inf input gives +-Inf, a NaN gives NaN, in their rows only
        let (m, k, n) = (3, 9, 5);
        let w = Array2::from_shape_fn((n, k), |(o, _)| if o % 2 == 0 { 0.5 } else { -0.25 });
        let mut x = vec![1.0f32; m * k];
        x[k + 2] = f32::INFINITY;
        x[2 * k + 4] = f32::NAN;
        let mut y = vec![0.0; m * n];
        Bf16Panels::pack(w.view()).linear(&x, m, None, None, &mut y);
        assert!(y[..n].iter().all(|v| v.is_finite()));
        for o in 0..n {
            let inf = if o % 2 == 0 {
                f32::INFINITY
            } else {
                f32::NEG_INFINITY
            };
            assert_eq!(y[n + o], inf);
            assert!(y[2 * n + o].is_nan());
        }
    }
}
