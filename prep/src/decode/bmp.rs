//! BMP through the `image` crate's decoder (palette, 24/32-bit, RLE), with its memory limits;
//! 16-bit BMPs are unpacked here because PIL widens 5/6-bit channels by truncating division
//! (`ImagingUnpackBGR15` / `BGR16`: `v * 255 / 31`), where the `image` crate rounds.

use super::Fail;
use super::modes::{Pixels, Raster, Transparency};
use image::{DynamicImage, ImageDecoder};

pub(crate) fn decode(data: &[u8], max_bytes: usize) -> Result<Raster, Fail> {
    if let Some(r) = decode_16bit(data)? {
        return Ok(r);
    }
    let mut dec =
        image::codecs::bmp::BmpDecoder::new(std::io::Cursor::new(data)).map_err(map_err)?;
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
        other => {
            return Err(Fail::Unsupported(format!(
                "BMP decoded as {:?}",
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

fn le16(d: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(d.get(at..at + 2)?.try_into().ok()?))
}
fn le32(d: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(d.get(at..at + 4)?.try_into().ok()?))
}

/// 16 bits per pixel, uncompressed (5-5-5) or BI_BITFIELDS with PIL's two supported layouts
/// (5-6-5, 5-5-5). `Ok(None)` for anything else.
fn decode_16bit(d: &[u8]) -> Result<Option<Raster>, Fail> {
    let short = || Fail::Corrupt("the file ends inside the BMP header (truncated)".into());
    let header = le32(d, 14).ok_or_else(short)?;
    if header < 40 || le16(d, 28).ok_or_else(short)? != 16 {
        return Ok(None);
    }
    let compression = le32(d, 30).ok_or_else(short)?;
    let r_shift = match compression {
        0 => 10,
        3 => match (le32(d, 54), le32(d, 58), le32(d, 62)) {
            (Some(0xf800), Some(0x7e0), Some(0x1f)) => 11,
            (Some(0x7c00), Some(0x3e0), Some(0x1f)) => 10,
            _ => {
                return Err(Fail::Unsupported(
                    "BMP bitfields layout (PIL refuses it too)".into(),
                ));
            }
        },
        _ => return Ok(None),
    };
    let offset = le32(d, 10).ok_or_else(short)? as usize;
    let w = le32(d, 18).ok_or_else(short)? as i32;
    let h = le32(d, 22).ok_or_else(short)? as i32;
    let (w, top_down, h) = (w.unsigned_abs() as usize, h < 0, h.unsigned_abs() as usize);
    let stride = (w * 2).div_ceil(4) * 4;
    let need = offset
        .checked_add(stride.checked_mul(h).ok_or_else(short)?)
        .ok_or_else(short)?;
    if d.len() < need {
        return Err(Fail::Corrupt(
            "the file ends before the image data does (truncated)".into(),
        ));
    }
    let g_bits = if r_shift == 11 { 6 } else { 5 };
    let g_max = (1u32 << g_bits) - 1;
    let mut out = Vec::with_capacity(w * h * 3);
    for y in 0..h {
        let src_row = if top_down { y } else { h - 1 - y };
        let row = &d[offset + src_row * stride..];
        for x in 0..w {
            let p = u16::from_le_bytes([row[2 * x], row[2 * x + 1]]) as u32;
            out.push((((p >> r_shift) & 31) * 255 / 31) as u8);
            out.push((((p >> 5) & g_max) * 255 / g_max) as u8);
            out.push(((p & 31) * 255 / 31) as u8);
        }
    }
    Ok(Some(Raster {
        width: w as u32,
        height: h as u32,
        pixels: Pixels::Rgb(out),
        transparency: Transparency::None,
    }))
}
