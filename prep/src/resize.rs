//! Antialiased bicubic resize of 8-bit RGB, bit-identical to
//! `torchvision.transforms.v2.functional.resize(uint8 CHW, BICUBIC, antialias=True)` on the CPU,
//! which runs torch's native uint8 kernel (`_upsample_bicubic2d_aa`, PIL-SIMD style):
//!
//! - separable: a horizontal pass (skipped when the width is unchanged) into a uint8 buffer, then a
//!   vertical pass (skipped when the height is unchanged);
//! - per axis, `scale = in / out` (double); `support = 2 * scale` when downscaling, else 2;
//!   output `i` reads `xsize` inputs from `xmin` with `center = scale * (i + 0.5)`,
//!   `xmin = max(trunc(center - support + 0.5), 0)`,
//!   `xsize = min(trunc(center + support + 0.5), in) - xmin`, clamped to `ceil(support)*2 + 1`;
//! - weight `j` = the Keys cubic (a = -0.5) at `(j + xmin - center + 0.5) / max(scale, 1)`,
//!   computed in double and divided by their sum;
//! - one precision per axis: the largest `p <= 22` such that `round(wmax * 2^p)` stays below
//!   2^15 (`wmax` the largest normalised weight of the axis); weights become
//!   `trunc(w * 2^p ± 0.5)` as int16;
//! - each output value is `clamp((2^(p-1) + sum(src * w)) >> p, 0, 255)` in int32.
//!
//! `tests/resize_torch.rs` holds cases produced by torch itself.

use crate::error::{PrepError, Result};
use image::RgbImage;
use rayon::prelude::*;

/// Keys' cubic convolution kernel with a = -0.5, as torch's `HelperInterpCubic::aa_filter`.
fn cubic(x: f64) -> f64 {
    const A: f64 = -0.5;
    let x = x.abs();
    if x < 1.0 {
        ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        ((A * x - 5.0 * A) * x + 8.0 * A) * x - 4.0 * A
    } else {
        0.0
    }
}

/// Fixed-point taps of one axis.
#[derive(Debug, Clone)]
pub struct AxisCoeffs {
    /// First input index read by each output.
    pub xmin: Vec<usize>,
    /// Inputs read by each output.
    pub xsize: Vec<usize>,
    /// Stride of `weights` (taps per output, zero-padded).
    pub ksize: usize,
    /// `[out, ksize]` int16 weights scaled by `2^precision`.
    pub weights: Vec<i16>,
    /// Fixed-point precision of `weights`.
    pub precision: u32,
}

/// The taps torch computes for one axis of a bicubic antialiased resize from `input` to `output`.
pub fn axis_coeffs(input: usize, output: usize) -> AxisCoeffs {
    let scale = input as f64 / output as f64;
    let support = if scale >= 1.0 { 2.0 * scale } else { 2.0 };
    let ksize = support.ceil() as usize * 2 + 1;
    let invscale = if scale >= 1.0 { 1.0 / scale } else { 1.0 };

    let mut xmin = Vec::with_capacity(output);
    let mut xsize = Vec::with_capacity(output);
    let mut wf = vec![0f64; output * ksize];
    let mut wmax = 0f64;
    for i in 0..output {
        let center = scale * (i as f64 + 0.5);
        // C++ `static_cast<int64_t>` truncates toward zero.
        let lo = ((center - support + 0.5) as i64).max(0);
        let hi = ((center + support + 0.5) as i64).min(input as i64);
        let size = (hi - lo).clamp(0, ksize as i64) as usize;
        let w = &mut wf[i * ksize..(i + 1) * ksize];
        let mut total = 0f64;
        for (j, wj) in w.iter_mut().enumerate().take(size) {
            let v = cubic(((j as i64 + lo) as f64 - center + 0.5) * invscale);
            *wj = v;
            total += v;
        }
        if total != 0.0 {
            for wj in w.iter_mut().take(size) {
                *wj /= total;
                wmax = wmax.max(*wj);
            }
        }
        xmin.push(lo as usize);
        xsize.push(size);
    }

    let mut precision = 0u32;
    while precision < 22 {
        let next = (0.5 + wmax * (1u64 << (precision + 1)) as f64) as i64;
        if next >= 1 << 15 {
            break;
        }
        precision += 1;
    }
    let mult = (1u64 << precision) as f64;
    let weights = wf
        .iter()
        .map(|&w| {
            let v = w * mult;
            (if v < 0.0 { -0.5 + v } else { 0.5 + v }) as i32 as i16
        })
        .collect();
    AxisCoeffs {
        xmin,
        xsize,
        ksize,
        weights,
        precision,
    }
}

#[inline(always)]
fn finish(acc: i32, precision: u32) -> u8 {
    (acc >> precision).clamp(0, 255) as u8
}

/// Rows the horizontal pass handles together: the tile puts them side by side so every
/// multiply-add runs over `LANES` rows at once.
const LANES: usize = 16;

/// Horizontal pass over interleaved rows of `C` channels.
pub(crate) fn horizontal<const C: usize>(
    src: &[u8],
    in_w: usize,
    rows: usize,
    out_w: usize,
) -> Vec<u8> {
    let k = axis_coeffs(in_w, out_w);
    let mut out = vec![0u8; rows * out_w * C];
    crate::pixels::advise_huge_pages(&mut out);
    out.par_chunks_mut(LANES * out_w * C)
        .zip(src.par_chunks(LANES * in_w * C))
        .for_each_init(
            || vec![[0u8; LANES]; (in_w + out_w) * C],
            |tile, (oblock, iblock)| {
                horizontal_block_dispatch::<C>(&k, tile, iblock, oblock, in_w, out_w)
            },
        );
    out
}

/// The horizontal pass of one resize for callers that produce rows piecewise (the JPEG decoder
/// resizes each group of rows as it comes out): same bytes as [`horizontal`], row for row.
pub(crate) struct HorizontalPass {
    k: AxisCoeffs,
    in_w: usize,
    out_w: usize,
}

impl HorizontalPass {
    /// Rows handled per [`HorizontalPass::rows`] call, at most.
    pub(crate) const ROWS: usize = LANES;

    pub(crate) fn new(in_w: usize, out_w: usize) -> Self {
        HorizontalPass {
            k: axis_coeffs(in_w, out_w),
            in_w,
            out_w,
        }
    }

    /// Output width in pixels.
    pub(crate) fn out_w(&self) -> usize {
        self.out_w
    }

    /// Scratch for [`HorizontalPass::rows`].
    pub(crate) fn tile(&self) -> Vec<[u8; LANES]> {
        vec![[0u8; LANES]; (self.in_w + self.out_w) * 3]
    }

    /// Resizes any number of RGB rows (`src`, `in_w * 3` bytes each) into new rows, on this
    /// thread.
    pub(crate) fn resize_rows(&self, src: &[u8]) -> Vec<u8> {
        let rows = src.len() / (self.in_w * 3);
        let mut out = vec![0u8; rows * self.out_w * 3];
        let mut tile = self.tile();
        for (o, r) in out
            .chunks_mut(Self::ROWS * self.out_w * 3)
            .zip(src.chunks(Self::ROWS * self.in_w * 3))
        {
            self.rows(&mut tile, r, o);
        }
        out
    }

    /// Resizes up to [`HorizontalPass::ROWS`] RGB rows (`src`, `in_w * 3` bytes each) into `out`
    /// (`out_w * 3` bytes each).
    pub(crate) fn rows(&self, tile: &mut [[u8; LANES]], src: &[u8], out: &mut [u8]) {
        debug_assert!(src.len() <= LANES * self.in_w * 3);
        debug_assert_eq!(src.len() / (self.in_w * 3), out.len() / (self.out_w * 3));
        horizontal_block_dispatch::<3>(&self.k, tile, src, out, self.in_w, self.out_w)
    }
}

fn horizontal_block_dispatch<const C: usize>(
    k: &AxisCoeffs,
    tile: &mut [[u8; LANES]],
    src: &[u8],
    out: &mut [u8],
    in_w: usize,
    out_w: usize,
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2 (checked just above).
        unsafe { horizontal_block_avx2::<C>(k, tile, src, out, in_w, out_w) };
        return;
    }
    horizontal_block::<C>(k, tile, src, out, in_w, out_w)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn horizontal_block_avx2<const C: usize>(
    k: &AxisCoeffs,
    tile: &mut [[u8; LANES]],
    src: &[u8],
    out: &mut [u8],
    in_w: usize,
    out_w: usize,
) {
    horizontal_block::<C>(k, tile, src, out, in_w, out_w)
}

/// Up to `LANES` rows: transpose them into `tile` (`tile[i][r]` = byte `i` of row `r`), then
/// every output value of all rows is one vector multiply-add per tap, into the rest of `tile`
/// (`in_w * C` entries, then `out_w * C`), transposed back into the output rows.
#[inline(always)]
fn horizontal_block<const C: usize>(
    k: &AxisCoeffs,
    tile: &mut [[u8; LANES]],
    src: &[u8],
    out: &mut [u8],
    in_w: usize,
    out_w: usize,
) {
    let row_len = in_w * C;
    let rows = src.len() / row_len;
    let (tile, otile) = tile.split_at_mut(row_len);
    transpose_rows(src, row_len, rows, tile);
    let half = 1i32 << (k.precision - 1);
    let out_stride = out_w * C;
    for x in 0..out_w {
        let w = &k.weights[x * k.ksize..x * k.ksize + k.xsize[x]];
        let taps = &tile[k.xmin[x] * C..(k.xmin[x] + w.len()) * C];
        for c in 0..C {
            // Lane r of `taps[c + j*C]` is tap j of row r: 16 bytes apart per element.
            otile[x * C + c] = dot16(taps[c..].as_flattened(), C * LANES, w, half, k.precision);
        }
    }
    untranspose_rows(otile, out_stride, rows, out);
}

/// A 16x16 byte transpose: byte `j` of result `b` is byte `b` of `r[j]`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn transpose16(r: &[std::arch::x86_64::__m128i; 16]) -> [std::arch::x86_64::__m128i; 16] {
    // SAFETY: SSE2 is part of x86_64; register operations only.
    unsafe {
        use std::arch::x86_64::*;
        let mut a = [_mm_setzero_si128(); 16];
        for j in 0..8 {
            a[2 * j] = _mm_unpacklo_epi8(r[2 * j], r[2 * j + 1]);
            a[2 * j + 1] = _mm_unpackhi_epi8(r[2 * j], r[2 * j + 1]);
        }
        let mut b = [_mm_setzero_si128(); 16];
        for q in 0..4 {
            let (x0, x1, y0, y1) = (a[4 * q], a[4 * q + 1], a[4 * q + 2], a[4 * q + 3]);
            b[4 * q] = _mm_unpacklo_epi16(x0, y0);
            b[4 * q + 1] = _mm_unpackhi_epi16(x0, y0);
            b[4 * q + 2] = _mm_unpacklo_epi16(x1, y1);
            b[4 * q + 3] = _mm_unpackhi_epi16(x1, y1);
        }
        let mut c = [_mm_setzero_si128(); 16];
        for h in 0..2 {
            for m in 0..4 {
                c[8 * h + 2 * m] = _mm_unpacklo_epi32(b[8 * h + m], b[8 * h + 4 + m]);
                c[8 * h + 2 * m + 1] = _mm_unpackhi_epi32(b[8 * h + m], b[8 * h + 4 + m]);
            }
        }
        let mut t = [_mm_setzero_si128(); 16];
        for m in 0..8 {
            t[2 * m] = _mm_unpacklo_epi64(c[m], c[m + 8]);
            t[2 * m + 1] = _mm_unpackhi_epi64(c[m], c[m + 8]);
        }
        t
    }
}

/// The inverse of [`transpose_rows`]: `out[r * row_len + i] = tile[i][r]` for `r < rows`.
#[inline(always)]
fn untranspose_rows(tile: &[[u8; LANES]], row_len: usize, rows: usize, out: &mut [u8]) {
    assert!(tile.len() >= row_len && out.len() >= rows * row_len);
    let mut i0 = 0;
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: SSE2 is part of x86_64; every load reads one `[u8; 16]` element of `tile`
        // (i0 + 16 <= row_len <= tile.len()), every store writes 16 bytes of row r < rows at
        // i0 + 16 <= row_len, inside `out` by the assertion above.
        unsafe {
            use std::arch::x86_64::*;
            while i0 + 16 <= row_len {
                let mut r = [_mm_setzero_si128(); 16];
                for (j, rj) in r.iter_mut().enumerate() {
                    *rj = _mm_loadu_si128(tile[i0 + j].as_ptr() as *const __m128i);
                }
                let t = transpose16(&r);
                for (row, tr) in t.iter().enumerate().take(rows) {
                    _mm_storeu_si128(
                        out.as_mut_ptr().add(row * row_len + i0) as *mut __m128i,
                        *tr,
                    );
                }
                i0 += 16;
            }
        }
    }
    for (i, t) in tile.iter().enumerate().take(row_len).skip(i0) {
        for (r, &v) in t.iter().enumerate().take(rows) {
            out[r * row_len + i] = v;
        }
    }
}

/// `tile[i][r] = src[r * row_len + i]` for `r < rows`, zero for the missing rows.
#[inline(always)]
fn transpose_rows(src: &[u8], row_len: usize, rows: usize, tile: &mut [[u8; LANES]]) {
    let mut i0 = 0;
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: SSE2 is part of x86_64; every load reads 16 bytes inside `src` or `zero`,
        // every store writes one `[u8; 16]` element of `tile`.
        unsafe {
            use std::arch::x86_64::*;
            let zero = [0u8; 16];
            while i0 + 16 <= row_len {
                let mut r = [_mm_setzero_si128(); 16];
                for (j, rj) in r.iter_mut().enumerate() {
                    let p = if j < rows {
                        src.as_ptr().add(j * row_len + i0)
                    } else {
                        zero.as_ptr()
                    };
                    *rj = _mm_loadu_si128(p as *const __m128i);
                }
                let t = transpose16(&r);
                for (m, tm) in t.iter().enumerate() {
                    _mm_storeu_si128(tile[i0 + m].as_mut_ptr() as *mut __m128i, *tm);
                }
                i0 += 16;
            }
        }
    }
    for (i, t) in tile.iter_mut().enumerate().take(row_len).skip(i0) {
        for (r, v) in t.iter_mut().enumerate() {
            *v = if r < rows { src[r * row_len + i] } else { 0 };
        }
    }
}

/// Sixteen outputs at once: lane `l` is `clamp((half + sum_j data[j*stride + l] * w[j]) >> p)`.
/// `data` must hold `(w.len() - 1) * stride + 16` bytes.
#[inline(always)]
fn dot16(data: &[u8], stride: usize, w: &[i16], half: i32, precision: u32) -> [u8; 16] {
    assert!(w.is_empty() || data.len() >= (w.len() - 1) * stride + 16);
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 is available; every load reads 16 bytes at `j * stride` for `j < w.len()`,
        // inside `data` by the assertion above.
        unsafe {
            use std::arch::x86_64::*;
            let p = data.as_ptr();
            let mut a0 = _mm256_set1_epi32(half);
            let mut a1 = a0;
            let mut j = 0;
            // Two taps at a time: interleave their bytes into i16 pairs and use madd.
            while j + 2 <= w.len() {
                let v0 = _mm_loadu_si128(p.add(j * stride) as *const __m128i);
                let v1 = _mm_loadu_si128(p.add((j + 1) * stride) as *const __m128i);
                let wv =
                    _mm256_set1_epi32(((w[j + 1] as u16 as u32) << 16 | w[j] as u16 as u32) as i32);
                let lo = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(v0, v1));
                let hi = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(v0, v1));
                a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(lo, wv));
                a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(hi, wv));
                j += 2;
            }
            if j < w.len() {
                let v0 = _mm_loadu_si128(p.add(j * stride) as *const __m128i);
                let z = _mm_setzero_si128();
                let wv = _mm256_set1_epi32(w[j] as u16 as i32);
                let lo = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(v0, z));
                let hi = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(v0, z));
                a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(lo, wv));
                a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(hi, wv));
            }
            // Arithmetic shift, then signed-saturating packs to i16 and unsigned-saturating to u8:
            // the clamp to 0..=255. packs works per 128-bit lane, hence the permute.
            let sh = _mm_cvtsi32_si128(precision as i32);
            let a0 = _mm256_sra_epi32(a0, sh);
            let a1 = _mm256_sra_epi32(a1, sh);
            let w16 = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packs_epi32(a0, a1));
            let b = _mm_packus_epi16(
                _mm256_castsi256_si128(w16),
                _mm256_extracti128_si256::<1>(w16),
            );
            let mut out = [0u8; 16];
            _mm_storeu_si128(out.as_mut_ptr() as *mut __m128i, b);
            return out;
        }
    }
    let mut acc = [half; 16];
    for (j, &wj) in w.iter().enumerate() {
        for (a, &v) in acc.iter_mut().zip(&data[j * stride..j * stride + 16]) {
            *a += v as i32 * wj as i32;
        }
    }
    acc.map(|a| finish(a, precision))
}

/// Vertical pass: each output row is a weighted sum of whole input rows (`row_len` bytes each).
fn vertical(src: &[u8], row_len: usize, in_h: usize, out_h: usize) -> Vec<u8> {
    let k = axis_coeffs(in_h, out_h);
    let mut out = vec![0u8; out_h * row_len];
    out.par_chunks_mut(row_len)
        .enumerate()
        .for_each(|(y, orow)| vertical_row_dispatch(&k, src, row_len, y, 0, orow));
    out
}

/// Output row `y` of the vertical pass (`out` is `row_len` bytes; `src` rows are `row_len` apart).
/// `src` holds the input rows from row `base` on (`base <= xmin[y]`).
pub(crate) fn vertical_row_dispatch(
    k: &AxisCoeffs,
    src: &[u8],
    row_len: usize,
    y: usize,
    base: usize,
    out: &mut [u8],
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2 (checked just above).
        unsafe { vertical_row_avx2(k, src, row_len, y, base, out) };
        return;
    }
    vertical_row(k, src, row_len, y, base, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn vertical_row_avx2(
    k: &AxisCoeffs,
    src: &[u8],
    row_len: usize,
    y: usize,
    base: usize,
    out: &mut [u8],
) {
    vertical_row(k, src, row_len, y, base, out)
}

#[inline(always)]
fn vertical_row(k: &AxisCoeffs, src: &[u8], row_len: usize, y: usize, base: usize, out: &mut [u8]) {
    let half = 1i32 << (k.precision - 1);
    let w = &k.weights[y * k.ksize..y * k.ksize + k.xsize[y]];
    let first = &src[(k.xmin[y] - base) * row_len..];
    let mut i = 0;
    while i + 16 <= row_len {
        out[i..i + 16].copy_from_slice(&dot16(&first[i..], row_len, w, half, k.precision));
        i += 16;
    }
    for (o, ii) in out[i..].iter_mut().zip(i..row_len) {
        let mut acc = half;
        for (j, &wj) in w.iter().enumerate() {
            acc += first[j * row_len + ii] as i32 * wj as i32;
        }
        *o = finish(acc, k.precision);
    }
}

/// Resizes interleaved 8-bit pixels of `C` channels (`src` is `[h, w, C]`) to `[out_h, out_w, C]`.
pub fn resize_interleaved<const C: usize>(
    src: &[u8],
    (in_h, in_w): (usize, usize),
    (out_h, out_w): (usize, usize),
) -> Result<Vec<u8>> {
    if in_h == 0 || in_w == 0 || out_h == 0 || out_w == 0 {
        return Err(PrepError::InvalidOption(format!(
            "resize: empty size ({in_h}x{in_w} -> {out_h}x{out_w})"
        )));
    }
    if src.len() != in_h * in_w * C {
        return Err(PrepError::InvalidOption(format!(
            "resize: buffer holds {} bytes, {in_h}x{in_w}x{C} needs {}",
            src.len(),
            in_h * in_w * C
        )));
    }
    let horiz = if out_w != in_w {
        Some(horizontal::<C>(src, in_w, in_h, out_w))
    } else {
        None
    };
    let after_h: &[u8] = horiz.as_deref().unwrap_or(src);
    Ok(if out_h != in_h {
        vertical(after_h, out_w * C, in_h, out_h)
    } else {
        horiz.unwrap_or_else(|| src.to_vec())
    })
}

/// Resizes an RGB image to `(height, width)` exactly as torchvision's uint8 antialiased bicubic
/// does on the CPU. Same size returns a copy.
pub fn resize_bicubic_aa(img: &RgbImage, (out_h, out_w): (usize, usize)) -> Result<RgbImage> {
    let (w, h) = (img.width() as usize, img.height() as usize);
    let data = resize_interleaved::<3>(img.as_raw(), (h, w), (out_h, out_w))?;
    RgbImage::from_raw(out_w as u32, out_h as u32, data).ok_or_else(|| {
        PrepError::InvalidOption(format!("resize: {out_h}x{out_w} does not fit an image"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_weights_are_exact() {
        // A same-size axis puts all weight on one tap.
        let k = axis_coeffs(10, 10);
        for i in 0..10 {
            let w = &k.weights[i * k.ksize..i * k.ksize + k.xsize[i]];
            let off = i - k.xmin[i];
            for (j, &v) in w.iter().enumerate() {
                assert_eq!(
                    v as i32,
                    if j == off { 1 << k.precision } else { 0 },
                    "i={i} j={j}"
                );
            }
        }
    }

    #[test]
    fn constant_image_stays_within_one_level() {
        // Rounded int16 taps need not sum to exactly 2^p, so a flat image may move by one level.
        let img = RgbImage::from_pixel(37, 23, image::Rgb([200, 3, 77]));
        for &(h, w) in &[(5, 9), (50, 70), (1, 1), (23, 100)] {
            let out = resize_bicubic_aa(&img, (h, w)).unwrap();
            for p in out.pixels() {
                for (a, b) in p.0.iter().zip([200u8, 3, 77]) {
                    assert!(a.abs_diff(b) <= 1, "{h}x{w}: {:?}", p.0);
                }
            }
        }
    }
}
