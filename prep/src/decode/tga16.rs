//! 16-bit true-colour TGA (image type 2), which the `image` crate does not read, as Pillow
//! 13.0.0's `TgaImagePlugin` reads it: mode RGBA from the raw mode `BGRA;15Z` (bits 10-14 red,
//! 5-9 green, 0-4 blue, each `v * 255 / 31`; alpha 0 where bit 15 is set, else 255), rows
//! bottom to top unless the descriptor's bit 5 is set, mirrored when bit 4 is; `load_end`
//! makes the alpha opaque when a TGA 2.0 footer's extension area says "no alpha"
//! (attributes type 0). Run-length encoded files (type 10) are unpacked as `TgaRleDecode.c`
//! does: a run may not cross a row's end (PIL: buffer overrun), a literal packet may.

use super::Fail;
use super::modes::{Pixels, Raster, Transparency};

fn le16(d: &[u8], at: usize) -> Option<usize> {
    super::bytes::le16(d, at).map(usize::from)
}

/// Whether this TGA is one for this reader: true colour, 16 bits per pixel.
pub(crate) fn takes(d: &[u8]) -> bool {
    d.len() >= 18 && d[2] & 7 == 2 && d[16] == 16
}

pub(crate) fn decode(d: &[u8], max_bytes: usize) -> Result<Raster, Fail> {
    let short = || Fail::Corrupt("the file ends inside the TGA header (truncated)".into());
    let head = d.get(..18).ok_or_else(short)?;
    let (w, h) = (
        le16(head, 12).ok_or_else(short)?,
        le16(head, 14).ok_or_else(short)?,
    );
    let flags = head[17];
    let top_down = flags & 0x20 != 0;
    let mirror = flags & 0x10 != 0;
    let mut pos = 18 + head[0] as usize;
    if head[1] == 1 {
        let n = le16(head, 5).ok_or_else(short)?;
        pos += match head[7] {
            16 => 2 * n,
            24 => 3 * n,
            32 => 4 * n,
            m => {
                return Err(Fail::Corrupt(format!("unknown TGA colour map depth {m}")));
            }
        };
    }
    let n = w
        .checked_mul(h)
        .filter(|n| n.saturating_mul(6) <= max_bytes && *n > 0)
        .ok_or(Fail::Limits)?;
    let rle;
    let data = if head[2] & 8 != 0 {
        rle = unrle(d.get(pos..).unwrap_or(&[]), w * 2, h)?;
        &rle[..]
    } else {
        d.get(pos..).and_then(|r| r.get(..n * 2)).ok_or_else(|| {
            Fail::Corrupt("the file ends before the TGA pixels do (truncated)".into())
        })?
    };
    // TGA 2.0 footer: extension area offset, then the signature.
    let opaque = d.len() >= 26 && d.ends_with(b"TRUEVISION-XFILE.\0") && {
        let f = &d[d.len() - 26..];
        let ext = u32::from_le_bytes([f[0], f[1], f[2], f[3]]) as usize;
        ext != 0 && d.get(ext.saturating_add(494)) == Some(&0)
    };
    let scale = |v: u16| ((v & 31) as u32 * 255 / 31) as u8;
    let mut out = vec![0u8; n * 4];
    for (y, row) in data.chunks_exact(w * 2).enumerate() {
        let oy = if top_down { y } else { h - 1 - y };
        for (x, px) in row.chunks_exact(2).enumerate() {
            let v = u16::from_le_bytes([px[0], px[1]]);
            let ox = if mirror { w - 1 - x } else { x };
            let a = if opaque || v & 0x8000 == 0 { 255 } else { 0 };
            let o = (oy * w + ox) * 4;
            out[o..o + 4].copy_from_slice(&[scale(v >> 10), scale(v >> 5), scale(v), a]);
        }
    }
    Ok(Raster {
        width: w as u32,
        height: h as u32,
        pixels: Pixels::Rgba(out),
        transparency: Transparency::None,
    })
}

/// `ImagingTgaRleDecode` for 2-byte pixels: `h` rows of `row` bytes, in file order.
fn unrle(d: &[u8], row: usize, h: usize) -> Result<Vec<u8>, Fail> {
    let truncated = || {
        Fail::Corrupt(
            "the file ends before the TGA pixels do (PIL: image file is truncated)".into(),
        )
    };
    let mut out = Vec::with_capacity(row * h);
    let mut line = vec![0u8; row];
    let (mut x, mut pos) = (0usize, 0usize);
    while out.len() < row * h {
        let c = *d.get(pos).ok_or_else(truncated)?;
        let mut n = 2 * ((c & 0x7f) as usize + 1);
        let mut extra = 0usize;
        if c & 0x80 != 0 {
            let px = d.get(pos + 1..pos + 3).ok_or_else(truncated)?;
            if x + n > row {
                return Err(Fail::Corrupt(
                    "a TGA run crosses the end of a row (PIL: buffer overrun)".into(),
                ));
            }
            for k in (0..n).step_by(2) {
                line[x + k..x + k + 2].copy_from_slice(px);
            }
            pos += 3;
        } else {
            let lit = d.get(pos + 1..pos + 1 + n).ok_or_else(truncated)?;
            if x + n > row {
                extra = n - (row - x);
                n = row - x;
            }
            line[x..x + n].copy_from_slice(&lit[..n]);
            pos += 1 + n;
        }
        loop {
            x += n;
            if x >= row {
                out.extend_from_slice(&line);
                x = 0;
                if out.len() >= row * h {
                    return Ok(out);
                }
            }
            if extra == 0 || x > 0 {
                break;
            }
            n = extra.min(row);
            line[..n].copy_from_slice(&d[pos..pos + n]);
            pos += n;
            extra -= n;
        }
    }
    Ok(out)
}
