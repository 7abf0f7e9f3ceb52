//! 10- and 12-bit AVIF to Pillow's 8-bit modes, by the paths libavif 1.4.2 takes with libyuv
//! 1924 for an 8-bit RGB(A) target (`getLibYUVConversionFunction`):
//! - no alpha (RGB): no high-bit-depth libyuv function writes RGB24, so the planes are narrowed
//!   to 8 bits (`Convert16To8Plane`: `v >> (depth - 8)`, clamped) and converted as 8-bit ones;
//! - 4:0:0 without alpha (mode "L"): libavif's float path at the full depth;
//! - 10-bit with alpha: `I010`/`I210AlphaToARGBMatrixFilter` (chroma upsampled at 10 bits with
//!   the same taps) and `I410AlphaToARGBMatrix`: `YuvPixel10`, alpha `a >> 2`;
//! - 12-bit 4:2:0 with alpha: `I012ToARGBMatrix` (nearest chroma, `YuvPixel12`), the alpha
//!   narrowed by libavif (`(int)(0.5 + a / max * 255)` in f32);
//! - 12-bit 4:2:2 / 4:4:4 with alpha, and 4:0:0 with alpha: narrowed to 8 bits (the alpha too,
//!   except for 4:0:0 where libavif narrows it) and converted as 8-bit.

use super::Fail;
use super::av1::Layout;
use super::avif_yuv::{self, Planes, for_each_row, libyuv_constants, yuv_pixel_y32};
use super::modes::Pixels;

/// The planes of one 10/12-bit frame (tightly packed) and its alpha (full range), if any.
pub(crate) struct Planes16<'a> {
    pub width: usize,
    pub height: usize,
    pub layout: Layout,
    pub depth: u8,
    pub y: &'a [u16],
    pub u: &'a [u16],
    pub v: &'a [u16],
    pub alpha: Option<&'a [u16]>,
}

/// libyuv's `Convert16To8Plane` with libavif's scale `1 << (24 - depth)`.
fn narrow(plane: &[u16], depth: u8) -> Vec<u8> {
    let scale = 1u32 << (24 - depth as u32);
    plane
        .iter()
        .map(|&v| ((v as u32 * scale) >> 16).min(255) as u8)
        .collect()
}

/// libavif's `avifReformatAlpha` from `depth` bits to 8.
fn alpha_to_8(a: &[u16], depth: u8) -> Vec<u8> {
    let max = ((1u32 << depth) - 1) as f32;
    a.iter()
        .map(|&v| ((0.5f32 + (v as f32 / max) * 255.0f32) as i32).clamp(0, 255) as u8)
        .collect()
}

pub(crate) fn convert(
    p: &Planes16,
    mc: u8,
    cp: u8,
    full: bool,
    premultiplied: bool,
) -> Result<Pixels, Fail> {
    let (w, h, d) = (p.width, p.height, p.depth);
    let n = w.checked_mul(h).ok_or(Fail::Limits)?;
    if p.y.len() < n {
        return Err(Fail::Corrupt("AVIF: the luma plane is short".into()));
    }
    if p.layout == Layout::I400 && p.alpha.is_none() {
        avif_yuv::gray_check(mc, full)?;
        return Ok(Pixels::L(
            p.y[..n]
                .iter()
                .map(|&v| avif_yuv::gray_value(v, d, full))
                .collect(),
        ));
    }
    if mc == 0 && p.layout == Layout::I444 {
        let alpha = p.alpha.map(|a| alpha_to_8(a, d));
        return avif_yuv::identity((p.y, p.u, p.v), n, d, full, alpha, premultiplied);
    }
    let c = libyuv_constants(mc, cp, full, p.layout).ok_or_else(|| {
        Fail::Unsupported(format!(
            "AVIF with matrix coefficients {mc} (colour primaries {cp}): libavif converts it \
             with its own float path, which glm5v does not reproduce"
        ))
    })?;
    let eight = |alpha: Option<Vec<u8>>| -> Result<Pixels, Fail> {
        let (y, u, v) = (narrow(p.y, d), narrow(p.u, d), narrow(p.v, d));
        let planes = Planes {
            width: w,
            height: h,
            layout: p.layout,
            y: &y,
            u: &u,
            v: &v,
            alpha: alpha.as_deref(),
        };
        avif_yuv::convert(&planes, mc, cp, full, premultiplied)
    };
    let Some(a) = p.alpha else {
        return eight(None);
    };
    if a.len() < n {
        return Err(Fail::Corrupt("AVIF: the alpha plane is short".into()));
    }
    match (p.layout, d) {
        (Layout::I400, _) => eight(Some(alpha_to_8(a, d))),
        (Layout::I422 | Layout::I444, 12) => eight(Some(narrow(a, d))),
        _ => {
            let mut out = Vec::new();
            out.try_reserve_exact(n * 4).map_err(|_| Fail::Limits)?;
            out.resize(n * 4, 0);
            if d == 10 {
                for_each_row((w, h, p.layout), p.u, p.v, |r, u, v| {
                    for x in 0..w {
                        let y = p.y[r * w + x] as u32;
                        let cu = (u.get(x).copied().unwrap_or(512) >> 2).min(255) as u8;
                        let cv = (v.get(x).copied().unwrap_or(512) >> 2).min(255) as u8;
                        let px = &mut out[(r * w + x) * 4..(r * w + x) * 4 + 4];
                        px[..3].copy_from_slice(&yuv_pixel_y32((y << 6) | (y >> 4), cu, cv, &c));
                        px[3] = (a[r * w + x] >> 2).min(255) as u8;
                    }
                });
            } else {
                // I012ToARGBMatrix: each chroma sample serves a 2x2 block.
                let cw = w.div_ceil(2);
                let a8 = alpha_to_8(a, d);
                for r in 0..h {
                    for x in 0..w {
                        let y = p.y[r * w + x] as u32;
                        let ci = (r / 2) * cw + x / 2;
                        let cu = (p.u.get(ci).copied().unwrap_or(2048) >> 4).min(255) as u8;
                        let cv = (p.v.get(ci).copied().unwrap_or(2048) >> 4).min(255) as u8;
                        let px = &mut out[(r * w + x) * 4..(r * w + x) * 4 + 4];
                        px[..3].copy_from_slice(&yuv_pixel_y32((y << 4) | (y >> 8), cu, cv, &c));
                        px[3] = a8[r * w + x];
                    }
                }
            }
            if premultiplied {
                avif_yuv::unattenuate(&mut out);
            }
            Ok(Pixels::Rgba(out))
        }
    }
}
