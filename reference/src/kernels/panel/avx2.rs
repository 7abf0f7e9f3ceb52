//! The AVX2 + FMA register tile ([`Avx2`]) for CPUs without AVX-512 (AMD Zen 2/3, Intel before
//! Skylake-SP): an R x 64 tile of the output over one panel sub-chunk, run as four R x 16 tiles,
//! one per 16-column quarter of the panel ([`quarter`]). Sixteen ymm registers hold 6 x 2
//! accumulators (8 lanes each), the quarter's two weight vectors and one broadcast input: the
//! widest tile that fits (a 6 x 64 tile of 8-lane vectors would need 48). The quarters run one
//! after the other over the sub-chunk while it is in L1 (16 KiB; each quarter reads one cache
//! line of each of its panel rows), so the blocking around the tile (`task`) is the AVX-512
//! one, and so is the summation: each output's fused multiply-add chain over the sub-chunk
//! continues from its partial sum, in `kk` order, exactly as in the 16-lane tile (the same bits).
//!
//! Also here: the widening of bf16 panel rows with AVX2 ([`widen`]), the same values in the same
//! places as `bf16::widen`.

#[cfg(target_arch = "x86_64")]
use super::task::Kernel;
#[cfg(target_arch = "x86_64")]
use super::tile::TileArgs;
#[cfg(target_arch = "x86_64")]
use super::{MR, NP};

/// The AVX2 + FMA kernel of a task (`task::group_body`).
#[cfg(target_arch = "x86_64")]
pub(super) struct Avx2;

#[cfg(target_arch = "x86_64")]
impl Kernel for Avx2 {
    #[inline(always)]
    unsafe fn widen(src: &[u16], out: *mut f32) {
        // SAFETY: the caller's contract.
        unsafe { widen(src, out) }
    }

    #[inline(always)]
    unsafe fn tile<const R: usize>(a: TileArgs<'_>) {
        // SAFETY: the caller's contract.
        unsafe { tile::<R>(a) }
    }
}

/// Whole panel rows stored as bf16 pairs as f32 in column order (`bf16::widen`'s contract,
/// alignment aside: any `out` valid for `src.len()` values).
///
/// # Safety
/// `out` valid for writing `src.len()` values; AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn widen(src: &[u16], out: *mut f32) {
    debug_assert!(src.len().is_multiple_of(32), "whole panel rows");
    // SAFETY: 32 values read from src and written to out per block, inside both.
    unsafe {
        for i in (0..src.len() / 32 * 32).step_by(32) {
            widen_block(src.as_ptr().add(i), out.add(i));
        }
    }
}

/// One 32-value block: pairs 0..8 and 8..16 in two 32-byte loads; their lower halves shifted up
/// are columns 0..8 and 8..16 of the block, their upper halves masked columns 16..24 and 24..32
/// (`bf16::paired_pos`).
///
/// # Safety
/// 32 values readable at `src`, 32 writable at `out`; AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn widen_block(src: *const u16, out: *mut f32) {
    use std::arch::x86_64::*;
    // SAFETY: the caller's contract.
    unsafe {
        let hi_mask = _mm256_set1_epi32(0xffff_0000u32 as i32);
        let d0 = _mm256_loadu_si256(src as *const __m256i);
        let d1 = _mm256_loadu_si256(src.add(16) as *const __m256i);
        _mm256_storeu_ps(out, _mm256_castsi256_ps(_mm256_slli_epi32::<16>(d0)));
        _mm256_storeu_ps(out.add(8), _mm256_castsi256_ps(_mm256_slli_epi32::<16>(d1)));
        _mm256_storeu_ps(
            out.add(16),
            _mm256_castsi256_ps(_mm256_and_si256(d0, hi_mask)),
        );
        _mm256_storeu_ps(
            out.add(24),
            _mm256_castsi256_ps(_mm256_and_si256(d1, hi_mask)),
        );
    }
}

/// One R x 64 tile over one sub-chunk (the contract of `tile::tile`): the quarters of the panel
/// that hold columns of y ([`quarter`]), the first of them also prefetching the `pf_lines`
/// lines and widening the blocks, one each a step, the blocks left over after it.
///
/// # Safety
/// As `tile::tile`; AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn tile<const R: usize>(a: TileArgs<'_>) {
    use std::arch::x86_64::*;
    let quarters = a.width.div_ceil(16).min(NP / 16);
    // SAFETY: the caller's contract; prefetches cannot fault.
    unsafe {
        // y's rows, read at the end of a later chunk: fetched while the steps run.
        if a.end && a.bias.is_none() {
            for r in 0..R {
                for q in 0..quarters {
                    _mm_prefetch::<_MM_HINT_T0>(a.y.wrapping_add(r * a.ldy + 16 * q) as *const i8);
                }
            }
        }
        let side = Side {
            pf: if a.pf.is_null() { 0 } else { a.pf_lines },
            widen: a.widen_blocks,
        };
        let mut widened = 0;
        for q in 0..quarters {
            let s = if q == 0 { side } else { Side::NONE };
            widened += quarter::<R>(&a, q, s);
        }
        for b in widened..a.widen_blocks {
            widen_block(a.widen_from.add(32 * b), a.widen_to.add(32 * b));
        }
    }
}

/// Work a quarter does beside its steps, one of each a step over its first steps: lines to
/// prefetch (from `pf`), blocks to widen (from `widen_from`).
#[derive(Clone, Copy)]
struct Side {
    pf: usize,
    widen: usize,
}

impl Side {
    const NONE: Side = Side { pf: 0, widen: 0 };
}

/// Columns `16q..16q + 16` of the tile over the sub-chunk: the chains start from zero or from
/// the partial sums, and end in `part` or (at the chunk's end) added to the bias or to `y`, then
/// the residual added; the lanes past `width` are neither read nor written in y. Returns the
/// blocks widened.
///
/// # Safety
/// As [`tile`], `16q < width`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn quarter<const R: usize>(a: &TileArgs<'_>, q: usize, side: Side) -> usize {
    use std::arch::x86_64::*;
    let c0 = 16 * q;
    // valid lanes of the quarter's two vectors in y
    let have = a.width.saturating_sub(c0).min(16);
    let lanes = [have.min(8), have.saturating_sub(8)];
    let iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let masks = [
        _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes[0] as i32), iota),
        _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes[1] as i32), iota),
    ];
    // SAFETY: the caller's contract: the panel sub-chunk rows from `panel` (NP values each), R
    // packed rows of x per kk, R rows of `part` (NP each), R rows of `width` columns of y (and of
    // the residual); the masked loads and stores touch only valid lanes; prefetches cannot
    // fault; the blocks to widen are inside both buffers.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); 2]; R];
        if !a.start {
            for (r, row) in acc.iter_mut().enumerate() {
                for (h, v) in row.iter_mut().enumerate() {
                    *v = _mm256_loadu_ps(a.part.add(r * NP + c0 + 8 * h));
                }
            }
        }
        let k0 = a.kk.start;
        let len = a.kk.len();
        let x = a.x.add(k0 * MR);
        let p = a.panel.add(c0);
        let pf = side.pf.min(len);
        let wn = side.widen.min(len);
        let mut i = 0;
        while i < pf.max(wn) {
            if i < pf {
                _mm_prefetch::<_MM_HINT_T1>(a.pf.add(64 * i));
            }
            if i < wn {
                widen_block(a.widen_from.add(32 * i), a.widen_to.add(32 * i));
            }
            step::<R>(&mut acc, x.add(i * MR), p.add(i * NP));
            i += 1;
        }
        while i < len {
            step::<R>(&mut acc, x.add(i * MR), p.add(i * NP));
            i += 1;
        }
        for (r, row) in acc.iter().enumerate() {
            for (h, v) in row.iter().enumerate() {
                let c = c0 + 8 * h;
                if !a.end {
                    _mm256_storeu_ps(a.part.add(r * NP + c), *v);
                    continue;
                }
                if lanes[h] == 0 {
                    continue;
                }
                let full = lanes[h] == 8;
                let yp = a.y.wrapping_add(r * a.ldy + c);
                let base = match a.bias {
                    Some(b) => _mm256_loadu_ps(b.as_ptr().add(c)),
                    None if full => _mm256_loadu_ps(yp),
                    None => _mm256_maskload_ps(yp, masks[h]),
                };
                let mut out = _mm256_add_ps(base, *v);
                if !a.resid.is_null() {
                    let rp = a.resid.wrapping_add(r * a.ldy + c);
                    let res = if full {
                        _mm256_loadu_ps(rp)
                    } else {
                        _mm256_maskload_ps(rp, masks[h])
                    };
                    out = _mm256_add_ps(out, res);
                }
                if full {
                    _mm256_storeu_ps(yp, out);
                } else {
                    _mm256_maskstore_ps(yp, masks[h], out);
                }
            }
        }
        wn
    }
}

/// One `kk` of an R x 16 tile: two 8-lane loads of the quarter's panel row `p`, one broadcast
/// of `x[r, kk]` (at `x + r`, packed) per row, 2R fused multiply-adds.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn step<const R: usize>(
    acc: &mut [[std::arch::x86_64::__m256; 2]; R],
    x: *const f32,
    p: *const f32,
) {
    use std::arch::x86_64::*;
    // SAFETY: the caller's contract: 16 values from p, R values from x.
    unsafe {
        let w0 = _mm256_loadu_ps(p);
        let w1 = _mm256_loadu_ps(p.add(8));
        for (r, row) in acc.iter_mut().enumerate() {
            let xb = _mm256_broadcast_ss(&*x.add(r));
            row[0] = _mm256_fmadd_ps(xb, w0, row[0]);
            row[1] = _mm256_fmadd_ps(xb, w1, row[1]);
        }
    }
}
