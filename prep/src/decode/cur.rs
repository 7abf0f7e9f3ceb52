//! CUR (Windows cursor) as Pillow 13.0.0's `CurImagePlugin` reads it: the entry picked as `_open`
//! picks it (the first, replaced by any later one wider and taller), its bitmap read by the BMP
//! reader (`bmp.rs`, the same rules as `BmpImagePlugin._bitmap`) with its height halved. Modes 1
//! and L are "masked": the whole double-height bitmap is read at its own depth, its top half (the
//! AND mask, bottom-up storage) inverted and used to paste the bottom half onto a transparent
//! black LA image (`paste` with a mask: `DIV255(v * m)`).

use super::Fail;
use super::bmp;
use super::bytes::{le16, le32};
use super::modes::{Pixels, Raster, Transparency};

/// The chosen entry's bitmap offset.
fn pick(d: &[u8]) -> Result<usize, Fail> {
    let n = le16(d, 4).map_or(0, usize::from);
    let mut m: Option<&[u8]> = None;
    for i in 0..n {
        let Some(s) = d.get(6 + 16 * i..6 + 16 * (i + 1)) else {
            break;
        };
        match m {
            None => m = Some(s),
            Some(best) if s[0] > best[0] && s[1] > best[1] => m = Some(s),
            _ => {}
        }
    }
    let m =
        m.ok_or_else(|| Fail::Corrupt("no cursor entries (PIL: no cursors were found)".into()))?;
    Ok(le32(m, 12).unwrap_or(0) as usize)
}

/// The entry's bitmap as a BMP file, with its height halved when `half`.
fn as_bmp(d: &[u8], at: usize, half: bool) -> Result<Vec<u8>, Fail> {
    let dib = d
        .get(at..)
        .filter(|b| b.len() >= 16)
        .ok_or_else(|| Fail::Corrupt("the cursor bitmap is outside the file".into()))?;
    let header = le32(dib, 0).unwrap_or(0);
    let mut out = b"BM".to_vec();
    out.extend(((14 + dib.len()) as u32).to_le_bytes());
    out.extend([0u8; 4]);
    // Points at the palette (the BMP reader moves past it), or at the pixels when there is none.
    out.extend((14u32.saturating_add(header)).to_le_bytes());
    out.extend_from_slice(dib);
    if half && header >= 40 {
        let h = le32(dib, 8).unwrap_or(0) as i32;
        out[14 + 8..14 + 12].copy_from_slice(&(h / 2).to_le_bytes());
    }
    Ok(out)
}

pub(crate) fn dims(d: &[u8]) -> Result<(u32, u32), Fail> {
    let (w, h) = bmp::dims(&as_bmp(d, pick(d)?, false)?)?;
    Ok((w, h / 2))
}

pub(crate) fn decode(d: &[u8], max_bytes: usize) -> Result<Raster, Fail> {
    let at = pick(d)?;
    let half = bmp::decode(&as_bmp(d, at, true)?, max_bytes)?;
    if !matches!(half.pixels, Pixels::Bilevel(_) | Pixels::L(_)) {
        return Ok(half);
    }
    let full = bmp::decode(&as_bmp(d, at, false)?, max_bytes)?;
    let (w, h) = (full.width as usize, full.height as usize / 2);
    let v = match &full.pixels {
        Pixels::Bilevel(v) | Pixels::L(v) => v,
        _ => return Err(Fail::Corrupt("the cursor's mask changed mode".into())),
    };
    let mut la = Vec::with_capacity(w * h * 2);
    for y in 0..h {
        for x in 0..w {
            let m = 255 - v[y * w + x] as u32;
            let c = v[(h + y) * w + x] as u32;
            let div255 = |a: u32| {
                let t = a + 128;
                (((t >> 8) + t) >> 8) as u8
            };
            la.extend([div255(c * m), div255(255 * m)]);
        }
    }
    Ok(Raster {
        width: w as u32,
        height: h as u32,
        pixels: Pixels::La(la),
        transparency: Transparency::None,
    })
}
