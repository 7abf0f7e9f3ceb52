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
//! tokens, measured on this VM, a quarter of the attention there); here a block of 32 keys is
//! packed for every head from its rows, each line written whole or from one row.

use super::amx::{Line, bf16_bits};
use super::row_slice;
use ndarray::ArrayView2;

/// Lines of a packed weight with `n` output columns and `k` inputs (whole blocks and steps).
fn lines(n: usize, k: usize) -> usize {
    n.div_ceil(32) * k.div_ceil(32) * 32
}

/// Lines of one head's packed K (`keys` keys of `hd` dims): the weight of `q kᵀ`, key `j`'s
/// pair of dims `(2i, 2i + 1)` at values `2 (j % 16)` and `+1` of line (`j / 32`, `i / 16`,
/// `j % 32 / 16`, `i % 16`).
pub(super) fn key_lines(keys: usize, hd: usize) -> usize {
    lines(keys, hd)
}

/// Lines of one head's packed V (`keys` keys of `hd` dims): the weight of `p v` (Vᵀ), keys
/// `(2i, 2i + 1)` of dims `16 g .. 16 g + 16` interleaved in line (`g / 2`, `i / 16`, `g % 2`,
/// `i % 16`).
pub(super) fn value_lines(keys: usize, hd: usize) -> usize {
    lines(hd, keys)
}

/// Keys `32 b .. 32 b + 32` (clipped to the segment) of every head: rows of `k` and `v`
/// (`[len, heads * hd]`, one segment's rows, any strides) into each head's packed K at
/// `kout[h]` and V at `vout[h]` (the layouts of [`key_lines`] and [`value_lines`]): the
/// block's lines of each, zeroed, then written; zero past `len` and `hd`. The block's rows
/// serve every head while they are in cache: a head at a time over the whole segment read a
/// 256-byte slice of every 4 KiB row, and 16 heads x 5184 keys took 41-43 ms on this VM (2
/// threads) where 1024 keys took 2.6; by blocks 7.6-9.0 and 1.6-1.8 ms. On the GPU machine's
/// Xeon (thread-summed) 41-45 -> 31-39 ms at 5184 keys, 1024 keys unchanged (5.3-8.1 ms).
///
/// # Safety
/// `kout[h]` valid for `key_lines(len, hd)` lines and `vout[h]` for `value_lines(len, hd)`,
/// for each of the `heads` heads; block `b`'s lines of them written by no one else meanwhile.
pub(super) unsafe fn pack_kv_block(
    k: ArrayView2<f32>,
    v: ArrayView2<f32>,
    heads: usize,
    b: usize,
    kout: &[*mut Line],
    vout: &[*mut Line],
) {
    let (len, d) = k.dim();
    let hd = d / heads;
    let (ksteps, vsteps, oblocks) = (hd.div_ceil(32), len.div_ceil(32), hd.div_ceil(32));
    let zero = Line([0; 32]);
    let keys = 32 * b..(32 * b + 32).min(len);
    let krows: Vec<_> = keys.clone().map(|key| row_slice(k.row(key))).collect();
    let vrows: Vec<_> = keys.clone().map(|key| row_slice(v.row(key))).collect();
    let zeros = vec![0f32; d];
    // a head at a time (its block's lines, 4 KiB of K and of V at 64 dims, stay in L1; the
    // block's 32 rows in L2)
    for h in 0..heads {
        let cols = h * hd..(h + 1) * hd;
        // SAFETY (the writes below): inside head h's buffers (the caller's contract) and in
        // block b's lines: K's lines b * ksteps * 32 .. (b + 1) * ksteps * 32, V's lines
        // (ob * vsteps + b) * 32 .. + 32 for each output block ob.
        let kb =
            unsafe { std::slice::from_raw_parts_mut(kout[h].add(b * ksteps * 32), ksteps * 32) };
        kb.fill(zero);
        for (t, row) in krows.iter().enumerate() {
            let (tile, j) = (t / 16, t % 16);
            for (i, pair) in row[cols.clone()].chunks(2).enumerate() {
                let line = &mut kb[(i / 16) * 32 + tile * 16 + i % 16].0;
                line[2 * j] = bf16_bits(pair[0]);
                if let Some(&x) = pair.get(1) {
                    line[2 * j + 1] = bf16_bits(x);
                }
            }
        }
        for ob in 0..oblocks {
            // SAFETY: as above.
            let vb =
                unsafe { std::slice::from_raw_parts_mut(vout[h].add((ob * vsteps + b) * 32), 32) };
            vb.fill(zero);
            let dims = cols.start + ob * 32..(cols.start + ob * 32 + 32).min(cols.end);
            for (p, pair) in vrows.chunks(2).enumerate() {
                let r1 = pair.get(1).map_or(&zeros[..], |r| &r[..]);
                let (c0, c1) = (&pair[0][dims.clone()], &r1[dims.clone()]);
                for (tile, (a, b)) in c0.chunks(16).zip(c1.chunks(16)).enumerate() {
                    interleave_wide(a, b, &mut vb[tile * 16 + p].0);
                }
            }
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

    /// K and V packed here give the bits of `AmxWeight::pack` of a head's K and Vᵀ (the layout
    /// the attention's tile loads read), and Q the bits of its rows of lines, for lengths and
    /// head dims on and off the multiples of 32 and 16, odd lengths (V's last pair half zero),
    /// strided views (heads' columns of a wider matrix), blocks packed in any order into dirty
    /// buffers, and values that round up, are NaN, infinite or subnormal.
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
            let wider = Array2::from_shape_fn((len, 4 * hd), |_| match lcg.next_u64() % 53 {
                0 => f32::NAN,
                1 => f32::INFINITY,
                2 => -1.0e-39,
                3 => f32::from_bits(0x3f80_8000), // a tie: rounds to even
                _ => (lcg.unit() as f32 - 0.5) * 7.0,
            });
            // three heads of a wider matrix: the middle one checked against the weight layout
            let wide = wider.slice(s![.., ..3 * hd]);
            let head = wide.slice(s![.., hd..2 * hd]);
            let want_k = AmxWeight::pack(head, true).expect("rounding always packs");
            let want_v = AmxWeight::pack(head.t(), true).expect("rounding always packs");
            let mut ks = vec![vec![Line([9; 32]); key_lines(len, hd)]; 3];
            let mut vs = vec![vec![Line([9; 32]); value_lines(len, hd)]; 3];
            let kp: Vec<*mut Line> = ks.iter_mut().map(|b| b.as_mut_ptr()).collect();
            let vp: Vec<*mut Line> = vs.iter_mut().map(|b| b.as_mut_ptr()).collect();
            for b in (0..len.div_ceil(32)).rev() {
                // SAFETY: the buffers hold key_lines / value_lines lines; one block at a time.
                unsafe { pack_kv_block(wide, wide, 3, b, &kp, &vp) };
            }
            let (k, v) = (&ks[1], &vs[1]);
            let mut q = vec![Line([9; 32]); 5];
            pack_queries(head, &mut q);
            let steps = hd.div_ceil(32);
            let mut want_q = vec![0u16; len.div_ceil(32) * 32 * steps * 32];
            for ((r, c), &x) in head.indexed_iter() {
                want_q[(r * steps + c / 32) * 32 + c % 32] = bf16_bits(x);
            }
            assert!(values(&q) == want_q, "len {len} hd {hd}: queries differ");
            assert!(
                values(k) == want_k.packed(),
                "len {len} hd {hd}: keys differ"
            );
            assert!(
                values(v) == want_v.packed(),
                "len {len} hd {hd}: values differ"
            );
        }
    }
}
