//! The packing of x for the tiles ([`pack_rows`]): tiles of [`MR`] rows, each `[k][MR]`,
//! interleaved 16 columns at a time on AVX-512 ([`interleave6`]), a value at a time elsewhere.

use super::{MR, Tile};

/// x `[m, k]` as tiles of [`MR`] rows, each `[k][MR]` (rows past m zero): a step of a tile
/// reads its MR inputs from one place instead of MR rows k apart (which with k a multiple of
/// 1024 fall into one L1 set). Written once, not zeroed first: a forward's products pack
/// 0.25-1 MiB each at 8x8, and zeroing that on the calling thread kept the others waiting.
/// `tile`: the tile the product runs on (AVX-512's interleaves with its instructions).
pub(super) fn pack_rows(x: &[f32], m: usize, k: usize, tile: Tile) -> Vec<f32> {
    use std::mem::MaybeUninit;
    let tile_kind = tile;
    #[cfg(not(target_arch = "x86_64"))]
    let _ = tile_kind;
    let len = m.div_ceil(MR) * k * MR;
    let mut xp: Vec<f32> = Vec::with_capacity(len);
    if len == 0 {
        return xp;
    }
    let spare = &mut xp.spare_capacity_mut()[..len];
    super::super::team::for_each_chunk_mut(spare, k * MR, |t, tile| {
        let rows = MR.min(m - t * MR);
        let src = &x[t * MR * k..(t * MR + rows) * k];
        if rows == MR {
            let r: [&[f32]; MR] = std::array::from_fn(|i| &src[i * k..(i + 1) * k]);
            #[cfg(target_arch = "x86_64")]
            if tile_kind == Tile::Avx512 {
                // SAFETY: the tile holds k * MR values (MaybeUninit<f32> has f32's layout), every
                // row k; AVX-512F is there (`linear_impl` asserted it for this tile).
                unsafe {
                    interleave6(r, tile.as_mut_ptr() as *mut f32, k);
                }
                return;
            }
            for (kk, out) in tile.chunks_exact_mut(MR).enumerate() {
                for (o, row) in out.iter_mut().zip(&r) {
                    o.write(row[kk]);
                }
            }
            return;
        }
        tile.fill(MaybeUninit::new(0.0));
        for (r, row) in src.chunks_exact(k).enumerate() {
            for (kk, &v) in row.iter().enumerate() {
                tile[kk * MR + r].write(v);
            }
        }
    });
    // SAFETY: the chunks of k * MR values are the tiles, and every tile wrote all of its values
    // (a full one each of its k * MR, a partial one zeros first), so 0..len are initialised.
    unsafe { xp.set_len(len) };
    xp
}

/// Per output vector `j` of a 16-column block of [`interleave6`] (values `16j..16j + 16` of
/// its `[16][6]` output, value `f` being row `f % 6` at column `f / 6`): for each pair of rows
/// `(2p, 2p + 1)`, the lane of the pair's 32 values (row 2p's 16, then row 2p + 1's) that each
/// output lane takes (0 where another pair feeds it); and the lanes fed by pairs 1 and 2.
struct Interleave {
    idx: [[[u32; 16]; 3]; MR],
    from1: [u16; MR],
    from2: [u16; MR],
}

const INTERLEAVE: Interleave = {
    let mut t = Interleave {
        idx: [[[0; 16]; 3]; MR],
        from1: [0; MR],
        from2: [0; MR],
    };
    let mut j = 0;
    while j < MR {
        let mut i = 0;
        while i < 16 {
            let f = 16 * j + i;
            let (kk, r) = (f / MR, f % MR);
            t.idx[j][r / 2][i] = ((r % 2) * 16 + kk) as u32;
            if r / 2 == 1 {
                t.from1[j] |= 1 << i;
            }
            if r / 2 == 2 {
                t.from2[j] |= 1 << i;
            }
            i += 1;
        }
        j += 1;
    }
    t
};

/// `out[kk * 6 + r] = rows[r][kk]` for kk < k: 16 columns at a time, each output vector put
/// together from the six rows' vectors by three two-source permutes and two blends (the scalar
/// loop, a load and a store per value, took 1.4% of an 8x8 forward's samples).
///
/// # Safety
/// Every row holds at least k values, `out` is valid for writing `6 k`; AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn interleave6(rows: [&[f32]; MR], out: *mut f32, k: usize) {
    use std::arch::x86_64::*;
    const _: () = assert!(MR == 6, "interleave6 is written for six rows");
    let n16 = k / 16 * 16;
    // SAFETY: reads rows[r][kk0..kk0 + 16] with kk0 + 16 <= n16 <= k, writes out[..6 k]; the
    // tables are 16 u32 each.
    unsafe {
        let t = &INTERLEAVE;
        let idx = |j: usize, p: usize| _mm512_loadu_si512(t.idx[j][p].as_ptr() as *const _);
        for kk0 in (0..n16).step_by(16) {
            let v: [__m512; MR] =
                std::array::from_fn(|r| _mm512_loadu_ps(rows[r].as_ptr().add(kk0)));
            for j in 0..MR {
                let a = _mm512_permutex2var_ps(v[0], idx(j, 0), v[1]);
                let b = _mm512_permutex2var_ps(v[2], idx(j, 1), v[3]);
                let c = _mm512_permutex2var_ps(v[4], idx(j, 2), v[5]);
                let o = _mm512_mask_blend_ps(t.from2[j], _mm512_mask_blend_ps(t.from1[j], a, b), c);
                _mm512_storeu_ps(out.add(kk0 * MR + 16 * j), o);
            }
        }
        for kk in n16..k {
            for (r, row) in rows.iter().enumerate() {
                out.add(kk * MR + r).write(row[kk]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The packed x: tiles of MR rows `[k][MR]`, rows past m zero, for k with and without a
    /// tail past the last 16 columns, and m with and without a partial tile; for each tile this
    /// CPU runs.
    #[test]
    fn pack_rows_interleaves_tiles() {
        for tile in [Tile::Avx2, Tile::Avx512] {
            if !tile.runs_here() {
                eprintln!("skipped: this CPU lacks the {tile:?} tile");
                continue;
            }
            pack_rows_interleaves_tiles_on(tile);
        }
    }

    fn pack_rows_interleaves_tiles_on(tile: Tile) {
        for (m, k) in [(6, 16), (12, 48), (13, 1176), (64, 1024), (5, 7), (7, 3)] {
            let x: Vec<f32> = (0..m * k).map(|i| i as f32 + 0.5).collect();
            let xp = pack_rows(&x, m, k, tile);
            assert_eq!(xp.len(), m.div_ceil(MR) * k * MR);
            for (i, &v) in xp.iter().enumerate() {
                let (t, kk, r) = (i / (k * MR), i % (k * MR) / MR, i % MR);
                let row = t * MR + r;
                let want = if row < m { x[row * k + kk] } else { 0.0 };
                assert_eq!(
                    v.to_bits(),
                    want.to_bits(),
                    "{tile:?} m {m} k {k}: tile {t} column {kk} row {r}"
                );
            }
        }
    }
}
