//! Attention's keys and values in the unit's tile layout (`kernels::amx`'s weight layout:
//! per 32-column block and 32-input step, two 1 KiB tiles whose row `r` holds, for each of
//! the tile's 16 columns `j`, inputs `2r` and `2r + 1`), rounded to bf16, packed per (head,
//! segment) straight from their rows into 64-byte-aligned lines (a caller's buffers, reused):
//! - K as the weight of `q kᵀ` (key `j` is output column `j`, the head dims are the inputs);
//! - V as the weight of `p v`, that is Vᵀ (head dim `c` is output column `c`, the keys are the
//!   inputs): each line interleaves two keys' rows, 16 dims of each.
//!
//! The same values as `AmxWeight::pack` of K and of Vᵀ (`packs_equal_the_tile_layouts`), which
//! computes each value's place from its indices (about 5 ns a value: 10 ms a layer at 1024
//! tokens, measured on this VM, a quarter of the attention there); here each key's row is read
//! once, contiguous, and a line is written whole or from one row.

use super::amx::{Line, bf16_bits};
use super::row_slice;
use ndarray::ArrayView2;

/// Lines of a packed weight with `n` output columns and `k` inputs (whole blocks and steps).
fn lines(n: usize, k: usize) -> usize {
    n.div_ceil(32) * k.div_ceil(32) * 32
}

/// The line of (output block `cb`, input step `s`, tile `tile`, tile row `r`) of a weight with
/// `steps` input steps.
#[inline(always)]
fn line_at(cb: usize, s: usize, steps: usize, tile: usize, r: usize) -> usize {
    (cb * steps + s) * 32 + tile * 16 + r
}

/// K `[len, hd]` (any strides) into `out` as the weight of `q kᵀ`: key `j`'s pair of dims `(2i, 2i + 1)`
/// at values `2 (j % 16)` and `+1` of line (`j / 32`, `i / 16`, `j % 32 / 16`, `i % 16`);
/// zero past `len` and `hd`.
pub(super) fn pack_keys(k: ArrayView2<f32>, out: &mut Vec<Line>) {
    let (len, hd) = k.dim();
    let steps = hd.div_ceil(32);
    zeroed(out, lines(len, hd));
    for (key, row) in k.outer_iter().enumerate() {
        let row = row_slice(row);
        let (cb, tile, j) = (key / 32, key % 32 / 16, key % 16);
        for (i, pair) in row.chunks(2).enumerate() {
            let line = &mut out[line_at(cb, i / 16, steps, tile, i % 16)].0;
            line[2 * j] = bf16_bits(pair[0]);
            if let Some(&x) = pair.get(1) {
                line[2 * j + 1] = bf16_bits(x);
            }
        }
    }
}

/// V `[len, hd]` (any strides) into `out` as the weight of `p v` (Vᵀ): keys `(2i, 2i + 1)` of dims
/// `16 g .. 16 g + 16` interleaved in line (`g / 2`, `i / 16`, `g % 2`, `i % 16`); zero past
/// `len` and `hd`.
pub(super) fn pack_values(v: ArrayView2<f32>, out: &mut Vec<Line>) {
    let (len, hd) = v.dim();
    let steps = len.div_ceil(32);
    zeroed(out, lines(hd, len));
    let zeros = vec![0f32; hd];
    for i in 0..len.div_ceil(2) {
        let r0 = row_slice(v.row(2 * i));
        let r1 = match 2 * i + 1 < len {
            true => row_slice(v.row(2 * i + 1)),
            false => std::borrow::Cow::Borrowed(&zeros[..]),
        };
        for (g, (c0, c1)) in r0.chunks(16).zip(r1.chunks(16)).enumerate() {
            let line = &mut out[line_at(g / 2, i / 16, steps, g % 2, i % 16)].0;
            interleave_wide(c0, c1, line);
        }
    }
}

/// Queries `[qb, hd]` (any strides) into `out` as bf16 rows of lines, `[qb rounded up to 32][hd / 32
/// rounded up][32]`, zero past the edges: the input tiles of `q kᵀ` (row stride `hd / 32`
/// lines).
pub(super) fn pack_queries(q: ArrayView2<f32>, out: &mut Vec<Line>) {
    let (qb, hd) = q.dim();
    let steps = hd.div_ceil(32);
    zeroed(out, qb.div_ceil(32) * 32 * steps);
    for (r, row) in q.outer_iter().enumerate() {
        let row = row_slice(row);
        for (line, src) in out[r * steps..].iter_mut().zip(row.chunks(32)) {
            round_wide(src, &mut line.0);
        }
    }
}

/// `out` as `len` zero lines (its allocation reused).
fn zeroed(out: &mut Vec<Line>, len: usize) {
    out.clear();
    out.resize(len, Line([0; 32]));
}

/// `line[j] = bf16(src[j])` (`src` at most 32 values).
#[inline(always)]
fn round(src: &[f32], line: &mut [u16; 32]) {
    for (o, &x) in line.iter_mut().zip(src) {
        *o = bf16_bits(x);
    }
}

super::act::on_widest_unit! {
    /// [`round`] on the widest vector unit.
    fn round_wide(src: &[f32], line: &mut [u16; 32]) => round
}

/// `line[2 j] = bf16(a[j])`, `line[2 j + 1] = bf16(b[j])` (a and b of equal length, <= 16).
#[inline(always)]
fn interleave(a: &[f32], b: &[f32], line: &mut [u16; 32]) {
    for (o, (&x, &y)) in line.chunks_exact_mut(2).zip(a.iter().zip(b)) {
        o[0] = bf16_bits(x);
        o[1] = bf16_bits(y);
    }
}

super::act::on_widest_unit! {
    /// [`interleave`] on the widest vector unit.
    fn interleave_wide(a: &[f32], b: &[f32], line: &mut [u16; 32]) => interleave
}

/// The packed lines as the u16 values the tile loads read.
pub(super) fn values(lines: &[Line]) -> &[u16] {
    // SAFETY: `Line` is `repr(C)` over `[u16; 32]`, 64 bytes with no padding: the lines are
    // `32 * len` initialised u16 values, suitably aligned for u16.
    unsafe { std::slice::from_raw_parts(lines.as_ptr().cast::<u16>(), lines.len() * 32) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::amx::AmxWeight;
    use ndarray::{Array2, s};

    /// K and V packed here give the bits of `AmxWeight::pack` of K and of Vᵀ (the layout the
    /// attention's tile loads read), and Q the bits of its rows of lines, for lengths and head dims on and off the multiples of 32
    /// and 16, odd lengths (V's last pair half zero), strided views (a head's columns of a
    /// wider matrix) and values that round up, are NaN, infinite or subnormal.
    #[test]
    fn packs_equal_the_tile_layouts() {
        let mut lcg = crate::kernels::Lcg(7);
        for &(len, hd) in &[
            (1usize, 1usize),
            (2, 3),
            (33, 40),
            (129, 16),
            (300, 64),
            (64, 96),
            (17, 72),
        ] {
            let wide = Array2::from_shape_fn((len, 3 * hd), |_| match lcg.next_u64() % 53 {
                0 => f32::NAN,
                1 => f32::INFINITY,
                2 => -1.0e-39,
                3 => f32::from_bits(0x3f80_8000), // a tie: rounds to even
                _ => (lcg.unit() as f32 - 0.5) * 7.0,
            });
            let head = wide.slice(s![.., hd..2 * hd]);
            let want_k = AmxWeight::pack(head, true).expect("rounding always packs");
            let want_v = AmxWeight::pack(head.t(), true).expect("rounding always packs");
            // into buffers that held other values before: what was there must not show
            let (mut k, mut v, mut q) = (vec![Line([9; 32]); 999], vec![Line([9; 32]); 5], vec![]);
            pack_keys(head, &mut k);
            pack_values(head, &mut v);
            pack_queries(head, &mut q);
            let steps = hd.div_ceil(32);
            let mut want_q = vec![0u16; len.div_ceil(32) * 32 * steps * 32];
            for ((r, c), &x) in head.indexed_iter() {
                want_q[(r * steps + c / 32) * 32 + c % 32] = bf16_bits(x);
            }
            assert!(values(&q) == want_q, "len {len} hd {hd}: queries differ");
            assert!(
                values(&k) == want_k.packed(),
                "len {len} hd {hd}: keys differ"
            );
            assert!(
                values(&v) == want_v.packed(),
                "len {len} hd {hd}: values differ"
            );
        }
    }
}
