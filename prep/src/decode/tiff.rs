//! TIFF, first IFD, decoded as Pillow 13.0.0 decodes it: through libtiff 4.7.2 (the version
//! Pillow's wheels bundle, built from source by `glm5v-libtiff-sys`, with libjpeg for JPEG and
//! old-style JPEG, zlib, liblzma and libtiff's own CCITT, LZW and PackBits codecs), then
//! `TiffImagePlugin._setup`'s mode rules and `TiffDecode.c`'s reading loops:
//! - the PIL mode and raw mode come from `OPEN_INFO` (byte order, photometric, sample format,
//!   fill order, bits per sample, extra samples); a key Pillow lacks is refused as Pillow refuses
//!   it ("unknown pixel mode");
//! - strips (`TIFFReadEncodedStrip`) and tiles (`TIFFReadTile`) are read into one reused buffer,
//!   as Pillow reads them, each row unpacked with the raw mode; separate planes
//!   (PlanarConfiguration 2) plane by plane;
//! - YCbCr: JPEG-compressed and contiguous, libjpeg converts to RGB (`JPEGCOLORMODE_RGB`);
//!   otherwise (old-style JPEG, other compressions, planar) libtiff's `TIFFRGBAImage` reads it;
//! - libtiff returns samples in native byte order; Pillow's own reader of uncompressed files
//!   reads them in the file's order with the same raw modes: here an uncompressed big-endian
//!   file's 16/32-bit samples are put back in file order, so both paths read as Pillow's do.
//!
//! CIELab is converted to RGB as Pillow converts a `LAB` image: through Little CMS (`lab.rs`).

use super::Fail;
use super::bytes::{rd16, rd32};
use super::exif::tiff_header;
use super::modes::{Pixels, Raster, Transparency, blank_palette};
use glm5v_libtiff_sys as sys;
use std::ffi::CStr;

/// A TIFF opened by libtiff on bytes in memory; closed on drop.
struct Tiff<'a> {
    tif: *mut sys::TIFF,
    src: Box<sys::Src>,
    _data: std::marker::PhantomData<&'a [u8]>,
}

impl Drop for Tiff<'_> {
    fn drop(&mut self) {
        // SAFETY: `tif` was opened by `glm5v_tiff_open` and is closed once, here.
        unsafe { sys::TIFFClose(self.tif) }
    }
}

impl<'a> Tiff<'a> {
    fn open(data: &'a [u8], max_bytes: usize) -> Result<Tiff<'a>, Fail> {
        let mut src = Box::new(sys::Src {
            data: data.as_ptr(),
            size: data.len() as u64,
            pos: 0,
            error: [0; 400],
        });
        // SAFETY: `src` points at `data`, both outlive the handle (the struct holds them).
        let tif = unsafe { sys::glm5v_tiff_open(&mut *src, max_bytes as i64) };
        if tif.is_null() {
            return Err(Fail::Corrupt(format!(
                "libtiff cannot open it: {}",
                error_text(&src)
            )));
        }
        Ok(Tiff {
            tif,
            src,
            _data: std::marker::PhantomData,
        })
    }

    fn error(&self) -> String {
        error_text(&self.src)
    }

    fn u16(&self, tag: u32, defaulted: bool) -> Option<u16> {
        let mut v = 0u16;
        // SAFETY: a valid handle; the tag's value is one uint16 (libtiff's type for these tags).
        let ok = unsafe { sys::glm5v_tiff_get_u16(self.tif, tag, defaulted as i32, &mut v) };
        (ok == 1).then_some(v)
    }

    fn u32(&self, tag: u32, defaulted: bool) -> Option<u32> {
        let mut v = 0u32;
        // SAFETY: as `u16`, for the uint32 tags.
        let ok = unsafe { sys::glm5v_tiff_get_u32(self.tif, tag, defaulted as i32, &mut v) };
        (ok == 1).then_some(v)
    }

    fn extra_samples(&self) -> Vec<u16> {
        let (mut n, mut p) = (0u16, std::ptr::null());
        // SAFETY: libtiff hands back its own array of `n` values, valid while the handle is.
        unsafe {
            if sys::glm5v_tiff_extrasamples(self.tif, 0, &mut n, &mut p) == 1 && !p.is_null() {
                std::slice::from_raw_parts(p, n as usize).to_vec()
            } else {
                Vec::new()
            }
        }
    }

    /// The colormap's three arrays of `1 << bps` entries.
    fn colormap(&self, bps: u16) -> Option<[Vec<u16>; 3]> {
        let (mut r, mut g, mut b) = (std::ptr::null(), std::ptr::null(), std::ptr::null());
        // SAFETY: libtiff's colormap arrays hold `1 << BitsPerSample` entries each.
        unsafe {
            if sys::glm5v_tiff_colormap(self.tif, &mut r, &mut g, &mut b) != 1
                || r.is_null()
                || g.is_null()
                || b.is_null()
                || bps > 16
            {
                return None;
            }
            let n = 1usize << bps;
            Some([r, g, b].map(|p| std::slice::from_raw_parts(p, n).to_vec()))
        }
    }
}

fn error_text(src: &sys::Src) -> String {
    // SAFETY: glue.c keeps `error` NUL-terminated (it starts zeroed).
    let s = unsafe { CStr::from_ptr(src.error.as_ptr()) };
    match s.to_string_lossy().trim() {
        "" => "libtiff reported no reason".into(),
        t => t.to_string(),
    }
}

/// The raw modes of `OPEN_INFO` this decoder reads (after `_setup`'s libtiff adjustments).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Raw {
    /// "1" (0 is black) or "1;I" (0 is white).
    Bit {
        invert: bool,
    },
    /// "L;2", "L;4", "L" and their inverted ";I" forms.
    Gray {
        bits: u8,
        invert: bool,
    },
    /// "I;12": 12-bit samples, packed.
    I12,
    /// 16-bit gray into mode "I;16" ("I;16", "I;16N", "I;16B").
    I16 {
        be: bool,
    },
    /// Signed 16-bit gray into mode "I" ("I;16S", "I;16BS").
    I16S {
        be: bool,
    },
    /// 32-bit gray into mode "I" ("I;32N", "I;32S", "I;32BS"; unsigned read as signed).
    I32 {
        be: bool,
    },
    /// 32-bit float into mode "F" ("F;32F", "F;32BF").
    F32 {
        be: bool,
    },
    /// "LX", "La", "LA": gray and one more 8-bit sample.
    GrayExtra {
        alpha: bool,
    },
    /// "RGB", "RGBX...", "RGBA...", "RGBa...": 8-bit colour, `n` samples per pixel.
    Rgb8 {
        n: u8,
        alpha: Alpha,
    },
    /// The 16-bit forms: each sample's high byte.
    Rgb16 {
        n: u8,
        alpha: Alpha,
        be: bool,
    },
    /// "P;1", "P;2", "P;4", "P", "PX" (`n` samples), "PA".
    Palette {
        bits: u8,
        n: u8,
        alpha: bool,
    },
    /// "CMYK", "CMYKX", "CMYKXX" (`n` samples), and the 16-bit forms.
    Cmyk8 {
        n: u8,
    },
    Cmyk16 {
        be: bool,
    },
    /// Pillow's "RGBX" read of `TIFFRGBAImage` words (YCbCr through libtiff).
    Abgr,
    /// "LAB": CIELab, a and b signed; to RGB through Little CMS (`lab.rs`).
    Lab,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Alpha {
    None,
    Straight,
    Premultiplied,
}

impl Raw {
    /// Bits per pixel (Pillow's `state->bits`).
    fn bits(self) -> usize {
        match self {
            Raw::Bit { .. } => 1,
            Raw::Gray { bits, .. } => bits as usize,
            Raw::I12 => 12,
            Raw::I16 { .. } | Raw::I16S { .. } | Raw::GrayExtra { .. } => 16,
            Raw::I32 { .. } | Raw::F32 { .. } | Raw::Abgr => 32,
            Raw::Lab => 24,
            Raw::Rgb8 { n, .. } | Raw::Cmyk8 { n } => 8 * n as usize,
            Raw::Rgb16 { n, .. } => 16 * n as usize,
            Raw::Palette { bits, n, .. } => bits as usize * n as usize,
            Raw::Cmyk16 { .. } => 64,
        }
    }
}

/// `OPEN_INFO[(byte order, photometric, sample format, fill order 1, bits, extra samples)]`.
fn open_info(le: bool, photo: u16, format: u16, bps: &[u16], extra: &[u16]) -> Option<Raw> {
    let be = !le;
    let all = |b: u16| bps.iter().all(|&x| x == b);
    let n = bps.len() as u8;
    Some(match (photo, format, bps, extra) {
        (0 | 1, 1, [1], []) => Raw::Bit { invert: photo == 0 },
        (0 | 1, 1, [b @ (2 | 4 | 8)], []) => Raw::Gray {
            bits: *b as u8,
            invert: photo == 0,
        },
        (1, 2, [8], []) => Raw::Gray {
            bits: 8,
            invert: false,
        },
        (1, 1, [12], []) if le => Raw::I12,
        (0, 1, [16], []) if le => Raw::I16 { be: false },
        (1, 1, [16], []) => Raw::I16 { be },
        (1, 2, [16], []) => Raw::I16S { be },
        (0 | 1, 3, [32], []) => Raw::F32 { be },
        (1, 1, [32], []) if le => Raw::I32 { be: false },
        (1, 2, [32], []) => Raw::I32 { be },
        (1, 1, [8, 8], [0]) => Raw::GrayExtra { alpha: false },
        (1, 1, [8, 8], [1 | 2]) => Raw::GrayExtra { alpha: true },
        (2, 1, [8, 8, 8], []) => Raw::Rgb8 {
            n: 3,
            alpha: Alpha::None,
        },
        (2, 1, [8, 8, 8, 8], [] | [2] | [999]) => Raw::Rgb8 {
            n: 4,
            alpha: Alpha::Straight,
        },
        (2, 1, _, [0] | [0, 0] | [0, 0, 0]) if all(8) && n as usize == 3 + extra.len() => {
            Raw::Rgb8 {
                n,
                alpha: Alpha::None,
            }
        }
        (2, 1, _, [1] | [1, 0] | [1, 0, 0]) if all(8) && n as usize == 3 + extra.len() => {
            Raw::Rgb8 {
                n,
                alpha: Alpha::Premultiplied,
            }
        }
        (2, 1, _, [2, 0] | [2, 0, 0]) if all(8) && n as usize == 3 + extra.len() => Raw::Rgb8 {
            n,
            alpha: Alpha::Straight,
        },
        (2, 1, [16, 16, 16], []) => Raw::Rgb16 {
            n: 3,
            alpha: Alpha::None,
            be,
        },
        (2, 1, [16, 16, 16, 16], [] | [2]) => Raw::Rgb16 {
            n: 4,
            alpha: Alpha::Straight,
            be,
        },
        (2, 1, [16, 16, 16, 16], [0]) => Raw::Rgb16 {
            n: 4,
            alpha: Alpha::None,
            be,
        },
        (2, 1, [16, 16, 16, 16], [1]) => Raw::Rgb16 {
            n: 4,
            alpha: Alpha::Premultiplied,
            be,
        },
        (3, 1, [b @ (1 | 2 | 4 | 8)], []) => Raw::Palette {
            bits: *b as u8,
            n: 1,
            alpha: false,
        },
        (3, 1, [8, 8], [0]) => Raw::Palette {
            bits: 8,
            n: 2,
            alpha: false,
        },
        (3, 1, [8, 8], [2]) => Raw::Palette {
            bits: 8,
            n: 2,
            alpha: true,
        },
        (5, 1, [8, 8, 8, 8], []) => Raw::Cmyk8 { n: 4 },
        (5, 1, [8, 8, 8, 8, 8], [0]) => Raw::Cmyk8 { n: 5 },
        (5, 1, [8, 8, 8, 8, 8, 8], [0, 0]) => Raw::Cmyk8 { n: 6 },
        (5, 1, [16, 16, 16, 16], []) => Raw::Cmyk16 { be },
        (6, 1, [8], []) => Raw::Gray {
            bits: 8,
            invert: false,
        },
        (PHOTOMETRIC_LAB, 1, [8, 8, 8], []) => Raw::Lab,
        // YCbCr: `_setup` makes it RGB; the read is chosen by `decode`.
        (6, 1, [8, 8, 8], []) => Raw::Rgb8 {
            n: 3,
            alpha: Alpha::None,
        },
        _ => return None,
    })
}

/// Whether `OPEN_INFO` has the key with FillOrder 2 (only the 1-8 bit gray, palette and 8-bit
/// RGB forms, and little-endian 16-bit gray).
fn fill_order_2_known(le: bool, photo: u16, format: u16, bps: &[u16], extra: &[u16]) -> bool {
    format == 1
        && extra.is_empty()
        && match (photo, bps) {
            (0 | 1 | 3, [1 | 2 | 4 | 8]) => true,
            (1, [16]) => le,
            (2, [8, 8, 8]) => true,
            _ => false,
        }
}

/// Whether IFD0's PlanarConfiguration is absent or an integer 1 as Pillow's tag reader gives it:
/// BYTE and UNDEFINED values become `bytes` there, which never equal 1 (BigTIFF: assumed so).
fn planar_is_short_1(d: &[u8]) -> bool {
    let Some((le, off)) = tiff_header(d) else {
        return true;
    };
    let off = off as usize;
    let n = rd16(d, off, le).unwrap_or(0) as usize;
    for i in 0..n {
        let e = off + 2 + i * 12;
        if rd16(d, e, le) == Some(284) {
            let typ = rd16(d, e + 2, le).unwrap_or(0);
            let v = match typ {
                3 | 8 => rd16(d, e + 8, le).map(u32::from),
                4 | 9 => rd32(d, e + 8, le),
                _ => None,
            };
            return v == Some(1);
        }
    }
    true
}

const COMPRESSION_NONE: u16 = 1;
const COMPRESSION_OJPEG: u16 = 6;
const COMPRESSION_JPEG: u16 = 7;
const PHOTOMETRIC_YCBCR: u16 = 6;
const PHOTOMETRIC_LAB: u16 = 8;

pub(crate) fn decode(data: &[u8], max_bytes: usize) -> Result<Raster, Fail> {
    let t = Tiff::open(data, max_bytes)?;
    let le = data.starts_with(b"II");
    let (w, h) = (
        t.u32(sys::TIFFTAG_IMAGEWIDTH, false)
            .ok_or_else(|| Fail::Corrupt("no ImageWidth".into()))?,
        t.u32(sys::TIFFTAG_IMAGELENGTH, false)
            .ok_or_else(|| Fail::Corrupt("no ImageLength".into()))?,
    );
    let compression = t.u16(sys::TIFFTAG_COMPRESSION, true).unwrap_or(1);
    let planar = t.u16(sys::TIFFTAG_PLANARCONFIG, true).unwrap_or(1);
    // `_setup`: old-style JPEG is YCbCr whatever the tag says; a missing tag is 0.
    let photo_tag = t.u16(sys::TIFFTAG_PHOTOMETRIC, false);
    let photo = if compression == COMPRESSION_OJPEG {
        PHOTOMETRIC_YCBCR
    } else {
        photo_tag.unwrap_or(0)
    };
    let fill = t.u16(sys::TIFFTAG_FILLORDER, true).unwrap_or(1);
    let format = t.u16(sys::TIFFTAG_SAMPLEFORMAT, true).unwrap_or(1);
    let bps1 = t.u16(sys::TIFFTAG_BITSPERSAMPLE, true).unwrap_or(1);
    let mut extra = t.extra_samples();
    let mut spp = t.u16(sys::TIFFTAG_SAMPLESPERPIXEL, false).unwrap_or(
        if compression == COMPRESSION_OJPEG && matches!(photo, 2 | 6) {
            3
        } else {
            1
        },
    ) as usize;
    if planar == 2 && !extra.is_empty() && extra.iter().all(|&e| e == 0) {
        // Separate planes: unspecified extra samples at the end are ignored.
        spp = spp.saturating_sub(extra.len());
        extra.clear();
    }
    if spp > 6 {
        return Err(Fail::Corrupt(format!(
            "{spp} samples per pixel (PIL: invalid value for samples per pixel)"
        )));
    }
    let bps = vec![bps1; spp];
    let unknown = || {
        Fail::Unsupported(format!(
            "pixel layout PIL does not read (photometric {photo}, sample format {format}, \
             bits {bps:?}, extra samples {extra:?}, fill order {fill}): PIL refuses it too \
             (unknown pixel mode)"
        ))
    };
    if fill == 2 && !fill_order_2_known(le, photo, format, &bps, &extra) {
        return Err(unknown());
    }
    let mut raw = open_info(le, photo, format, &bps, &extra).ok_or_else(unknown)?;
    // `_setup` for libtiff: 16-bit raw modes in native order (not the signed ones).
    if compression != COMPRESSION_NONE {
        raw = match raw {
            Raw::I16 { .. } => Raw::I16 { be: false },
            Raw::Rgb16 { n, alpha, .. } => Raw::Rgb16 {
                n,
                alpha,
                be: false,
            },
            Raw::Cmyk16 { .. } => Raw::Cmyk16 { be: false },
            r => r,
        };
    }
    if photo == PHOTOMETRIC_YCBCR && !(compression == COMPRESSION_JPEG && planar_is_short_1(data)) {
        // `_setup`: YCbCr is read as "RGBX" unless it is new-style JPEG with a PlanarConfiguration
        // of 1 as Python sees it (a BYTE-typed tag is a bytes object, never equal to 1).
        raw = Raw::Rgb8 {
            n: 4,
            alpha: Alpha::None,
        };
    }
    let (w_us, h_us) = (w as usize, h as usize);
    let n = w_us * h_us;
    let ycbcr = photo_tag == Some(PHOTOMETRIC_YCBCR);
    let bytes = if ycbcr && !(compression == COMPRESSION_JPEG && planar == 1) {
        raw = Raw::Abgr;
        read_rgba(&t, w, h, max_bytes)?
    } else {
        if ycbcr {
            // SAFETY: a valid handle.
            unsafe { sys::glm5v_tiff_set_jpeg_rgb(t.tif) };
        }
        let planes = if planar == 2 && spp > 1 {
            if bps1 != 8 && bps1 != 16 {
                return Err(Fail::Corrupt(format!(
                    "separate planes of {bps1}-bit samples (PIL's decoder is broken on it)"
                )));
            }
            spp
        } else {
            1
        };
        let mut v = if unsafe { sys::TIFFIsTiled(t.tif) } != 0 {
            read_tiles(&t, w_us, h_us, raw.bits(), planes, max_bytes)?
        } else {
            read_strips(&t, w_us, h_us, raw.bits(), planes, max_bytes)?
        };
        if compression == COMPRESSION_NONE && !le {
            // Back to the file's byte order, which Pillow's own raw reader sees.
            match bps1 {
                16 => v.chunks_exact_mut(2).for_each(|c| c.swap(0, 1)),
                32 => v.chunks_exact_mut(4).for_each(|c| c.reverse()),
                _ => {}
            }
        }
        v
    };
    let stride = (w_us * raw.bits()).div_ceil(8);
    let pixels = unpack(&t, raw, &bytes, w_us, h_us, stride, bps1)?;
    debug_assert!(pixel_len(&pixels) >= n);
    Ok(Raster {
        width: w,
        height: h,
        pixels,
        transparency: Transparency::None,
    })
}

fn pixel_len(p: &Pixels) -> usize {
    match p {
        Pixels::La(v) => v.len() / 2,
        Pixels::Rgb(v) => v.len() / 3,
        Pixels::Rgba(v) | Pixels::Cmyk(v) => v.len() / 4,
        Pixels::Bilevel(v) | Pixels::L(v) | Pixels::P(v, _) => v.len(),
        Pixels::I16(v) => v.len(),
        Pixels::I32(v) => v.len(),
        Pixels::F(v) => v.len(),
    }
}

fn broken(t: &Tiff, what: &str) -> Fail {
    Fail::Corrupt(format!("{what}: {}", t.error()))
}

fn checked_alloc(len: usize, max_bytes: usize) -> Result<Vec<u8>, Fail> {
    if len > max_bytes {
        return Err(Fail::Limits);
    }
    Ok(vec![0u8; len])
}

/// `_decodeStrip`: the image's rows (`ceil(width * bits / 8)` bytes each, planes interleaved
/// per sample when `planes > 1`).
fn read_strips(
    t: &Tiff,
    w: usize,
    h: usize,
    bits: usize,
    planes: usize,
    max_bytes: usize,
) -> Result<Vec<u8>, Fail> {
    let rps = match t.u32(sys::TIFFTAG_ROWSPERSTRIP, false) {
        Some(r) if r != u32::MAX => r as usize,
        _ => h,
    };
    // SAFETY (all libtiff calls below): a valid handle and buffers of the sizes passed.
    let strip_size = unsafe { sys::TIFFStripSize(t.tif) };
    let unpack_row = (w * bits / planes).div_ceil(8);
    if strip_size < 0 || strip_size as u64 > (unpack_row as u64).saturating_mul(rps as u64) {
        return Err(broken(
            t,
            "the strip size is not what the image size implies",
        ));
    }
    let row_size = unsafe { sys::TIFFScanlineSize(t.tif) } as usize;
    if row_size == 0 || unpack_row > row_size {
        return Err(broken(
            t,
            "the scanline size is smaller than the image rows",
        ));
    }
    let out_row = (w * bits).div_ceil(8);
    let mut out = checked_alloc(out_row * h, max_bytes)?;
    let mut buf = checked_alloc(strip_size as usize, max_bytes)?;
    let sample = bits / planes / 8;
    let mut y = 0;
    while y < h {
        for plane in 0..planes {
            let strip = unsafe { sys::TIFFComputeStrip(t.tif, y as u32, plane as u16) };
            let r = unsafe {
                sys::TIFFReadEncodedStrip(t.tif, strip, buf.as_mut_ptr().cast(), strip_size)
            };
            if r == -1 {
                return Err(broken(t, "cannot read a strip"));
            }
            for sr in 0..rps.min(h - y) {
                let Some(src) = buf.get(sr * row_size..sr * row_size + unpack_row) else {
                    break;
                };
                let dst = &mut out[(y + sr) * out_row..(y + sr + 1) * out_row];
                put_row(dst, src, w, plane, planes, sample);
            }
        }
        y += rps.max(1);
    }
    Ok(out)
}

/// One row of plane `plane` (of `planes`) into the interleaved row `dst`.
fn put_row(dst: &mut [u8], src: &[u8], w: usize, plane: usize, planes: usize, sample: usize) {
    if planes == 1 {
        let k = dst.len().min(src.len());
        dst[..k].copy_from_slice(&src[..k]);
        return;
    }
    for x in 0..w {
        let s = &src[x * sample..(x + 1) * sample];
        let d = (x * planes + plane) * sample;
        dst[d..d + sample].copy_from_slice(s);
    }
}

/// `_decodeTile`.
fn read_tiles(
    t: &Tiff,
    w: usize,
    h: usize,
    bits: usize,
    planes: usize,
    max_bytes: usize,
) -> Result<Vec<u8>, Fail> {
    // SAFETY (all libtiff calls below): a valid handle and buffers of the sizes passed.
    let tile_size = unsafe { sys::TIFFTileSize(t.tif) };
    let row_size = unsafe { sys::TIFFTileRowSize(t.tif) };
    if tile_size <= 0 || row_size <= 0 || row_size > tile_size {
        return Err(broken(t, "the tile size is invalid"));
    }
    let (tw, tl) = (
        t.u32(sys::TIFFTAG_TILEWIDTH, false).unwrap_or(0) as usize,
        t.u32(sys::TIFFTAG_TILELENGTH, false).unwrap_or(0) as usize,
    );
    let unpack_row = (tw * bits / planes).div_ceil(8);
    if tw == 0 || tl == 0 || tile_size as usize != unpack_row * tl {
        return Err(broken(
            t,
            "the tile size is not what the tile dimensions imply",
        ));
    }
    if unpack_row > row_size as usize {
        return Err(broken(t, "the tile row size is smaller than the tile rows"));
    }
    if !bits.is_multiple_of(8) {
        return Err(Fail::Unsupported(format!(
            "tiles of {bits}-bit pixels (not byte-aligned)"
        )));
    }
    let (row_size, px) = (row_size as usize, bits / 8);
    let sample = px / planes;
    let out_row = w * px;
    let mut out = checked_alloc(out_row * h, max_bytes)?;
    let mut buf = checked_alloc(tile_size as usize, max_bytes)?;
    for y in (0..h).step_by(tl) {
        for plane in 0..planes {
            for x in (0..w).step_by(tw) {
                let r = unsafe {
                    sys::TIFFReadTile(
                        t.tif,
                        buf.as_mut_ptr().cast(),
                        x as u32,
                        y as u32,
                        0,
                        plane as u16,
                    )
                };
                if r == -1 {
                    return Err(broken(t, "cannot read a tile"));
                }
                let cw = tw.min(w - x);
                for ty in 0..tl.min(h - y) {
                    let src = &buf[ty * row_size..ty * row_size + cw * sample];
                    let row = &mut out[(y + ty) * out_row..(y + ty + 1) * out_row];
                    if planes == 1 {
                        row[x * px..(x + cw) * px].copy_from_slice(src);
                    } else {
                        for i in 0..cw {
                            let d = ((x + i) * planes + plane) * sample;
                            row[d..d + sample].copy_from_slice(&src[i * sample..(i + 1) * sample]);
                        }
                    }
                }
            }
        }
    }
    Ok(out)
}

/// `_decodeAsRGBA`: RGBA bytes (`TIFFRGBAImage` words in memory order), 4 per pixel.
fn read_rgba(t: &Tiff, w: u32, h: u32, max_bytes: usize) -> Result<Vec<u8>, Fail> {
    let tiled = unsafe { sys::TIFFIsTiled(t.tif) } != 0;
    let rows = if tiled {
        t.u32(sys::TIFFTAG_TILELENGTH, true)
    } else {
        t.u32(sys::TIFFTAG_ROWSPERSTRIP, true)
    };
    let rows = match rows {
        Some(r) if r != u32::MAX && r > 0 => r.min(h),
        _ => h,
    };
    let n = w as usize * h as usize;
    if n * 4 + rows as usize * w as usize * 4 > max_bytes {
        return Err(Fail::Limits);
    }
    let mut words = vec![0u32; n];
    // SAFETY: `words` holds `w * h` words; glue.c writes only inside it.
    let ok = unsafe { sys::glm5v_tiff_read_rgba(t.tif, w, h, rows, words.as_mut_ptr()) };
    if ok != 1 {
        return Err(broken(t, "libtiff's RGBA read failed"));
    }
    Ok(words.iter().flat_map(|v| v.to_le_bytes()).collect())
}

fn be_or_le16(b: &[u8], be: bool) -> u16 {
    if be {
        u16::from_be_bytes([b[0], b[1]])
    } else {
        u16::from_le_bytes([b[0], b[1]])
    }
}

fn be_or_le32(b: &[u8], be: bool) -> [u8; 4] {
    if be {
        [b[3], b[2], b[1], b[0]]
    } else {
        [b[0], b[1], b[2], b[3]]
    }
}

/// `unpackRGBa`: `CLIP8(c * 255 / a)`; `a == 0` gives all zeros.
fn unpremultiply(p: &mut [u8]) {
    let a = p[3] as u32;
    if a == 0 {
        p.copy_from_slice(&[0, 0, 0, 0]);
    } else if a != 255 {
        for c in &mut p[..3] {
            *c = (*c as u32 * 255 / a).min(255) as u8;
        }
    }
}

/// The rows (`stride` bytes each) unpacked with the raw mode into PIL's mode.
fn unpack(
    t: &Tiff,
    raw: Raw,
    v: &[u8],
    w: usize,
    h: usize,
    stride: usize,
    bps: u16,
) -> Result<Pixels, Fail> {
    let n = w * h;
    let rows = || (0..h).map(move |y| &v[y * stride..(y + 1) * stride]);
    let sub = |bits: usize| -> Vec<u8> {
        let mask = ((1u16 << bits) - 1) as u8;
        let mut out = Vec::with_capacity(n);
        for row in rows() {
            for x in 0..w {
                let bit = x * bits;
                out.push((row[bit / 8] >> (8 - bits - bit % 8)) & mask);
            }
        }
        out
    };
    Ok(match raw {
        Raw::Bit { invert } => Pixels::Bilevel(
            sub(1)
                .into_iter()
                .map(|b| if (b == 1) != invert { 255 } else { 0 })
                .collect(),
        ),
        Raw::Gray { bits, invert } => {
            let bits = bits as usize;
            let max = (1u16 << bits) - 1;
            let scale = 255 / max as u8;
            Pixels::L(
                sub(bits)
                    .into_iter()
                    .map(|s| {
                        let s = if invert { max as u8 - s } else { s };
                        s * scale
                    })
                    .collect(),
            )
        }
        Raw::I12 => {
            let mut out = Vec::with_capacity(n);
            for row in rows() {
                let mut x = 0;
                let mut i = 0;
                while x + 1 < w {
                    out.push(((row[i] as u16) << 4) + (row[i + 1] >> 4) as u16);
                    out.push((((row[i + 1] & 0x0f) as u16) << 8) + row[i + 2] as u16);
                    x += 2;
                    i += 3;
                }
                if x < w {
                    out.push(((row[i] as u16) << 4) + (row[i + 1] >> 4) as u16);
                }
            }
            Pixels::I16(out)
        }
        Raw::I16 { be } => Pixels::I16(
            rows()
                .flat_map(|r| r[..w * 2].chunks_exact(2).map(move |c| be_or_le16(c, be)))
                .collect(),
        ),
        // Mode "I" to RGB clips to 0..=255 (`i2rgb`).
        Raw::I16S { be } => Pixels::L(
            rows()
                .flat_map(|r| {
                    r[..w * 2]
                        .chunks_exact(2)
                        .map(move |c| (be_or_le16(c, be) as i16).clamp(0, 255) as u8)
                })
                .collect(),
        ),
        Raw::I32 { be } => Pixels::L(
            rows()
                .flat_map(|r| {
                    r[..w * 4]
                        .chunks_exact(4)
                        .map(move |c| i32::from_le_bytes(be_or_le32(c, be)).clamp(0, 255) as u8)
                })
                .collect(),
        ),
        // Mode "F" to RGB goes through "L" (`f2l`: <= 0 is 0, >= 255 is 255, else truncated).
        Raw::F32 { be } => Pixels::L(
            rows()
                .flat_map(|r| {
                    r[..w * 4].chunks_exact(4).map(move |c| {
                        let f = f32::from_le_bytes(be_or_le32(c, be));
                        if f <= 0.0 {
                            0
                        } else if f >= 255.0 {
                            255
                        } else {
                            f as u8
                        }
                    })
                })
                .collect(),
        ),
        Raw::GrayExtra { alpha } => {
            let v: Vec<u8> = rows().flat_map(|r| r[..w * 2].iter().copied()).collect();
            if alpha {
                Pixels::La(v)
            } else {
                Pixels::L(v.chunks_exact(2).map(|p| p[0]).collect())
            }
        }
        Raw::Rgb8 { n: k, alpha } => {
            let k = k as usize;
            let px = rows().flat_map(|r| r[..w * k].chunks_exact(k));
            match alpha {
                Alpha::None => Pixels::Rgb(px.flat_map(|p| [p[0], p[1], p[2]]).collect()),
                Alpha::Straight => {
                    Pixels::Rgba(px.flat_map(|p| [p[0], p[1], p[2], p[3]]).collect())
                }
                Alpha::Premultiplied => {
                    let mut out: Vec<u8> = px.flat_map(|p| [p[0], p[1], p[2], p[3]]).collect();
                    out.chunks_exact_mut(4).for_each(unpremultiply);
                    Pixels::Rgba(out)
                }
            }
        }
        Raw::Rgb16 { n: k, alpha, be } => {
            let k = k as usize;
            let hi = |c: &[u8]| if be { c[0] } else { c[1] };
            let px = rows().flat_map(|r| r[..w * k * 2].chunks_exact(k * 2));
            let four = |p: &[u8]| [hi(&p[0..2]), hi(&p[2..4]), hi(&p[4..6]), hi(&p[6..8])];
            match alpha {
                Alpha::None => Pixels::Rgb(
                    px.flat_map(|p| [hi(&p[0..2]), hi(&p[2..4]), hi(&p[4..6])])
                        .collect(),
                ),
                Alpha::Straight => Pixels::Rgba(px.flat_map(four).collect()),
                Alpha::Premultiplied => {
                    let mut out: Vec<u8> = px.flat_map(four).collect();
                    out.chunks_exact_mut(4).for_each(unpremultiply);
                    Pixels::Rgba(out)
                }
            }
        }
        Raw::Palette { bits, n: k, alpha } => {
            let map = t
                .colormap(bps)
                .ok_or_else(|| Fail::Corrupt("a palette TIFF without a valid ColorMap".into()))?;
            let entries = map[0].len().min(256);
            let mut pal = blank_palette();
            for (i, p) in pal.iter_mut().enumerate().take(entries) {
                // Pillow's palette keeps each 16-bit entry's high byte (`b // 256`).
                *p = [
                    (map[0][i] >> 8) as u8,
                    (map[1][i] >> 8) as u8,
                    (map[2][i] >> 8) as u8,
                    255,
                ];
            }
            let k = k as usize;
            if alpha {
                Pixels::Rgba(
                    rows()
                        .flat_map(|r| r[..w * 2].chunks_exact(2))
                        .flat_map(|p| {
                            let c = pal[p[0] as usize];
                            [c[0], c[1], c[2], p[1]]
                        })
                        .collect(),
                )
            } else if bits == 8 {
                Pixels::P(
                    rows()
                        .flat_map(|r| r[..w * k].chunks_exact(k).map(|p| p[0]))
                        .collect(),
                    pal,
                )
            } else {
                Pixels::P(sub(bits as usize), pal)
            }
        }
        Raw::Cmyk8 { n: k } => {
            let k = k as usize;
            Pixels::Cmyk(
                rows()
                    .flat_map(|r| {
                        r[..w * k]
                            .chunks_exact(k)
                            .flat_map(|p| [p[0], p[1], p[2], p[3]])
                    })
                    .collect(),
            )
        }
        Raw::Cmyk16 { be } => Pixels::Cmyk(
            rows()
                .flat_map(|r| {
                    r[..w * 8]
                        .chunks_exact(2)
                        .map(move |c| if be { c[0] } else { c[1] })
                })
                .collect(),
        ),
        // `ImagingUnpackLAB` stores a and b unsigned (`^ 128`), then `convert("RGB")` is lcms's.
        Raw::Lab => Pixels::Rgb(super::lab::to_rgb(
            &rows()
                .flat_map(|r| {
                    r[..w * 3]
                        .chunks_exact(3)
                        .flat_map(|p| [p[0], p[1] ^ 128, p[2] ^ 128])
                })
                .collect::<Vec<u8>>(),
        )?),
        Raw::Abgr => Pixels::Rgb(
            v.chunks_exact(4)
                .take(n)
                .flat_map(|p| [p[0], p[1], p[2]])
                .collect(),
        ),
    })
}
