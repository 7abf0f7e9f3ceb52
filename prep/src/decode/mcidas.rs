//! McIdas area files as Pillow 13.0.0's `McIdasImagePlugin` reads them: 64 big-endian words
//! (`w[1..=64]`), mode L (`w[11]` = 1), I;16B (2) or I (4, big-endian 32-bit), size
//! (`w[10]`, `w[9]`), rows of `w[10] * w[11]` bytes every `w[15] + w[10] * w[11] * w[14]` bytes
//! from `w[34] + w[15]`. I;16B converts to RGB through L (`I16B_L`: values over 255 are 255).

use super::Fail;
use super::modes::{Pixels, Raster, Transparency};

struct Head {
    width: u32,
    height: u32,
    bpp: usize,
    offset: i64,
    stride: i64,
}

fn open(d: &[u8]) -> Result<Head, Fail> {
    if !d.starts_with(b"\0\0\0\0\0\0\0\x04") {
        return Err(Fail::Corrupt("not an McIdas area file".into()));
    }
    let h = d.get(..256).ok_or_else(|| {
        Fail::Corrupt("the file ends inside the McIdas header (truncated)".into())
    })?;
    let w = |i: usize| {
        i32::from_be_bytes([h[4 * i - 4], h[4 * i - 3], h[4 * i - 2], h[4 * i - 1]]) as i64
    };
    let bpp = match w(11) {
        1 => 1,
        2 => 2,
        4 => 4,
        b => {
            return Err(Fail::Unsupported(format!(
                "McIdas format {b} (PIL: unsupported)"
            )));
        }
    };
    let dim = |v: i64| u32::try_from(v).map_err(|_| Fail::Corrupt(format!("McIdas size {v}")));
    Ok(Head {
        width: dim(w(10))?,
        height: dim(w(9))?,
        bpp,
        offset: w(34) + w(15),
        // i32 products: within i64 for two factors; the third may not be.
        stride: (w(10) * w(11))
            .checked_mul(w(14))
            .and_then(|v| v.checked_add(w(15)))
            .ok_or_else(|| Fail::Corrupt("McIdas line length out of range".into()))?,
    })
}

pub(crate) fn dims(d: &[u8]) -> Result<(u32, u32), Fail> {
    open(d).map(|h| (h.width, h.height))
}

pub(crate) fn decode(d: &[u8], max_bytes: usize) -> Result<Raster, Fail> {
    let h = open(d)?;
    if h.offset < 0 {
        return Err(Fail::Corrupt(
            "negative McIdas data offset (PIL: Tile offset cannot be negative)".into(),
        ));
    }
    let (w, hh) = (h.width as usize, h.height as usize);
    let row = w * h.bpp;
    if w.saturating_mul(hh).saturating_mul(4) > max_bytes {
        return Err(Fail::Limits);
    }
    // The raw decoder's stride (0 means the row length).
    let stride = if h.stride == 0 { row as i64 } else { h.stride };
    let mut rows = Vec::with_capacity(hh);
    for y in 0..hh as i64 {
        let at = y.checked_mul(stride).and_then(|v| v.checked_add(h.offset));
        let r = at
            .and_then(|at| usize::try_from(at).ok())
            .and_then(|a| d.get(a..a.checked_add(row)?))
            .ok_or_else(|| {
                Fail::Corrupt("the file ends before the McIdas rows do (truncated)".into())
            })?;
        rows.push(r);
    }
    let pixels = match h.bpp {
        1 => Pixels::L(rows.concat()),
        2 => Pixels::I16(
            rows.iter()
                .flat_map(|r| r.chunks_exact(2).map(|b| u16::from_be_bytes([b[0], b[1]])))
                .collect(),
        ),
        _ => Pixels::I32(
            rows.iter()
                .flat_map(|r| {
                    r.chunks_exact(4)
                        .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
                })
                .collect(),
        ),
    };
    Ok(Raster {
        width: h.width,
        height: h.height,
        pixels,
        transparency: Transparency::None,
    })
}
