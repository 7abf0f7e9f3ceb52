//! The AVX-512F register tile: one R x 64 tile of the output over one sub-chunk of a panel
//! ([`tile`], one input a [`step`]), with its arguments ([`TileArgs`], shared with `avx2`).

#[cfg(target_arch = "x86_64")]
use super::MR;
use super::NP;
#[cfg(target_arch = "x86_64")]
use super::bf16::widen_block;

/// One tile's run over a sub-chunk.
pub(super) struct TileArgs<'a> {
    /// Blocks of 32 bf16 values (paired, see [`paired_pos`](super::bf16::paired_pos)) to widen
    /// from `widen_from` into `widen_to` along the way: one a step over the first steps, the rest
    /// after the last.
    pub(super) widen_from: *const u16,
    pub(super) widen_to: *mut f32,
    pub(super) widen_blocks: usize,
    /// The tile's rows of x, packed (see [`pack_rows`](super::rows::pack_rows)).
    pub(super) x: *const f32,
    /// Row `kk.start` of the panel.
    pub(super) panel: *const f32,
    pub(super) kk: std::ops::Range<usize>,
    /// Row 0 of the tile in y (row stride `ldy`), `width` valid columns.
    pub(super) y: *mut f32,
    pub(super) ldy: usize,
    pub(super) width: usize,
    /// On the first chunk the sums are added to the bias, else to y.
    pub(super) bias: Option<&'a [f32; NP]>,
    /// The tile's rows of the partial sums (row stride NP).
    pub(super) part: *mut f32,
    /// The sub-chunk starts its summation chunk (the chain starts from zero) / ends it (the
    /// chunk sum goes into y).
    pub(super) start: bool,
    pub(super) end: bool,
    /// Unless null (only at the end of the last chunk): the tile's rows of a residual with y's
    /// layout, added to the finished outputs.
    pub(super) resid: *const f32,
    /// `pf_lines` lines (one per step of the first steps) are prefetched into L2 from here,
    /// unless null.
    pub(super) pf: *const i8,
    pub(super) pf_lines: usize,
}

/// One R x 64 tile over one sub-chunk: the fused multiply-add chains start from zero or from
/// the partial sums, and end in `part` or (at the chunk's end) added to the bias or to `y`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub(super) unsafe fn tile<const R: usize>(a: TileArgs<'_>) {
    use std::arch::x86_64::*;
    // lanes of the last (partial) panel that exist in y
    let masks: [__mmask16; 4] = std::array::from_fn(|c| {
        let have = a.width.saturating_sub(16 * c).min(16);
        if have == 16 {
            0xffff
        } else {
            ((1u32 << have) - 1) as __mmask16
        }
    });
    // SAFETY: the caller's contract (R rows of x from `x` with stride ldx over kk, the panel
    // sub-chunk from `panel`, R rows of `part`, R rows of `width` columns of y); AVX-512F is
    // enabled here.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); 4]; R];
        if !a.start {
            for (r, row) in acc.iter_mut().enumerate() {
                for (c, v) in row.iter_mut().enumerate() {
                    *v = _mm512_load_ps(a.part.add(r * NP + 16 * c));
                }
            }
        }
        // y's rows, read at the end of a later chunk: fetched while the steps run.
        if a.end && a.bias.is_none() {
            for r in 0..R {
                for c in 0..4 {
                    _mm_prefetch::<_MM_HINT_T0>(a.y.wrapping_add(r * a.ldy + 16 * c) as *const i8);
                }
            }
        }
        let k0 = a.kk.start;
        let mut kk = k0;
        // blocks widened so far
        let mut wi = 0;
        if !a.pf.is_null() {
            let mut q = a.pf;
            for _ in 0..a.pf_lines.min(a.kk.len()) {
                _mm_prefetch::<_MM_HINT_T1>(q);
                q = q.add(64);
                if wi < a.widen_blocks {
                    widen_block(a.widen_from.add(32 * wi), a.widen_to.add(32 * wi));
                    wi += 1;
                }
                step::<R>(&mut acc, a.x.add(kk * MR), a.panel.add((kk - k0) * NP));
                kk += 1;
            }
        }
        while wi < a.widen_blocks && kk < a.kk.end {
            widen_block(a.widen_from.add(32 * wi), a.widen_to.add(32 * wi));
            wi += 1;
            step::<R>(&mut acc, a.x.add(kk * MR), a.panel.add((kk - k0) * NP));
            kk += 1;
        }
        for kk in kk..a.kk.end {
            step::<R>(&mut acc, a.x.add(kk * MR), a.panel.add((kk - k0) * NP));
        }
        for b in wi..a.widen_blocks {
            widen_block(a.widen_from.add(32 * b), a.widen_to.add(32 * b));
        }
        for (r, row) in acc.iter().enumerate() {
            for (c, v) in row.iter().enumerate() {
                if !a.end {
                    _mm512_store_ps(a.part.add(r * NP + 16 * c), *v);
                    continue;
                }
                // (past y's end for the masked-off lanes of a partial last panel: not read)
                let yp = a.y.wrapping_add(r * a.ldy + 16 * c);
                let base = match a.bias {
                    Some(b) => _mm512_loadu_ps(b.as_ptr().add(16 * c)),
                    None => _mm512_maskz_loadu_ps(masks[c], yp),
                };
                let mut out = _mm512_add_ps(base, *v);
                if !a.resid.is_null() {
                    let rp = a.resid.wrapping_add(r * a.ldy + 16 * c);
                    out = _mm512_add_ps(out, _mm512_maskz_loadu_ps(masks[c], rp));
                }
                _mm512_mask_storeu_ps(yp, masks[c], out);
            }
        }
    }
}

/// One `kk` of an R x 64 tile: four 16-lane loads of the panel row `p`, one broadcast of
/// `x[r, kk]` (at `x + r`, packed) per row, 4R fused multiply-adds.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn step<const R: usize>(
    acc: &mut [[std::arch::x86_64::__m512; 4]; R],
    x: *const f32,
    p: *const f32,
) {
    use std::arch::x86_64::*;
    // SAFETY: the caller's (tile's) contract: 64 values from p, R values from x.
    unsafe {
        let w0 = _mm512_loadu_ps(p);
        let w1 = _mm512_loadu_ps(p.add(16));
        let w2 = _mm512_loadu_ps(p.add(32));
        let w3 = _mm512_loadu_ps(p.add(48));
        for (r, row) in acc.iter_mut().enumerate() {
            let xb = _mm512_set1_ps(*x.add(r));
            row[0] = _mm512_fmadd_ps(xb, w0, row[0]);
            row[1] = _mm512_fmadd_ps(xb, w1, row[1]);
            row[2] = _mm512_fmadd_ps(xb, w2, row[2]);
            row[3] = _mm512_fmadd_ps(xb, w3, row[3]);
        }
    }
}
