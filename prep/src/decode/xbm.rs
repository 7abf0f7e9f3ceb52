//! XBM (X11 bitmap), read as Pillow 13.0.0's `XbmImagePlugin` and `XbmDecode.c` read it: header
//! lines (read 75 bytes at most at a time, as `readline(75)`) of `#define NAME_width N` /
//! `_height N`, block comments and one leading blank line skipped, up to the `..._bits[] = {`
//! line; then every `x` in the rest of the file starts a byte whose two following characters are
//! read as hex digits (anything else counts 0), bits least significant first, set bits white.

use super::Fail;
use super::legacy::{py_int, readline, rstrip, split_ws};
use super::modes::{Pixels, Raster, Transparency};

struct Head {
    width: usize,
    height: usize,
    data_at: usize,
}

fn head(d: &[u8]) -> Result<Head, Fail> {
    let (mut width, mut height, mut data_at) = (None, None, None);
    let (mut pos, mut starting, mut in_comment) = (0usize, true, false);
    loop {
        let raw = readline(d, pos, 75);
        if raw.is_empty() {
            break;
        }
        pos += raw.len();
        let line = rstrip(raw);
        if in_comment {
            in_comment = !line.ends_with(b"*/");
            continue;
        }
        if line.starts_with(b"/*") {
            in_comment = !line.ends_with(b"*/");
            continue;
        }
        if starting && line.is_empty() {
            starting = false;
            continue;
        }
        if !line.starts_with(b"#define ") {
            if line.ends_with(b"_bits[] = {") {
                data_at = Some(pos);
            }
            break;
        }
        let value = split_ws(line)
            .last()
            .and_then(py_int)
            .ok_or_else(|| Fail::Corrupt("an XBM #define without a number".into()))?;
        let has = |k: &[u8]| line.windows(k.len()).any(|w| w == k);
        if has(b"width ") {
            width = Some(value);
        } else if has(b"height ") {
            height = Some(value);
        }
    }
    let (Some(w), Some(h), Some(data_at)) = (width, height, data_at) else {
        return Err(Fail::Corrupt(
            "not an XBM file (no width, height or bits array)".into(),
        ));
    };
    let (Ok(width), Ok(height)) = (u32::try_from(w), u32::try_from(h)) else {
        return Err(Fail::Corrupt(format!("XBM size {w}x{h} out of range")));
    };
    Ok(Head {
        width: width as usize,
        height: height as usize,
        data_at,
    })
}

pub(crate) fn dims(d: &[u8]) -> Result<(u32, u32), Fail> {
    let h = head(d)?;
    Ok((h.width as u32, h.height as u32))
}

fn hex(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        b'A'..=b'F' => c - b'A' + 10,
        _ => 0,
    }
}

pub(crate) fn decode(d: &[u8], max_bytes: usize) -> Result<Raster, Fail> {
    let h = head(d)?;
    let (w, ht) = (h.width, h.height);
    if w == 0 || ht == 0 {
        return Err(Fail::Corrupt("XBM image of zero size".into()));
    }
    if w.saturating_mul(ht) > max_bytes {
        return Err(Fail::Limits);
    }
    let line = w.div_ceil(8);
    let mut out = vec![0u8; w * ht];
    let mut pos = h.data_at;
    for y in 0..ht {
        for b in 0..line {
            let x = d
                .get(pos..)
                .and_then(|r| r.iter().position(|&c| c == b'x'))
                .map(|i| pos + i);
            let Some(v) = x.and_then(|x| d.get(x + 1..x + 3)) else {
                return Err(Fail::Corrupt(
                    "the XBM data ends before the last row (truncated)".into(),
                ));
            };
            let byte = (hex(v[0]) << 4) + hex(v[1]);
            for k in 0..8 {
                let px = b * 8 + k;
                if px < w {
                    out[y * w + px] = if byte >> k & 1 != 0 { 255 } else { 0 };
                }
            }
            pos = x.unwrap_or(pos) + 3;
        }
    }
    Ok(Raster {
        width: w as u32,
        height: ht as u32,
        pixels: Pixels::Bilevel(out),
        transparency: Transparency::None,
    })
}
