//! GIMP brushes (GBR, versions 1 and 2) as Pillow 13.0.0's `GbrImagePlugin` reads them: a
//! big-endian header (header size at least 20, version, width, height, colour depth 1 or 4;
//! version 2 adds the `GIMP` magic and the spacing), mode L (depth 1) or RGBA (depth 4), the
//! raw pixels right after the header.

use super::Fail;
use super::bytes::be32;
use super::modes::{Pixels, Raster, Transparency};

/// (width, height, bytes per pixel, where the pixels start).
fn open(d: &[u8]) -> Result<(u32, u32, usize, usize), Fail> {
    let short = || Fail::Corrupt("the file ends inside the GBR header (truncated)".into());
    let header = be32(d, 0).ok_or_else(short)?;
    if header < 20 {
        return Err(Fail::Corrupt(
            "not a GIMP brush (header size under 20)".into(),
        ));
    }
    let version = be32(d, 4).ok_or_else(short)?;
    if !matches!(version, 1 | 2) {
        return Err(Fail::Unsupported(format!("GIMP brush version {version}")));
    }
    let (w, h) = (
        be32(d, 8).ok_or_else(short)?,
        be32(d, 12).ok_or_else(short)?,
    );
    if w == 0 || h == 0 {
        return Err(Fail::Corrupt("not a GIMP brush (zero size)".into()));
    }
    let depth = be32(d, 16).ok_or_else(short)?;
    if !matches!(depth, 1 | 4) {
        return Err(Fail::Unsupported(format!(
            "GIMP brush colour depth {depth}"
        )));
    }
    if version == 2 {
        if d.get(20..24).ok_or_else(short)? != b"GIMP" {
            return Err(Fail::Corrupt("not a GIMP brush (bad magic number)".into()));
        }
        be32(d, 24).ok_or_else(short)?;
        if header < 28 {
            return Err(Fail::Corrupt(
                "a version 2 GIMP brush header under 28 bytes".into(),
            ));
        }
    }
    Ok((w, h, depth as usize, header as usize))
}

pub(crate) fn dims(d: &[u8]) -> Result<(u32, u32), Fail> {
    open(d).map(|(w, h, _, _)| (w, h))
}

pub(crate) fn decode(d: &[u8], max_bytes: usize) -> Result<Raster, Fail> {
    let (w, h, bands, at) = open(d)?;
    let n = (w as usize)
        .checked_mul(h as usize)
        .and_then(|n| n.checked_mul(bands))
        .filter(|&n| n <= max_bytes)
        .ok_or(Fail::Limits)?;
    let data = d.get(at..).and_then(|r| r.get(..n)).ok_or_else(|| {
        Fail::Corrupt(
            "the file ends before the brush pixels do (PIL: not enough image data)".into(),
        )
    })?;
    Ok(Raster {
        width: w,
        height: h,
        pixels: if bands == 1 {
            Pixels::L(data.to_vec())
        } else {
            Pixels::Rgba(data.to_vec())
        },
        transparency: Transparency::None,
    })
}
