//! SPIDER (2D images of the SPIDER electron-microscopy package), read as Pillow 13.0.0's
//! `SpiderImagePlugin` reads it. There is no magic number: the first 27 floats, big-endian
//! first, then little-endian, must pass `isSpiderHeader` (header words 1, 2, 5, 12, 13, 22, 23
//! integral, `iform` one of 1, 3, -11, -12, -21, -22, `labbyt == labrec * lenbyt`), and the image
//! must be 2D (`iform` 1). Mode F, rows top to bottom after `labbyt` header bytes (twice that
//! for the first image of a stack).

use super::Fail;
use super::modes::{Pixels, Raster, Transparency};

/// `int(f)` when `f` is integral (`isInt`), else `None`.
fn as_int(f: f32) -> Option<i64> {
    (f.is_finite() && f.fract() == 0.0 && f.abs() < 9.2e18).then_some(f as i64)
}

/// The header words, 1-based as SPIDER numbers them (`h[0]` unused), and the header length
/// (`isSpiderHeader`), for one byte order.
fn header(d: &[u8], big: bool) -> Option<([f32; 28], i64)> {
    let mut h = [0f32; 28];
    for (i, v) in h.iter_mut().skip(1).enumerate() {
        let b: [u8; 4] = d.get(i * 4..i * 4 + 4)?.try_into().ok()?;
        *v = if big {
            f32::from_be_bytes(b)
        } else {
            f32::from_le_bytes(b)
        };
    }
    for i in [1, 2, 5, 12, 13, 22, 23] {
        as_int(h[i])?;
    }
    let iform = as_int(h[5])?;
    if ![1, 3, -11, -12, -21, -22].contains(&iform) {
        return None;
    }
    let (labrec, labbyt, lenbyt) = (as_int(h[13])?, as_int(h[22])?, as_int(h[23])?);
    (labbyt == labrec.checked_mul(lenbyt)? && labbyt != 0).then_some((h, labbyt))
}

/// Whether PIL's SPIDER plugin takes the file (a valid header in either byte order).
pub(crate) fn sniff(d: &[u8]) -> bool {
    header(d, true).is_some() || header(d, false).is_some()
}

struct Head {
    width: u32,
    height: u32,
    big: bool,
    offset: usize,
}

fn open(d: &[u8]) -> Result<Head, Fail> {
    let (h, hdrlen, big) = match (header(d, true), header(d, false)) {
        (Some((h, n)), _) => (h, n, true),
        (None, Some((h, n))) => (h, n, false),
        (None, None) => return Err(Fail::Corrupt("not a valid SPIDER header".into())),
    };
    if h[5] != 1.0 {
        return Err(Fail::Unsupported(format!(
            "SPIDER iform {} (PIL reads 2D images, iform 1)",
            h[5]
        )));
    }
    // int() of the float, truncated toward zero as Python's int().
    let int = |v: f32| v as i64;
    let (istack, imgnumber) = (int(h[24]), int(h[27]));
    let offset = match (istack, imgnumber) {
        (0, 0) => hdrlen,
        (s, 0) if s > 0 => hdrlen.saturating_mul(2),
        _ => {
            return Err(Fail::Unsupported(
                "a SPIDER image inside a stack (PIL opens it only through the stack)".into(),
            ));
        }
    };
    let (w, hh) = (int(h[12]), int(h[2]));
    let dim =
        |v: i64| u32::try_from(v).map_err(|_| Fail::Corrupt(format!("SPIDER image size {v}")));
    Ok(Head {
        width: dim(w)?,
        height: dim(hh)?,
        big,
        offset: usize::try_from(offset)
            .map_err(|_| Fail::Corrupt("negative SPIDER header length".into()))?,
    })
}

pub(crate) fn dims(d: &[u8]) -> Result<(u32, u32), Fail> {
    open(d).map(|h| (h.width, h.height))
}

pub(crate) fn decode(d: &[u8], max_bytes: usize) -> Result<Raster, Fail> {
    let h = open(d)?;
    let n = (h.width as usize)
        .checked_mul(h.height as usize)
        .filter(|n| n.saturating_mul(4) <= max_bytes)
        .ok_or(Fail::Limits)?;
    let data = d
        .get(h.offset..)
        .and_then(|r| r.get(..n * 4))
        .ok_or_else(|| {
            Fail::Corrupt("the file ends before the SPIDER samples do (truncated)".into())
        })?;
    let v = data
        .chunks_exact(4)
        .map(|b| {
            let b = [b[0], b[1], b[2], b[3]];
            if h.big {
                f32::from_be_bytes(b)
            } else {
                f32::from_le_bytes(b)
            }
        })
        .collect();
    Ok(Raster {
        width: h.width,
        height: h.height,
        pixels: Pixels::F(v),
        transparency: Transparency::None,
    })
}
