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

fn overrun() -> Fail {
    Fail::Corrupt("a JPEG 2000 tile is smaller than its components need".into())
}

/// `ImagingConvertYCbCr2RGB`'s tables: `(i - 128) * k * 64` rounded half up, truncated toward
/// zero (R_Cr, G_Cb, G_Cr, B_Cb).
struct Ycc([[i32; 256]; 4]);

impl Ycc {
    fn new() -> Self {
        let mut t = [[0i32; 256]; 4];
        for (tab, k) in t.iter_mut().zip([1.402, -0.34414, -0.71414, 1.772]) {
            for (i, v) in tab.iter_mut().enumerate() {
                *v = ((i as i32 - 128) as f64 * k * 64.0 + 0.5) as i32;
            }
        }
        Ycc(t)
    }

    /// One pixel, shifted down by 6 and clipped.
    fn to_rgb(&self, p: &mut [u8]) {
        let (y, cb, cr) = (p[0] as i32, p[1] as usize, p[2] as usize);
        let r = y + (self.0[0][cr] >> 6);
        let g = y + ((self.0[1][cb] + self.0[2][cr]) >> 6);
        let b = y + (self.0[3][cb] >> 6);
        p[0] = r.clamp(0, 255) as u8;
        p[1] = g.clamp(0, 255) as u8;
        p[2] = b.clamp(0, 255) as u8;
    }
}

/// One component's plane as an unpacker reads it: samples of `cs` bytes from `base`, rows of
/// `w / dx` samples (Pillow's floor division), scaled by `offset` and `shift`.
#[derive(Clone, Copy)]
struct Plane {
    base: usize,
    cs: usize,
    dx: usize,
    dy: usize,
    row_len: usize,
    offset: u32,
    shift: i32,
}

impl Plane {
    fn new(c: &Comp, base: usize, w: usize, bits: i32) -> Self {
        let (offset, shift) = c.scale(bits);
        let dx = c.dx.max(1) as usize;
        Plane {
            base,
            cs: c.csiz(),
            dx,
            dy: c.dy.max(1) as usize,
            row_len: w / dx,
            offset,
            shift,
        }
    }

    /// The tile bytes from the start of row `y`'s samples to the end of the buffer.
    fn row<'t>(&self, tile: &'t [u8], y: usize) -> Result<&'t [u8], Fail> {
        tile.get(self.base + self.cs * (y / self.dy) * self.row_len..)
            .ok_or_else(overrun)
    }

    /// Sample `x` (of the image row) of a row slice, scaled.
    #[inline]
    fn at(&self, row: &[u8], x: usize) -> Result<u32, Fail> {
        let i = (x / self.dx) * self.cs;
        let b = row.get(i..i + self.cs).ok_or_else(overrun)?;
        let v = match self.cs {
            1 => b[0] as u32,
            2 => u16::from_le_bytes([b[0], b[1]]) as u32,
            _ => u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        };
        Ok(shift(self.offset.wrapping_add(v), self.shift))
    }
}

fn outside() -> Fail {
    Fail::Corrupt("a JPEG 2000 tile lies outside the image (Pillow would overrun)".into())
}

/// Pillow's image memory: `stride` bytes per pixel (1 for L and P, 2 for I;16, 4 otherwise).
pub(super) struct Canvas {
    pub buf: Vec<u8>,
    pub xsize: usize,
    pub stride: usize,
}

impl Canvas {
    /// `n` bytes at `at`.
    fn span(&mut self, at: usize, n: usize) -> Result<&mut [u8], Fail> {
        self.buf.get_mut(at..at + n).ok_or_else(outside)
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
            let bits = if u == Unpack::GrayI { 16 } else { 8 };
            // Gray planes are read at `y * w + x` whatever the component's subsampling.
            let p = Plane {
                dx: 1,
                dy: 1,
                row_len: w,
                ..Plane::new(&comps[0], 0, w, bits)
            };
            for y in 0..h {
                let src = p.row(tile, y)?;
                let row = (y0 + y) * stride;
                match u {
                    Unpack::GrayL => {
                        let out = im.span(row + x0, w)?;
                        for (x, o) in out.iter_mut().enumerate() {
                            *o = p.at(src, x)? as u8;
                        }
                    }
                    Unpack::GrayI => {
                        let out = im.span(row + 2 * x0, 2 * w)?;
                        for (x, o) in out.chunks_exact_mut(2).enumerate() {
                            o.copy_from_slice(&(p.at(src, x)? as u16).to_le_bytes());
                        }
                    }
                    _ => {
                        // `j2ku_gray_rgb` starts the row `x0` bytes (not pixels) in.
                        let out = im.span(row + x0, 4 * w)?;
                        for (x, o) in out.chunks_exact_mut(4).enumerate() {
                            let v = p.at(src, x)? as u8;
                            o.copy_from_slice(&[v, v, v, 0xff]);
                        }
                    }
                }
            }
        }
        Unpack::GrayaLa => {
            let c = Plane {
                dx: 1,
                dy: 1,
                row_len: w,
                ..Plane::new(&comps[0], 0, w, 8)
            };
            let a = Plane {
                dx: 1,
                dy: 1,
                row_len: w,
                ..Plane::new(&comps[1], c.cs * w * h, w, 8)
            };
            for y in 0..h {
                let (src, asrc) = (c.row(tile, y)?, a.row(tile, y)?);
                let out = im.span((y0 + y) * stride + 4 * x0, 4 * w)?;
                for (x, o) in out.chunks_exact_mut(4).enumerate() {
                    let v = c.at(src, x)? as u8;
                    o.copy_from_slice(&[v, v, v, a.at(asrc, x)? as u8]);
                }
            }
        }
        Unpack::SrgbRgb | Unpack::SyccRgb | Unpack::SrgbaRgba | Unpack::SyccaRgba => {
            let n = if matches!(u, Unpack::SrgbRgb | Unpack::SyccRgb) {
                3
            } else {
                4
            };
            let ycc = matches!(u, Unpack::SyccRgb | Unpack::SyccaRgba).then(Ycc::new);
            let mut planes = Vec::with_capacity(n);
            let mut base = 0usize;
            for c in comps.iter().take(n) {
                let p = Plane::new(c, base, w, 8);
                base = base.saturating_add(p.cs * p.row_len * (h / p.dy));
                planes.push(p);
            }
            let mut rows: [&[u8]; 4] = [&[]; 4];
            for y in 0..h {
                for (r, p) in rows.iter_mut().zip(&planes) {
                    *r = p.row(tile, y)?;
                }
                let out = im.span((y0 + y) * stride + 4 * x0, 4 * w)?;
                for (x, o) in out.chunks_exact_mut(4).enumerate() {
                    o[3] = 0xff;
                    for (k, p) in planes.iter().enumerate() {
                        o[k] = p.at(rows[k], x)? as u8;
                    }
                    if let Some(t) = &ycc {
                        t.to_rgb(o);
                    }
                }
            }
        }
    }
    Ok(())
}
