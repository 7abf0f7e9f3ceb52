//! PIXAR raster images as Pillow 13.0.0's `PixarImagePlugin` reads them: the size from the
//! 512-byte header (little-endian words at 418 and 416), mode RGB when the words at 424 and 426
//! are (14, 2) (PIL sets no mode otherwise and cannot load the file), raw RGB rows from 1024.

use super::Fail;
use super::bytes;
use super::modes::{Pixels, Raster, Transparency};

/// A word of the 512-byte header (`open` checks that it is all there).
fn le16(d: &[u8], at: usize) -> u16 {
    bytes::le16(d, at).expect("inside the checked header")
}

fn open(d: &[u8]) -> Result<(u32, u32), Fail> {
    if !d.starts_with(b"\x80\xe8\0\0") {
        return Err(Fail::Corrupt("not a PIXAR file".into()));
    }
    let h = d
        .get(..512)
        .ok_or_else(|| Fail::Corrupt("the file ends inside the PIXAR header (truncated)".into()))?;
    Ok((le16(h, 418) as u32, le16(h, 416) as u32))
}

pub(crate) fn dims(d: &[u8]) -> Result<(u32, u32), Fail> {
    open(d)
}

pub(crate) fn decode(d: &[u8], max_bytes: usize) -> Result<Raster, Fail> {
    let (w, h) = open(d)?;
    if (le16(d, 424), le16(d, 426)) != (14, 2) {
        return Err(Fail::Unsupported(format!(
            "PIXAR layout ({}, {}) (PIL reads (14, 2), RGB, only)",
            le16(d, 424),
            le16(d, 426)
        )));
    }
    let n = (w as usize) * (h as usize) * 3;
    if n > max_bytes {
        return Err(Fail::Limits);
    }
    let data = d.get(1024..).and_then(|r| r.get(..n)).ok_or_else(|| {
        Fail::Corrupt("the file ends before the PIXAR pixels do (truncated)".into())
    })?;
    Ok(Raster {
        width: w,
        height: h,
        pixels: Pixels::Rgb(data.to_vec()),
        transparency: Transparency::None,
    })
}
