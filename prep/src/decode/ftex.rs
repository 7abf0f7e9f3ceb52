//! FTEX (Independence War 2 textures) as Pillow 13.0.0's `FtexImagePlugin` reads them: one
//! format only, the first mipmap, either DXT1 (mode RGBA, `BcnDecode.c`'s BC1 through `dds.rs`,
//! alpha 0 where a block with `color0 <= color1` uses its fourth colour) or raw RGB.

use super::Fail;
use super::modes::Raster;

fn le32(d: &[u8], at: usize) -> Option<i32> {
    super::bytes::le32(d, at).map(|v| v as i32)
}

/// (width, height, format, mipmap data).
fn open(d: &[u8]) -> Result<(u32, u32, i32, &[u8]), Fail> {
    let short = || Fail::Corrupt("the file ends inside the FTEX header (truncated)".into());
    if !d.starts_with(b"FTEX") {
        return Err(Fail::Corrupt("not an FTEX file".into()));
    }
    let (w, h) = (
        le32(d, 8).ok_or_else(short)?,
        le32(d, 12).ok_or_else(short)?,
    );
    let formats = le32(d, 20).ok_or_else(short)?;
    if formats != 1 {
        return Err(Fail::Unsupported(format!(
            "{formats} texture formats in one FTEX file (PIL reads one)"
        )));
    }
    let (format, at) = (
        le32(d, 24).ok_or_else(short)?,
        le32(d, 28).ok_or_else(short)?,
    );
    let at = usize::try_from(at).map_err(|_| Fail::Corrupt("negative FTEX data offset".into()))?;
    let size = le32(d, at).ok_or_else(short)?;
    let rest = &d[at + 4..];
    // `read(n)`: what is there; a negative size reads to the end.
    let data = match usize::try_from(size) {
        Ok(n) => &rest[..n.min(rest.len())],
        Err(_) => rest,
    };
    if !matches!(format, 0 | 1) {
        return Err(Fail::Unsupported(format!("FTEX texture format {format}")));
    }
    let dim = |v: i32| u32::try_from(v).map_err(|_| Fail::Corrupt(format!("FTEX size {v}")));
    Ok((dim(w)?, dim(h)?, format, data))
}

pub(crate) fn dims(d: &[u8]) -> Result<(u32, u32), Fail> {
    open(d).map(|(w, h, _, _)| (w, h))
}

pub(crate) fn decode(d: &[u8], max_bytes: usize) -> Result<Raster, Fail> {
    let (w, h, format, data) = open(d)?;
    if format == 0 {
        let mut r = super::dds::bc1(data, w, h, max_bytes)?;
        if let super::modes::Pixels::Rgb(rgb) = &r.pixels {
            r.pixels = super::modes::Pixels::Rgba(with_bc1_alpha(rgb, data, w as usize));
        }
        Ok(r)
    } else {
        let n = (w as usize) * (h as usize) * 3;
        if n > max_bytes {
            return Err(Fail::Limits);
        }
        let px = data.get(..n).ok_or_else(|| {
            Fail::Corrupt("the FTEX mipmap is smaller than the image (truncated)".into())
        })?;
        Ok(Raster {
            width: w,
            height: h,
            pixels: super::modes::Pixels::Rgb(px.to_vec()),
            transparency: super::modes::Transparency::None,
        })
    }
}

/// The BC1 image `rgb` (from `data`, `w` wide) with `decode_bc1_block`'s alpha: 0 for index 3
/// of a block whose first colour is not greater than its second, else 255.
fn with_bc1_alpha(rgb: &[u8], data: &[u8], w: usize) -> Vec<u8> {
    let n = rgb.len() / 3;
    let h = n / w.max(1);
    let bw = w.div_ceil(4);
    let mut out = Vec::with_capacity(n * 4);
    for (i, p) in rgb.chunks_exact(3).enumerate() {
        let (x, y) = (i % w, i / w);
        let at = (y / 4 * bw + x / 4) * 8;
        let a = match data.get(at..at + 8) {
            Some(b) if y < h => {
                let (c0, c1) = (
                    u16::from_le_bytes([b[0], b[1]]),
                    u16::from_le_bytes([b[2], b[3]]),
                );
                let idx = (b[4 + y % 4] >> (2 * (x % 4))) & 3;
                if c0 <= c1 && idx == 3 { 0 } else { 255 }
            }
            _ => 255,
        };
        out.extend([p[0], p[1], p[2], a]);
    }
    out
}
