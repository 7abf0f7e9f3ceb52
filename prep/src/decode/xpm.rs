//! XPM (X11 pixmap), read as Pillow 13.0.0's `XpmImagePlugin` reads it: the first line that
//! starts with `"W H COLORS CPP`, then one colour line per colour, whose `c` value is `None`
//! (transparent, black) or `#` and a hex number (its low 24 bits are the RGB colour, so `#rgb`
//! gives 0x000rgb as in PIL; colour names are refused as PIL refuses them); up to 256 colours
//! the image is mode P (a later line with the same key replaces the colour in its first place;
//! `None` gives `info["transparency"]`), above it RGB, or RGBA with `None` transparent. Pixel rows
//! are the text between the first and last quote of each following line (a `/* pixels */` line
//! skipped once), read as one stream of `CPP`-character keys until the image is full.

use super::Fail;
use super::legacy::{readline, rstrip, split_ws};
use super::modes::{Pixels, Raster, Transparency, blank_palette};

struct Head {
    width: usize,
    height: usize,
    /// Where the line after the values line starts.
    colors_at: usize,
    ncolors: usize,
    cpp: usize,
}

/// `[0-9]*` at the start of `s`: the digits and the rest.
fn digits(s: &[u8]) -> (&[u8], &[u8]) {
    let n = s.iter().take_while(|c| c.is_ascii_digit()).count();
    (&s[..n], &s[n..])
}

/// `xpm_head.match(line)`: `"` then four digit runs separated by single spaces.
fn values(line: &[u8]) -> Option<[&[u8]; 4]> {
    let mut rest = line.strip_prefix(b"\"")?;
    let mut out: [&[u8]; 4] = [&[]; 4];
    for (i, o) in out.iter_mut().enumerate() {
        let (v, r) = digits(rest);
        *o = v;
        rest = r;
        if i < 3 {
            rest = rest.strip_prefix(b" ")?;
        }
    }
    Some(out)
}

fn num(v: &[u8]) -> Result<usize, Fail> {
    std::str::from_utf8(v)
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .ok_or_else(|| Fail::Corrupt("an empty or huge number in the XPM values line".into()))
}

fn head(d: &[u8]) -> Result<Head, Fail> {
    if !d.starts_with(b"/* XPM */") {
        return Err(Fail::Corrupt("not an XPM file".into()));
    }
    let mut pos = 9;
    loop {
        let line = readline(d, pos, usize::MAX);
        if line.is_empty() {
            return Err(Fail::Corrupt("broken XPM file (no values line)".into()));
        }
        pos += line.len();
        if let Some(v) = values(line) {
            let (width, height, ncolors, cpp) = (num(v[0])?, num(v[1])?, num(v[2])?, num(v[3])?);
            if u32::try_from(width).is_err() || u32::try_from(height).is_err() {
                return Err(Fail::Corrupt("XPM size out of range".into()));
            }
            return Ok(Head {
                width,
                height,
                colors_at: pos,
                ncolors,
                cpp,
            });
        }
    }
}

pub(crate) fn dims(d: &[u8]) -> Result<(u32, u32), Fail> {
    let h = head(d)?;
    Ok((h.width as u32, h.height as u32))
}

/// `int(text, 16)` reduced to its low 24 bits (negative numbers in two's complement, as
/// Python's `>>` and `&` treat them).
fn hex24(text: &[u8]) -> Option<u32> {
    let (neg, t) = match text.split_first() {
        Some((b'-', r)) => (true, r),
        Some((b'+', r)) => (false, r),
        _ => (false, text),
    };
    let t = t
        .strip_prefix(b"0x")
        .or_else(|| t.strip_prefix(b"0X"))
        .map_or(t, |r| r.strip_prefix(b"_").unwrap_or(r));
    if t.is_empty() || t[0] == b'_' || t[t.len() - 1] == b'_' || t.windows(2).any(|w| w == b"__") {
        return None;
    }
    let mut v = 0u32;
    for &c in t {
        let dgt = match c {
            b'_' => continue,
            _ => (c as char).to_digit(16)?,
        };
        v = (v << 4 | dgt) & 0xff_ffff;
    }
    Some(if neg { v.wrapping_neg() & 0xff_ffff } else { v })
}

pub(crate) fn decode(d: &[u8], max_bytes: usize) -> Result<Raster, Fail> {
    let h = head(d)?;
    let (w, ht, cpp) = (h.width, h.height, h.cpp);
    if w == 0 || ht == 0 {
        return Err(Fail::Corrupt("XPM image of zero size".into()));
    }
    if w.saturating_mul(ht).saturating_mul(4) > max_bytes || h.ncolors > max_bytes / 16 {
        return Err(Fail::Limits);
    }
    let bad = || Fail::Unsupported("cannot read this XPM colour line (PIL refuses it too)".into());
    // The colour table, in first-seen order of its keys.
    let mut keys: std::collections::HashMap<&[u8], usize> = std::collections::HashMap::new();
    let mut colors: Vec<[u8; 3]> = Vec::new();
    let mut transparent: Option<&[u8]> = None;
    let mut pos = h.colors_at;
    for _ in 0..h.ncolors {
        let raw = readline(d, pos, usize::MAX);
        pos += raw.len();
        let line = rstrip(raw);
        let key = line.get(1..(cpp + 1).min(line.len())).unwrap_or(&[]);
        let spec_end = line.len().saturating_sub(2);
        let spec = line.get(cpp + 1..spec_end).unwrap_or(&[]);
        let tokens: Vec<&[u8]> = split_ws(spec).collect();
        let mut color = None;
        for pair in tokens.chunks(2) {
            if pair[0] == b"c" {
                let rgb = *pair.get(1).ok_or_else(bad)?;
                color = Some(if rgb == b"None" {
                    transparent = Some(key);
                    [0, 0, 0]
                } else if let Some(hex) = rgb.strip_prefix(b"#") {
                    let v = hex24(hex).ok_or_else(bad)?;
                    [(v >> 16) as u8, (v >> 8) as u8, v as u8]
                } else {
                    return Err(bad());
                });
                break;
            }
        }
        let color = color.ok_or_else(bad)?;
        match keys.get(key) {
            Some(&i) => colors[i] = color,
            None => {
                keys.insert(key, colors.len());
                colors.push(color);
            }
        }
    }
    let index_of = |key: &[u8]| keys.get(key).copied();
    let trans_index = transparent.and_then(index_of);
    let palette_mode = h.ncolors <= 256;
    let per_pixel = match (palette_mode, trans_index) {
        (true, _) => 1,
        (false, None) => 3,
        (false, Some(_)) => 4,
    };
    let need = w * ht * per_pixel;
    let mut data: Vec<u8> = Vec::with_capacity(need);
    let mut pixel_header = false;
    let unknown = || Fail::Corrupt("an XPM pixel with a key not in the colour table".into());
    if cpp == 0 {
        return Err(Fail::Corrupt("XPM with 0 characters per pixel".into()));
    }
    while data.len() < need {
        let raw = readline(d, pos, usize::MAX);
        if raw.is_empty() {
            break;
        }
        pos += raw.len();
        if rstrip(raw) == b"/* pixels */" && !pixel_header {
            pixel_header = true;
            continue;
        }
        let (Some(a), Some(b)) = (
            raw.iter().position(|&c| c == b'"'),
            raw.iter().rposition(|&c| c == b'"'),
        ) else {
            continue;
        };
        if a == b {
            continue;
        }
        for key in raw[a + 1..b].chunks(cpp) {
            let i = index_of(key).ok_or_else(unknown)?;
            if palette_mode {
                data.push(i as u8);
            } else {
                data.extend_from_slice(&colors[i]);
                if per_pixel == 4 {
                    data.push(if Some(i) == trans_index { 0 } else { 255 });
                }
            }
        }
    }
    if data.len() < need {
        return Err(Fail::Corrupt(
            "the XPM pixel rows end before the image is full (PIL: not enough image data)".into(),
        ));
    }
    data.truncate(need);
    let (pixels, transparency) = match per_pixel {
        1 => {
            let mut pal = blank_palette();
            for (e, c) in pal.iter_mut().zip(&colors) {
                *e = [c[0], c[1], c[2], 255];
            }
            let t = match trans_index {
                Some(i) => {
                    pal[i][3] = 0;
                    Transparency::PaletteIndex(i as u8)
                }
                None => Transparency::None,
            };
            (Pixels::P(data, pal), t)
        }
        3 => (Pixels::Rgb(data), Transparency::None),
        _ => (Pixels::Rgba(data), Transparency::None),
    };
    Ok(Raster {
        width: w as u32,
        height: ht as u32,
        pixels,
        transparency,
    })
}
