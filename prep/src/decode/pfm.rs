//! PFM (grayscale float "Pf"), read as Pillow 13.0.0's `PpmImagePlugin` reads it: the magic,
//! width, height and scale tokens (whitespace-separated, `#` comments to the end of the line,
//! tokens of at most 10 bytes), mode F; a negative scale means little-endian floats
//! (`F;32F`), else big-endian (`F;32BF`); rows are stored bottom to top (the raw decoder's
//! orientation -1). `convert("RGB")` of mode F goes through L (`modes::f_to_8`). Three-band
//! "PF" files are not PIL's (its plugin has no mode for them) and are refused.

use super::Fail;
use super::modes::{Pixels, Raster, Transparency};

const WHITESPACE: &[u8] = b" \t\n\x0b\x0c\r";

/// `_read_token`: skips leading whitespace; a `#` skips to the end of the line (also inside a
/// token, which then goes on); the token ends at (and consumes) one whitespace byte, at the end
/// of the file, or past 10 bytes (then the header is refused, as PIL refuses it).
fn token(d: &[u8], pos: &mut usize) -> Result<Vec<u8>, Fail> {
    let mut t = Vec::new();
    while t.len() <= 10 {
        let Some(&c) = d.get(*pos) else { break };
        *pos += 1;
        if WHITESPACE.contains(&c) {
            if t.is_empty() {
                continue;
            }
            break;
        } else if c == b'#' {
            while d.get(*pos).is_some_and(|c| !b"\r\n".contains(c)) {
                *pos += 1;
            }
            *pos += 1;
        } else {
            t.push(c);
        }
    }
    if t.is_empty() {
        return Err(Fail::Corrupt(
            "the file ends inside the PFM header (truncated)".into(),
        ));
    }
    if t.len() > 10 {
        return Err(Fail::Corrupt("a PFM header token is too long".into()));
    }
    Ok(t)
}

struct Head {
    width: u32,
    height: u32,
    little: bool,
    data: usize,
}

fn open(d: &[u8]) -> Result<Head, Fail> {
    if !d.starts_with(b"Pf") || !d.get(2).is_some_and(|c| WHITESPACE.contains(c)) {
        return Err(Fail::Unsupported(
            "not a grayscale PFM (\"Pf\"); PIL reads no other float PNM".into(),
        ));
    }
    let mut pos = 3;
    let int = |t: &[u8]| -> Result<u32, Fail> {
        std::str::from_utf8(t)
            .ok()
            .and_then(|s| s.parse::<u32>().ok())
            .ok_or_else(|| {
                Fail::Corrupt(format!(
                    "PFM size {:?} is not a number",
                    String::from_utf8_lossy(t)
                ))
            })
    };
    let width = int(&token(d, &mut pos)?)?;
    let height = int(&token(d, &mut pos)?)?;
    let t = token(d, &mut pos)?;
    let scale: f64 = std::str::from_utf8(&t)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| Fail::Corrupt("the PFM scale is not a number".into()))?;
    if scale == 0.0 || !scale.is_finite() {
        return Err(Fail::Corrupt(
            "the PFM scale must be finite and non-zero".into(),
        ));
    }
    Ok(Head {
        width,
        height,
        little: scale < 0.0,
        data: pos,
    })
}

pub(crate) fn dims(d: &[u8]) -> Result<(u32, u32), Fail> {
    open(d).map(|h| (h.width, h.height))
}

pub(crate) fn decode(d: &[u8], max_bytes: usize) -> Result<Raster, Fail> {
    let h = open(d)?;
    let (w, hh) = (h.width as usize, h.height as usize);
    let n = w
        .checked_mul(hh)
        .filter(|n| n.saturating_mul(4) <= max_bytes);
    let n = n.ok_or(Fail::Limits)?;
    if n == 0 {
        return Err(Fail::Corrupt("a PFM image without pixels".into()));
    }
    let data = d
        .get(h.data..)
        .and_then(|r| r.get(..n * 4))
        .ok_or_else(|| {
            Fail::Corrupt("the file ends before the PFM samples do (truncated)".into())
        })?;
    let mut v = Vec::with_capacity(n);
    // Bottom row first.
    for row in data.chunks_exact(w * 4).rev() {
        v.extend(row.chunks_exact(4).map(|b| {
            let b = [b[0], b[1], b[2], b[3]];
            if h.little {
                f32::from_le_bytes(b)
            } else {
                f32::from_be_bytes(b)
            }
        }));
    }
    Ok(Raster {
        width: h.width,
        height: h.height,
        pixels: Pixels::F(v),
        transparency: Transparency::None,
    })
}
