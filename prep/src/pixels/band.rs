//! One band of the canvas (`patch_size * merge_size` rows): its rows made from resized or
//! copied content rows with the padding zeroed, and its `pixel_values` rows normalised out of
//! it, one value at a time or on AVX-512.

use super::NormLut;
use crate::resize;
use std::mem::MaybeUninit;

/// The canvas rows of band `b` (`unit` rows of `band.len() / unit` bytes, from canvas row
/// `b * unit`): content rows (`row_in` bytes each, `ch` of them) made from `src`, input rows
/// already resized horizontally of which the first is input row `base`, by the vertical pass
/// `vk` (or copied when there is none), zero to the right of and below the content.
#[allow(clippy::too_many_arguments)]
pub(super) fn canvas_band(
    band: &mut [u8],
    b: usize,
    unit: usize,
    ch: usize,
    row_in: usize,
    vk: Option<&resize::AxisCoeffs>,
    src: &[u8],
    base: usize,
) {
    match vk {
        Some(k) => fill_band(band, b, unit, ch, row_in, |y, left| {
            resize::vertical_row_dispatch(k, src, row_in, y, base, left)
        }),
        None => fill_band(band, b, unit, ch, row_in, |y, left| {
            left.copy_from_slice(&src[(y - base) * row_in..][..row_in])
        }),
    }
}

/// The canvas rows of band `b` (`unit` rows of `band.len() / unit` bytes, from canvas row
/// `b * unit`): `content(y, left)` writes the `row_in` bytes of content row `y` (`ch` of them),
/// zero to the right of and below the content.
pub(super) fn fill_band(
    band: &mut [u8],
    b: usize,
    unit: usize,
    ch: usize,
    row_in: usize,
    mut content: impl FnMut(usize, &mut [u8]),
) {
    let row_out = band.len() / unit;
    for (r, row) in band.chunks_exact_mut(row_out).enumerate() {
        let y = b * unit + r;
        if y >= ch {
            row.fill(0);
            continue;
        }
        let (left, pad) = row.split_at_mut(row_in);
        content(y, left);
        pad.fill(0);
    }
}

/// The `pixel_values` rows of one band (`ps * ms` canvas rows of `w` pixels): merge blocks left
/// to right, patches row-major within a block, each row `(c, t, ph, pw)` with the `tp` temporal
/// copies identical.
pub(super) fn band_rows(
    band: &[u8],
    w: usize,
    ps: usize,
    ms: usize,
    tp: usize,
    lut: &NormLut,
    dst: &mut [MaybeUninit<f32>],
) {
    #[cfg(target_arch = "x86_64")]
    if ps <= 16 && band_rows_x86::available() {
        // SAFETY: the CPU has the features `band_rows_avx512` is compiled for (checked just above).
        unsafe { band_rows_x86::band_rows_avx512(band, w, ps, ms, tp, lut, dst) };
        return;
    }
    band_rows_scalar(band, w, ps, ms, tp, lut, dst)
}

/// [`band_rows`] one value at a time: the definition the AVX-512 build is tested against.
fn band_rows_scalar(
    band: &[u8],
    w: usize,
    ps: usize,
    ms: usize,
    tp: usize,
    lut: &NormLut,
    dst: &mut [MaybeUninit<f32>],
) {
    let plane = ps * ps;
    let stride = w * 3;
    for (base, row) in patch_rows(w, ps, ms, tp, dst) {
        for c in 0..3 {
            let first = c * tp * plane;
            let lut_c = &lut.0[c];
            for py in 0..ps {
                let line = &band[base + py * stride + c..];
                let o = &mut row[first + py * ps..first + (py + 1) * ps];
                for (px, v) in o.iter_mut().enumerate() {
                    v.write(lut_c[line[px * 3] as usize]);
                }
            }
            for tt in 1..tp {
                row.copy_within(first..first + plane, first + tt * plane);
            }
        }
    }
}

/// The `pixel_values` rows one band fills, in order, each with the offset in the band (`ps * ms`
/// canvas rows of `w` RGB pixels) of its patch's top-left byte: merge blocks left to right,
/// patches row-major within a block. Both builds of [`band_rows`] walk a band this way.
fn patch_rows(
    w: usize,
    ps: usize,
    ms: usize,
    tp: usize,
    dst: &mut [MaybeUninit<f32>],
) -> impl Iterator<Item = (usize, &mut [MaybeUninit<f32>])> {
    let stride = w * 3;
    let mut rows = dst.chunks_exact_mut(3 * tp * ps * ps);
    (0..w / (ps * ms))
        .flat_map(move |bc| {
            (0..ms).flat_map(move |ir| {
                (0..ms).map(move |ic| ir * ps * stride + (bc * ms + ic) * ps * 3)
            })
        })
        .map(move |base| (base, rows.next().expect("a band holds gw * ms rows")))
}

/// [`band_rows`] on AVX-512: a patch row's `ps` pixels (`3 * ps` bytes, one masked load) are split
/// into their three channels by one byte permutation each, and each channel's `ps` levels are
/// looked up in the table by one gather; the rows of later frames (`tp > 1`) are stored from the
/// same register. The same table, so the same values, as the scalar loop.
#[cfg(target_arch = "x86_64")]
mod band_rows_x86 {
    use super::NormLut;
    use std::arch::x86_64::*;
    use std::mem::MaybeUninit;

    /// (std caches what the CPU has: each call is a few loads.)
    pub(super) fn available() -> bool {
        is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vbmi")
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
    pub(super) fn band_rows_avx512(
        band: &[u8],
        w: usize,
        ps: usize,
        ms: usize,
        tp: usize,
        lut: &NormLut,
        dst: &mut [MaybeUninit<f32>],
    ) {
        assert!(
            ps <= 16,
            "one register holds a patch row of at most 16 pixels"
        );
        let plane = ps * ps;
        let stride = w * 3;
        let n_bytes = ps * 3;
        let load_mask: __mmask64 = (1u64 << n_bytes) - 1;
        let lane_mask: __mmask16 = ((1u32 << ps) - 1) as __mmask16;
        // byte i of channel c's register: byte 3 i + c of the patch row (lanes past ps unused)
        let perm: [__m512i; 3] = std::array::from_fn(|c| {
            let mut idx = [0u8; 64];
            for (i, v) in idx.iter_mut().take(16).enumerate() {
                *v = (3 * i + c) as u8;
            }
            // SAFETY: `idx` is 64 readable bytes.
            unsafe { _mm512_loadu_si512(idx.as_ptr().cast()) }
        });
        for (base, row) in super::patch_rows(w, ps, ms, tp, dst) {
            for py in 0..ps {
                let line = &band[base + py * stride..base + py * stride + n_bytes];
                // SAFETY: the mask covers the `n_bytes` bytes of `line` and no others.
                let px = unsafe { _mm512_maskz_loadu_epi8(load_mask, line.as_ptr().cast()) };
                for (c, perm_c) in perm.iter().enumerate() {
                    let bytes = _mm512_permutexvar_epi8(*perm_c, px);
                    let idx = _mm512_cvtepu8_epi32(_mm512_castsi512_si128(bytes));
                    // SAFETY: every index is a byte (< 256) and the table holds 256
                    // values; lanes past `ps` are masked off.
                    let v = unsafe {
                        _mm512_mask_i32gather_ps::<4>(
                            _mm512_setzero_ps(),
                            lane_mask,
                            idx,
                            lut.0[c].as_ptr().cast(),
                        )
                    };
                    for tt in 0..tp {
                        let at = c * tp * plane + tt * plane + py * ps;
                        let out = &mut row[at..at + ps];
                        // SAFETY: the mask covers the `ps` values of `out` and no others.
                        unsafe { _mm512_mask_storeu_ps(out.as_mut_ptr().cast(), lane_mask, v) };
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The AVX-512 build writes the same values as the scalar loop, for several patch, merge and
    /// frame counts, widths and tables, on random levels.
    #[test]
    fn band_rows_avx512_equals_scalar() {
        #[cfg(target_arch = "x86_64")]
        {
            if !band_rows_x86::available() {
                eprintln!("no AVX-512 VBMI on this CPU: only the scalar loop runs here");
                return;
            }
            let mut seed = 0x9e37_79b9_7f4a_7c15u64;
            let mut next = || {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed
            };
            let base = crate::PrepOptions::default().image;
            let mut custom = base.clone();
            custom.image_mean = [0.1, 0.7, 0.33];
            custom.image_std = [0.2, -0.9, 1.7];
            let mut plain = base.clone();
            plain.do_normalize = false;
            for p in [&base, &custom, &plain] {
                let lut = NormLut::new(p);
                for (ps, ms, tp, gw) in [
                    (14, 2, 2, 3),
                    (14, 2, 1, 1),
                    (16, 1, 3, 2),
                    (5, 3, 2, 2),
                    (1, 1, 1, 4),
                ] {
                    let (w, unit) = (gw * ps * ms, ps * ms);
                    let band: Vec<u8> = (0..unit * w * 3).map(|_| next() as u8).collect();
                    let n = gw * ms * ms * 3 * tp * ps * ps;
                    let mut a = vec![MaybeUninit::new(f32::NAN); n];
                    band_rows_scalar(&band, w, ps, ms, tp, &lut, &mut a);
                    // SAFETY: both were filled with initialised values.
                    let bits = |v: &[MaybeUninit<f32>]| -> Vec<u32> {
                        v.iter()
                            .map(|x| unsafe { x.assume_init() }.to_bits())
                            .collect()
                    };
                    let a = bits(&a);
                    assert!(
                        a.iter().all(|&v| !f32::from_bits(v).is_nan()),
                        "every value written"
                    );
                    // at every offset from a 64-byte line, nothing written around the rows
                    for off in 0..16usize {
                        let mut buf = vec![MaybeUninit::new(f32::NAN); n + 32];
                        let at = off + buf.as_ptr().align_offset(64);
                        let b = &mut buf[at..at + n];
                        // SAFETY: available() was checked above.
                        unsafe { band_rows_x86::band_rows_avx512(&band, w, ps, ms, tp, &lut, b) };
                        assert_eq!(a, bits(b), "ps {ps} ms {ms} tp {tp} gw {gw} at {off}");
                        let around = bits(&buf[..at]).into_iter().chain(bits(&buf[at + n..]));
                        assert!(
                            around.into_iter().all(|v| f32::from_bits(v).is_nan()),
                            "nothing written outside the rows (at {off})"
                        );
                    }
                }
            }
        }
    }
}
