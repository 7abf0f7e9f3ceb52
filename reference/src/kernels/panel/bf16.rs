//! bf16 panel storage: where each column's value sits ([`paired_pos`]) and the widening of
//! stored panel rows back to f32 ([`widen`], [`widen_block`]), exact.

/// Whole panel rows stored as bf16 pairs ([`paired_pos`]) as f32 in column order: the value
/// whose upper half is stored at `paired_pos(c)` of row `kk` goes to `out[kk * NP + c]`.
///
/// # Safety
/// `out` must be valid for writing `src.len()` values (it may be uninitialised) and aligned to
/// 64 bytes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn widen(src: &[u16], out: *mut f32) {
    debug_assert!(src.len().is_multiple_of(32), "whole panel rows");
    // SAFETY: 32 values read from src and written to out per block, inside both (the caller's
    // contract for out).
    unsafe {
        for i in (0..src.len() / 32 * 32).step_by(32) {
            widen_block(src.as_ptr().add(i), out.add(i));
        }
    }
}

/// Where column `c` of a panel row sits in bf16 storage: each 32 columns as 16 pairs, column
/// `j` in the low half of pair `j` and column `16 + j` in its high half, so that one 64-byte
/// load widens to two f32 vectors with one shift and one mask ([`widen_block`]).
pub(super) fn paired_pos(c: usize) -> usize {
    c / 32 * 32 + 2 * (c % 16) + c % 32 / 16
}

/// One 32-value block of [`widen`]: 16 pairs in one 64-byte load, their lower halves shifted
/// up (columns 0..16 of the block) and their upper halves masked (columns 16..32).
///
/// # Safety
/// 32 values readable at `src`, 32 writable at `out` (64-byte aligned); AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub(super) unsafe fn widen_block(src: *const u16, out: *mut f32) {
    use std::arch::x86_64::*;
    // SAFETY: the caller's contract.
    unsafe {
        let d = _mm512_loadu_si512(src as *const _);
        _mm512_store_ps(out, _mm512_castsi512_ps(_mm512_slli_epi32::<16>(d)));
        let hi = _mm512_and_si512(d, _mm512_set1_epi32(0xffff_0000u32 as i32));
        _mm512_store_ps(out.add(16), _mm512_castsi512_ps(hi));
    }
}
