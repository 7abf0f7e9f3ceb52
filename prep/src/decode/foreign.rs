//! QOI, PNM (P1-P6), TGA and ICO through the `image` crate's decoders, kept only where the Pillow
//! corpus shows them equal to what `load_image` gives (lossless formats: the samples are the
//! file's; what can differ is PIL's mode handling, applied here as for the other formats).
//!
//! The header (size, for the decode budget and `plan`) comes from the same decoder's
//! `dimensions()`, read before any pixel buffer is allocated.

use super::Fail;
use super::bytes::{be32, le16, le32};
use super::header::Format;
use super::modes::{Pixels, Raster, Transparency};
use image::{DynamicImage, ImageDecoder};
use std::borrow::Cow;
use std::io::Cursor;

fn map_err(e: image::ImageError) -> Fail {
    match e {
        image::ImageError::Limits(_) => Fail::Limits,
        image::ImageError::Unsupported(u) => Fail::Unsupported(u.to_string()),
        image::ImageError::IoError(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            Fail::Corrupt("the file ends before the image data does (truncated)".into())
        }
        other => Fail::Corrupt(other.to_string()),
    }
}

fn decoder(d: &[u8], f: Format) -> Result<Box<dyn ImageDecoder + '_>, Fail> {
    use image::codecs::{ico, pnm, qoi, tga};
    Ok(match f {
        Format::Qoi => Box::new(qoi::QoiDecoder::new(Cursor::new(d)).map_err(map_err)?),
        Format::Pnm => Box::new(pnm::PnmDecoder::new(Cursor::new(d)).map_err(map_err)?),
        Format::Tga => Box::new(tga::TgaDecoder::new(Cursor::new(d)).map_err(map_err)?),
        Format::Ico => Box::new(ico::IcoDecoder::new(Cursor::new(d)).map_err(map_err)?),
        _ => {
            return Err(Fail::Unsupported(format!(
                "{} through the image crate",
                f.name()
            )));
        }
    })
}

/// The directory index and data offset of the entry PIL's `IcoFile` shows: PIL sorts the
/// directory by colour depth, then (stably) by width x height descending, and opens the first
/// entry; among entries that tie on both, the earliest in the file.
fn ico_pil_entry(d: &[u8]) -> Option<(usize, usize)> {
    let u16le = |at: usize| le16(d, at);
    let u32le = |at: usize| le32(d, at);
    let count = u16le(4)? as usize;
    let mut entries = Vec::with_capacity(count);
    for i in 0..count {
        let e = 6 + 16 * i;
        let (w, h, colors) = (*d.get(e)?, *d.get(e + 1)?, *d.get(e + 2)?);
        let side = |v: u8| if v == 0 { 256u32 } else { v as u32 };
        let bpp = u16le(e + 6)? as u32;
        let depth = if bpp != 0 {
            bpp
        } else if colors != 0 {
            (colors as f64).log2().ceil() as u32
        } else {
            256
        };
        entries.push((side(w) * side(h), depth, i, u32le(e + 12)? as usize));
    }
    entries.sort_by_key(|&(_, depth, _, _)| depth);
    entries.sort_by_key(|&(square, _, _, _)| std::cmp::Reverse(square));
    entries.first().map(|&(_, _, i, at)| (i, at))
}

/// How an ICO's shown entry (PIL's, [`ico_pil_entry`]) is read.
enum IcoEntry<'a> {
    /// A PNG entry's data, through the PNG reader: PIL opens it so whatever the PNG's mode (the
    /// `image` crate's ICO decoder refuses a PNG entry that is not RGBA: fuzz finding F6, an
    /// RGB entry upstream reads).
    Png(&'a [u8]),
    /// The ICO the `image` crate decodes: when the file has several entries, a one-entry ICO of
    /// PIL's (its directory entry, then the file from its data on), since the crate picks its
    /// own, the last of those that tie where PIL takes the first (fuzz finding F11: two 1x1
    /// entries, PIL's pixel (30, 20, 10), the crate's (60, 50, 40)); then with its BMP sizes
    /// fixed ([`ico_bmp_sizes_fixed`]).
    Crate(Cow<'a, [u8]>),
}

fn ico_entry(d: &[u8]) -> IcoEntry<'_> {
    let entry = ico_pil_entry(d);
    if let Some(data) = entry.and_then(|(_, at)| d.get(at..))
        && data.starts_with(b"\x89PNG\r\n\x1a\n")
    {
        return IcoEntry::Png(data);
    }
    let several = d
        .get(4..6)
        .is_some_and(|c| u16::from_le_bytes([c[0], c[1]]) >= 2);
    let alone = entry.filter(|_| several).and_then(|(i, at)| {
        let e = 6 + 16 * i;
        let mut out = vec![0, 0, d[2], d[3], 1, 0];
        out.extend_from_slice(d.get(e..e + 12)?);
        out.extend_from_slice(&22u32.to_le_bytes());
        out.extend_from_slice(d.get(at..)?);
        Some(out)
    });
    let d: Cow<'_, [u8]> = alone.map_or(Cow::Borrowed(d), Cow::Owned);
    IcoEntry::Crate(match ico_bmp_sizes_fixed(&d) {
        Some(fixed) => Cow::Owned(fixed),
        None => d,
    })
}

/// The ICO with each BMP entry's directory size replaced by its bitmap's (width, height / 2),
/// when they differ: PIL reads the bitmap at its own size and takes that as the image's
/// (`IcoImageFile.load`: "Image was not the expected size"); the `image` crate refuses the
/// mismatch. `None` when nothing differs (or a size does not fit the directory's bytes).
fn ico_bmp_sizes_fixed(d: &[u8]) -> Option<Vec<u8>> {
    let le = |at: usize, n: usize| -> Option<u32> {
        let b = d.get(at..at.checked_add(n)?)?;
        Some(b.iter().rev().fold(0u32, |a, &x| a << 8 | x as u32))
    };
    let count = le(4, 2)? as usize;
    let mut out: Option<Vec<u8>> = None;
    for i in 0..count {
        let e = 6 + 16 * i;
        let at = le(e + 12, 4)? as usize;
        if d.get(at..at + 8)? == b"\x89PNG\r\n\x1a\n" || le(at, 4)? < 40 {
            continue;
        }
        let (bw, bh) = (le(at + 4, 4)? as i32, le(at + 8, 4)? as i32);
        let (bw, bh) = (bw, bh / 2);
        let side = |v: u8| if v == 0 { 256 } else { v as i32 };
        if (1..=256).contains(&bw)
            && (1..=256).contains(&bh)
            && (side(d[e]), side(d[e + 1])) != (bw, bh)
        {
            let o = out.get_or_insert_with(|| d.to_vec());
            o[e] = bw as u8;
            o[e + 1] = bh as u8;
        }
    }
    out
}

/// Width and height from the header.
/// QOI's from its 14-byte header directly, so that the decode budget is checked first (the
/// `qoi` crate refuses sizes over its own limit with another error).
pub(crate) fn dims(d: &[u8], f: Format) -> Result<(u32, u32), Fail> {
    if f == Format::Qoi {
        let be = |at: usize| be32(d, at);
        return match (be(4), be(8)) {
            (Some(w), Some(h)) => Ok((w, h)),
            _ => Err(Fail::Corrupt(
                "the file ends inside the QOI header (truncated)".into(),
            )),
        };
    }
    if f == Format::Ico {
        return match ico_entry(d) {
            IcoEntry::Png(png) => super::header::png(png).map(|h| (h.width, h.height)),
            IcoEntry::Crate(ico) => Ok(decoder(&ico, f)?.dimensions()),
        };
    }
    if f == Format::Tga && super::tga16::takes(d) {
        // 16-bit true colour, read by `tga16.rs`.
        // `takes` has seen the whole 18-byte header
        let le = |at: usize| le16(d, at).map_or(0, u32::from);
        return Ok((le(12), le(14)));
    }
    Ok(decoder(d, f)?.dimensions())
}

/// QOI's end marker.
const QOI_END: [u8; 8] = [0, 0, 0, 0, 0, 0, 0, 1];

pub(crate) fn decode(d: &[u8], f: Format, max_bytes: usize) -> Result<Raster, Fail> {
    // PIL's QOI decoder stops when it has every pixel and never reads the end marker; the `qoi`
    // crate reads 8 bytes past the last op. A stream without its marker gets one (the Pillow
    // corpus's op_index.qoi: one pixel, one op, no marker).
    let padded;
    let d = if f == Format::Qoi && !d.ends_with(&QOI_END) {
        padded = [d, &QOI_END[..]].concat();
        &padded[..]
    } else {
        d
    };
    let ico;
    let d = match f {
        Format::Ico => match ico_entry(d) {
            IcoEntry::Png(png) => return super::png::decode(png, max_bytes),
            IcoEntry::Crate(c) => {
                ico = c;
                &ico[..]
            }
        },
        _ => d,
    };
    let mut dec = decoder(d, f)?;
    let mut limits = image::Limits::default();
    limits.max_alloc = Some(max_bytes as u64);
    dec.set_limits(limits).map_err(map_err)?;
    let img = DynamicImage::from_decoder(dec).map_err(map_err)?;
    let (width, height) = (img.width(), img.height());
    let pixels = match img {
        DynamicImage::ImageLuma8(b) => Pixels::L(b.into_raw()),
        DynamicImage::ImageLumaA8(b) => Pixels::La(b.into_raw()),
        DynamicImage::ImageRgb8(b) => Pixels::Rgb(b.into_raw()),
        DynamicImage::ImageRgba8(b) => Pixels::Rgba(b.into_raw()),
        DynamicImage::ImageLuma16(b) => Pixels::I16(b.into_raw()),
        DynamicImage::ImageRgb16(b) => {
            Pixels::Rgb(b.into_raw().into_iter().map(|v| (v >> 8) as u8).collect())
        }
        other => {
            return Err(Fail::Unsupported(format!(
                "{} decoded as {:?}",
                f.name(),
                other.color()
            )));
        }
    };
    Ok(Raster {
        width,
        height,
        pixels,
        transparency: Transparency::None,
    })
}
