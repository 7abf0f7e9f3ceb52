//! MSP (Windows 1.x/2.x Paint), read as Pillow 13.0.0's `MspImagePlugin` reads it: a 32-byte
//! header whose 16 little-endian words XOR to 0; "DanM" files hold raw 1-bit rows, "LinS" files a
//! row map (one length per row) and RLE rows (`0, count, value` runs and `n, n bytes` literals,
//! each clipped to the image *width in pixels* less the bytes the row already has, as PIL clips
//! them; an empty row is white). The rows' bytes are one stream that PIL then reads as
//! `(width + 7) / 8`-byte lines of mode "1" (set bits white).

use super::Fail;
use super::bytes::le16;
use super::modes::{Pixels, Raster, Transparency};

struct Head {
    width: usize,
    height: usize,
    rle: bool,
}

fn head(d: &[u8]) -> Result<Head, Fail> {
    let rle = match d.get(..4) {
        Some(b"DanM") => false,
        Some(b"LinS") => true,
        _ => return Err(Fail::Corrupt("not an MSP header".into())),
    };
    if d.len() < 32 {
        return Err(Fail::Corrupt(
            "the file ends inside the MSP header (truncated)".into(),
        ));
    }
    let sum = (0..16).fold(0u16, |s, i| s ^ le16(d, 2 * i).unwrap_or(0));
    if sum != 0 {
        return Err(Fail::Corrupt(
            "bad MSP header checksum (PIL does not open it)".into(),
        ));
    }
    Ok(Head {
        width: le16(d, 4).unwrap_or(0) as usize,
        height: le16(d, 6).unwrap_or(0) as usize,
        rle,
    })
}

pub(crate) fn dims(d: &[u8]) -> Result<(u32, u32), Fail> {
    let h = head(d)?;
    Ok((h.width as u32, h.height as u32))
}

/// `MspDecoder.decode`: the rows' bytes, as one stream.
fn rle(d: &[u8], w: usize, ht: usize, line: usize) -> Result<Vec<u8>, Fail> {
    let map = d
        .get(32..32 + 2 * ht)
        .ok_or_else(|| Fail::Corrupt("the file ends inside the MSP row map (truncated)".into()))?;
    let mut pos = 32 + 2 * ht;
    let mut data = Vec::with_capacity(ht * line);
    for (y, len) in map.chunks_exact(2).enumerate() {
        let len = u16::from_le_bytes([len[0], len[1]]) as usize;
        if len == 0 {
            data.extend(std::iter::repeat_n(0xff, line));
            continue;
        }
        let row = d.get(pos..pos + len).ok_or_else(|| {
            Fail::Corrupt(format!("the file ends inside MSP row {y} (truncated)"))
        })?;
        pos += len;
        let start = data.len();
        let mut i = 0;
        while i < len {
            let run = row[i] as usize;
            i += 1;
            let room = w - (data.len() - start);
            if run == 0 {
                let (Some(&count), Some(&value)) = (row.get(i), row.get(i + 1)) else {
                    return Err(Fail::Corrupt(format!("corrupted MSP row {y}")));
                };
                data.extend(std::iter::repeat_n(value, (count as usize).min(room)));
                i += 2;
            } else {
                let n = run.min(room);
                data.extend_from_slice(&row[i.min(len)..(i + n).min(len)]);
                i += n;
            }
        }
    }
    Ok(data)
}

pub(crate) fn decode(d: &[u8], max_bytes: usize) -> Result<Raster, Fail> {
    let h = head(d)?;
    let (w, ht) = (h.width, h.height);
    if w == 0 || ht == 0 {
        return Err(Fail::Corrupt("MSP image of zero size".into()));
    }
    if w.saturating_mul(ht) > max_bytes {
        return Err(Fail::Limits);
    }
    let line = w.div_ceil(8);
    let rle_data;
    let data: &[u8] = if h.rle {
        rle_data = rle(d, w, ht, line)?;
        &rle_data
    } else {
        d.get(32..).unwrap_or(&[])
    };
    if data.len() < ht * line {
        return Err(Fail::Corrupt(
            "the MSP image data ends before the last row (truncated)".into(),
        ));
    }
    let mut out = vec![0u8; w * ht];
    for (y, row) in out.chunks_exact_mut(w).enumerate() {
        let src = &data[y * line..(y + 1) * line];
        for (x, o) in row.iter_mut().enumerate() {
            *o = if src[x / 8] & (0x80 >> (x % 8)) != 0 {
                255
            } else {
                0
            };
        }
    }
    Ok(Raster {
        width: w as u32,
        height: ht as u32,
        pixels: Pixels::Bilevel(out),
        transparency: Transparency::None,
    })
}
