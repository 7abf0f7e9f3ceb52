//! XV thumbnails ("P7 332") as Pillow 13.0.0's `XVThumbImagePlugin` reads them: the rest of the
//! first line skipped, then lines starting with `#`; the next line's first two fields are the
//! width and height; mode P with the fixed 3-3-2 palette (`r * 255 // 7`, `g * 255 // 7`,
//! `b * 255 // 3`), one index a pixel after that line.

use super::Fail;
use super::modes::{Pixels, Raster, Transparency, blank_palette};

/// (width, height, where the pixels start).
fn open(d: &[u8]) -> Result<(u32, u32, usize), Fail> {
    if !d.starts_with(b"P7 332") {
        return Err(Fail::Corrupt("not an XV thumbnail".into()));
    }
    // `readline`: up to and including a newline, or to the end.
    let line = |at: usize| -> &[u8] {
        let rest = &d[at.min(d.len())..];
        match rest.iter().position(|&c| c == b'\n') {
            Some(i) => &rest[..=i],
            None => rest,
        }
    };
    let mut pos = 6 + line(6).len();
    let s = loop {
        let s = line(pos);
        if s.is_empty() {
            return Err(Fail::Corrupt(
                "the file ends inside the XV thumbnail header (truncated)".into(),
            ));
        }
        pos += s.len();
        if s[0] != b'#' {
            break s;
        }
    };
    let text = String::from_utf8_lossy(s);
    let mut f = text.split_ascii_whitespace();
    let mut num = || -> Result<u32, Fail> {
        f.next()
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| Fail::Corrupt("bad XV thumbnail size line".into()))
    };
    Ok((num()?, num()?, pos))
}

pub(crate) fn dims(d: &[u8]) -> Result<(u32, u32), Fail> {
    open(d).map(|(w, h, _)| (w, h))
}

pub(crate) fn decode(d: &[u8], max_bytes: usize) -> Result<Raster, Fail> {
    let (w, h, at) = open(d)?;
    let n = (w as usize) * (h as usize);
    if n > max_bytes {
        return Err(Fail::Limits);
    }
    let data = d.get(at..).and_then(|r| r.get(..n)).ok_or_else(|| {
        Fail::Corrupt("the file ends before the thumbnail pixels do (truncated)".into())
    })?;
    let mut pal = blank_palette();
    for (i, e) in pal.iter_mut().enumerate() {
        let (r, g, b) = ((i >> 5) as u32, ((i >> 2) & 7) as u32, (i & 3) as u32);
        *e = [
            (r * 255 / 7) as u8,
            (g * 255 / 7) as u8,
            (b * 255 / 3) as u8,
            255,
        ];
    }
    Ok(Raster {
        width: w,
        height: h,
        pixels: Pixels::P(data.to_vec(), pal),
        transparency: Transparency::None,
    })
}
