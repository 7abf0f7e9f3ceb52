//! `Jpeg2KDecode.c`'s unpackers: one decoded tile (OpenJPEG's `opj_decode_tile_data` buffer:
//! each component's plane of 1, 2 or 4-byte samples, in native order) into Pillow's image memory,
//! with Pillow's index arithmetic, scaling and colour conversion (see `jpeg2k.rs`).

use super::super::Fail;
use super::Mode;

pub(super) const CLRSPC_UNKNOWN: i32 = -1;
pub(super) const CLRSPC_UNSPECIFIED: i32 = 0;
pub(super) const CLRSPC_SRGB: i32 = 1;
pub(super) const CLRSPC_GRAY: i32 = 2;
pub(super) const CLRSPC_SYCC: i32 = 3;
const CLRSPC_CMYK: i32 = 5;

/// The unpackers of `j2k_unpackers`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Unpack {
    GrayL,
    GrayI,
    GrayRgb,
    GrayaLa,
    SrgbRgb,
    SyccRgb,
    SrgbaRgba,
    SyccaRgba,
}

/// `j2k_unpackers`: (mode, colour space, components, handles subsampling, unpacker).
pub(super) const UNPACKERS: &[(Mode, i32, u32, bool, Unpack)] = &[
    (Mode::L, CLRSPC_GRAY, 1, false, Unpack::GrayL),
    (Mode::P, CLRSPC_SRGB, 1, false, Unpack::GrayL),
    (Mode::P, CLRSPC_CMYK, 1, false, Unpack::GrayL),
    (Mode::I16, CLRSPC_GRAY, 1, false, Unpack::GrayI),
    (Mode::La, CLRSPC_GRAY, 2, false, Unpack::GrayaLa),
    (Mode::Rgb, CLRSPC_GRAY, 1, false, Unpack::GrayRgb),
    (Mode::Rgb, CLRSPC_GRAY, 2, false, Unpack::GrayRgb),
    (Mode::Rgb, CLRSPC_SRGB, 3, true, Unpack::SrgbRgb),
    (Mode::Rgb, CLRSPC_SYCC, 3, true, Unpack::SyccRgb),
    (Mode::Rgb, CLRSPC_SRGB, 4, true, Unpack::SrgbRgb),
    (Mode::Rgb, CLRSPC_SYCC, 4, true, Unpack::SyccRgb),
    (Mode::Rgba, CLRSPC_GRAY, 1, false, Unpack::GrayRgb),
    (Mode::Rgba, CLRSPC_GRAY, 2, false, Unpack::GrayaLa),
    (Mode::Rgba, CLRSPC_SRGB, 3, true, Unpack::SrgbRgb),
    (Mode::Rgba, CLRSPC_SYCC, 3, true, Unpack::SyccRgb),
    (Mode::Rgba, CLRSPC_GRAY, 4, true, Unpack::SrgbaRgba),
    (Mode::Rgba, CLRSPC_SRGB, 4, true, Unpack::SrgbaRgba),
    (Mode::Rgba, CLRSPC_SYCC, 4, true, Unpack::SyccaRgba),
    (Mode::Cmyk, CLRSPC_CMYK, 4, true, Unpack::SrgbaRgba),
];

/// One component as the unpackers see it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Comp {
    pub prec: u32,
    pub sgnd: bool,
    pub dx: u32,
    pub dy: u32,
}

impl Comp {
    /// Bytes per sample in OpenJPEG's tile buffer (1, 2 or 4).
    pub fn csiz(&self) -> usize {
        match (self.prec as usize + 7) >> 3 {
            3 => 4,
            n => n,
        }
    }
    /// (offset, shift) for a target of `bits` bits.
    fn scale(&self, bits: i32) -> (u32, i32) {
        let shift = bits - self.prec as i32;
        let mut offset: u32 = if self.sgnd {
            1u32.wrapping_shl(self.prec.wrapping_sub(1))
        } else {
            0
        };
        if shift < 0 {
            offset = offset.wrapping_add(1u32.wrapping_shl((-shift - 1) as u32));
        }
        (offset, shift)
    }
}

/// `j2ku_shift`.
fn shift(x: u32, n: i32) -> u32 {
    if n < 0 {
        x.wrapping_shr((-n) as u32)
    } else {
        x.wrapping_shl(n as u32)
    }
}

/// Sample `i` of `csiz` bytes (native order) at `base`; past the buffer is a defect.
fn word(buf: &[u8], base: usize, i: usize, csiz: usize) -> Result<u32, Fail> {
    let at = base.checked_add(i.checked_mul(csiz).ok_or_else(overrun)?);
    let b = at
        .and_then(|a| buf.get(a..a.checked_add(csiz)?))
        .ok_or_else(overrun)?;
    Ok(match csiz {
        1 => b[0] as u32,
        2 => u16::from_le_bytes([b[0], b[1]]) as u32,
        _ => u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
    })
}

fn overrun() -> Fail {
    Fail::Corrupt("a JPEG 2000 tile is smaller than its components need".into())
}

/// `ImagingConvertYCbCr2RGB` on one pixel (its tables are `(i - 128) * k * 64` rounded
/// half up, truncated toward zero, then shifted down by 6).
fn ycbcr_to_rgb(p: &mut [u8]) {
    let t = |v: u8, k: f64| ((v as i32 - 128) as f64 * k * 64.0 + 0.5) as i32;
    let (y, cb, cr) = (p[0] as i32, p[1], p[2]);
    let r = y + (t(cr, 1.402) >> 6);
    let g = y + ((t(cb, -0.34414) + t(cr, -0.71414)) >> 6);
    let b = y + (t(cb, 1.772) >> 6);
    p[0] = r.clamp(0, 255) as u8;
    p[1] = g.clamp(0, 255) as u8;
    p[2] = b.clamp(0, 255) as u8;
}

/// Pillow's image memory: `stride` bytes per row (1 for L, 2 for I;16, 4 otherwise).
pub(super) struct Canvas {
    pub buf: Vec<u8>,
    pub xsize: usize,
    pub stride: usize,
}

impl Canvas {
    fn put(&mut self, at: usize, v: u8) -> Result<(), Fail> {
        *self.buf.get_mut(at).ok_or_else(|| {
            Fail::Corrupt("a JPEG 2000 tile lies outside the image (Pillow would overrun)".into())
        })? = v;
        Ok(())
    }
}

/// One tile's samples into the canvas, as the unpacker `u` writes them.
#[allow(clippy::too_many_arguments)]
pub(super) fn unpack(
    u: Unpack,
    comps: &[Comp],
    (x0, y0, w, h): (usize, usize, usize, usize),
    tile: &[u8],
    im: &mut Canvas,
) -> Result<(), Fail> {
    let stride = im.stride * im.xsize;
    match u {
        Unpack::GrayL | Unpack::GrayI | Unpack::GrayRgb => {
            let c = comps[0];
            let bits = if u == Unpack::GrayI { 16 } else { 8 };
            let (offset, sh) = c.scale(bits);
            let cs = c.csiz();
            for y in 0..h {
                for x in 0..w {
                    let v = shift(offset.wrapping_add(word(tile, 0, y * w + x, cs)?), sh);
                    let row = (y0 + y) * stride;
                    match u {
                        Unpack::GrayL => im.put(row + x0 + x, v as u8)?,
                        Unpack::GrayI => {
                            let [a, b] = (v as u16).to_le_bytes();
                            im.put(row + 2 * (x0 + x), a)?;
                            im.put(row + 2 * (x0 + x) + 1, b)?;
                        }
                        _ => {
                            // `j2ku_gray_rgb` starts the row `x0` bytes (not pixels) in.
                            let at = row + x0 + 4 * x;
                            for k in 0..3 {
                                im.put(at + k, v as u8)?;
                            }
                            im.put(at + 3, 0xff)?;
                        }
                    }
                }
            }
        }
        Unpack::GrayaLa => {
            let (c, a) = (comps[0], comps[1]);
            let ((o, s), (ao, ash)) = (c.scale(8), a.scale(8));
            let (cs, acs) = (c.csiz(), a.csiz());
            let abase = cs * w * h;
            for y in 0..h {
                for x in 0..w {
                    let v = shift(o.wrapping_add(word(tile, 0, y * w + x, cs)?), s) as u8;
                    let av = shift(ao.wrapping_add(word(tile, abase, y * w + x, acs)?), ash);
                    let at = (y0 + y) * stride + 4 * (x0 + x);
                    for k in 0..3 {
                        im.put(at + k, v)?;
                    }
                    im.put(at + 3, av as u8)?;
                }
            }
        }
        Unpack::SrgbRgb | Unpack::SyccRgb | Unpack::SrgbaRgba | Unpack::SyccaRgba => {
            let n = if matches!(u, Unpack::SrgbRgb | Unpack::SyccRgb) {
                3
            } else {
                4
            };
            let mut plane = [0usize; 4];
            let mut cptr = 0usize;
            for (k, c) in comps.iter().take(n).enumerate() {
                plane[k] = cptr;
                let (dx, dy) = (c.dx.max(1) as usize, c.dy.max(1) as usize);
                cptr = cptr.saturating_add(c.csiz() * (w / dx) * (h / dy));
            }
            let mut px = [0u8; 4];
            for y in 0..h {
                let row = (y0 + y) * stride + 4 * x0;
                for x in 0..w {
                    px[3] = 0xff;
                    for (k, c) in comps.iter().take(n).enumerate() {
                        let (dx, dy) = (c.dx.max(1) as usize, c.dy.max(1) as usize);
                        let cs = c.csiz();
                        let base = plane[k] + cs * (y / dy) * (w / dx);
                        let (o, s) = c.scale(8);
                        px[k] = shift(o.wrapping_add(word(tile, base, x / dx, cs)?), s) as u8;
                    }
                    if matches!(u, Unpack::SyccRgb | Unpack::SyccaRgba) {
                        ycbcr_to_rgb(&mut px);
                    }
                    for (k, &v) in px.iter().enumerate() {
                        im.put(row + 4 * x + k, v)?;
                    }
                }
            }
        }
    }
    Ok(())
}
