//! Sun raster (`.ras`), read as Pillow 13.0.0's `SunImagePlugin` and `SunRleDecode.c` read it:
//! depth 1 is mode "1" (set bits black, `1;I`), 4 and 8 are L (or P with a colour map: an
//! `RGB;L` palette of `length / 3` entries, planar), 24 and 32 are RGB (BGR order unless the file
//! type is 3); raw rows are padded to 16 bits, RLE rows are not (PIL's line is
//! `(width * bits + 7) / 8` bytes there), and a run that crosses a line end carries on into the
//! next lines as PIL's decoder carries it.

use super::Fail;
use super::bytes::be32;
use super::modes::{Pixels, Raster, Transparency, blank_palette};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Raw {
    /// `1;I`.
    Bit,
    /// `L;4` / `P;4`.
    Nibble,
    /// `L` / `P`.
    Byte,
    /// `RGB` or `BGR` (`bgr`).
    Rgb { bgr: bool },
    /// `RGBX` or `BGRX`.
    Rgbx { bgr: bool },
}

impl Raw {
    fn bits(self) -> usize {
        match self {
            Raw::Bit => 1,
            Raw::Nibble => 4,
            Raw::Byte => 8,
            Raw::Rgb { .. } => 24,
            Raw::Rgbx { .. } => 32,
        }
    }
}

struct Head {
    width: usize,
    height: usize,
    raw: Raw,
    /// Mode P: the colour map.
    palette: Option<Vec<u8>>,
    rle: bool,
    data_at: usize,
    depth: usize,
}

fn head(d: &[u8]) -> Result<Head, Fail> {
    let f = |i| be32(d, i).map(|v| v as usize);
    let (Some(0x59A66A95), Some(width), Some(height), Some(depth)) = (f(0), f(4), f(8), f(12))
    else {
        return Err(Fail::Corrupt(
            "not a Sun raster header, or the file ends inside it".into(),
        ));
    };
    let (Some(file_type), Some(palette_type), Some(palette_len)) = (f(20), f(24), f(28)) else {
        return Err(Fail::Corrupt(
            "the file ends inside the Sun raster header (truncated)".into(),
        ));
    };
    let rgb_order = file_type == 3;
    let raw = match depth {
        1 => Raw::Bit,
        4 => Raw::Nibble,
        8 => Raw::Byte,
        24 => Raw::Rgb { bgr: !rgb_order },
        32 => Raw::Rgbx { bgr: !rgb_order },
        _ => {
            return Err(Fail::Unsupported(format!(
                "Sun raster depth {depth} (PIL: unsupported mode/bit depth)"
            )));
        }
    };
    let mut palette = None;
    if palette_len != 0 {
        if palette_len > 1024 {
            return Err(Fail::Unsupported(format!(
                "Sun raster colour map of {palette_len} bytes (PIL reads up to 1024)"
            )));
        }
        if palette_type != 1 {
            return Err(Fail::Unsupported(format!(
                "Sun raster colour map type {palette_type} (PIL reads type 1, RGB)"
            )));
        }
        if !matches!(raw, Raw::Nibble | Raw::Byte) {
            return Err(Fail::Unsupported(format!(
                "a colour map on a Sun raster of depth {depth} (PIL cannot load it either)"
            )));
        }
        if palette_len / 3 > 256 {
            return Err(Fail::Unsupported(format!(
                "Sun raster colour map of {} entries (PIL: invalid palette size)",
                palette_len / 3
            )));
        }
        let end = (32 + palette_len).min(d.len());
        palette = Some(d.get(32..end).unwrap_or(&[]).to_vec());
    }
    let rle = match file_type {
        0 | 1 | 3 | 4 | 5 => false,
        2 => true,
        t => {
            return Err(Fail::Unsupported(format!(
                "Sun raster file type {t} (PIL: unsupported)"
            )));
        }
    };
    Ok(Head {
        width,
        height,
        raw,
        palette,
        rle,
        data_at: 32 + palette_len,
        depth,
    })
}

pub(crate) fn dims(d: &[u8]) -> Result<(u32, u32), Fail> {
    let h = head(d)?;
    let (Ok(w), Ok(ht)) = (u32::try_from(h.width), u32::try_from(h.height)) else {
        return Err(Fail::Corrupt("Sun raster size out of range".into()));
    };
    Ok((w, ht))
}

/// One line of samples (`(width * bits + 7) / 8` bytes) into `out` (1 or 3 bytes per pixel).
fn unpack(raw: Raw, line: &[u8], out: &mut [u8]) {
    match raw {
        Raw::Bit => {
            for (x, o) in out.iter_mut().enumerate() {
                *o = if line[x / 8] & (0x80 >> (x % 8)) != 0 {
                    0
                } else {
                    255
                };
            }
        }
        Raw::Nibble => {
            for (x, o) in out.iter_mut().enumerate() {
                *o = (line[x / 2] >> (4 - 4 * (x % 2))) & 15;
            }
        }
        Raw::Byte => out.copy_from_slice(&line[..out.len()]),
        Raw::Rgb { bgr } | Raw::Rgbx { bgr } => {
            let step = if matches!(raw, Raw::Rgb { .. }) { 3 } else { 4 };
            for (o, s) in out.chunks_exact_mut(3).zip(line.chunks(step)) {
                o.copy_from_slice(&if bgr {
                    [s[2], s[1], s[0]]
                } else {
                    [s[0], s[1], s[2]]
                });
            }
        }
    }
}

/// `ImagingSunRleDecode` over the data from `pos`: lines of `line` bytes into `sink`.
fn rle(
    d: &[u8],
    mut pos: usize,
    line: usize,
    height: usize,
    mut sink: impl FnMut(usize, &[u8]),
) -> Result<(), Fail> {
    let truncated =
        || Fail::Corrupt("the Sun raster RLE data ends before the last line (truncated)".into());
    let mut buf = vec![0u8; line];
    let (mut x, mut y) = (0usize, 0usize);
    loop {
        let &b = d.get(pos).ok_or_else(truncated)?;
        let (mut n, mut extra, mut extra_value) = (1usize, 0usize, 0u8);
        if b == 0x80 {
            let &count = d.get(pos + 1).ok_or_else(truncated)?;
            if count == 0 {
                buf[x] = 0x80;
                pos += 2;
            } else {
                let &v = d.get(pos + 2).ok_or_else(truncated)?;
                n = count as usize + 1;
                if x + n > line {
                    extra = n - (line - x);
                    n = line - x;
                    extra_value = v;
                }
                buf[x..x + n].fill(v);
                pos += 3;
            }
        } else {
            buf[x] = b;
            pos += 1;
        }
        loop {
            x += n;
            if x >= line {
                sink(y, &buf);
                x = 0;
                y += 1;
                if y >= height {
                    return Ok(());
                }
            }
            if extra == 0 || x > 0 {
                break;
            }
            n = extra.min(line);
            buf[..n].fill(extra_value);
            extra -= n;
        }
    }
}

pub(crate) fn decode(d: &[u8], max_bytes: usize) -> Result<Raster, Fail> {
    let h = head(d)?;
    let (w, ht) = (h.width, h.height);
    if w == 0 || ht == 0 {
        return Err(Fail::Corrupt("Sun raster of zero size".into()));
    }
    let channels = if matches!(h.raw, Raw::Rgb { .. } | Raw::Rgbx { .. }) {
        3
    } else {
        1
    };
    if w.saturating_mul(ht).saturating_mul(channels) > max_bytes {
        return Err(Fail::Limits);
    }
    let row = w * channels;
    let mut out = vec![0u8; w * ht * channels];
    let line = (w * h.raw.bits()).div_ceil(8);
    if h.rle {
        rle(d, h.data_at, line, ht, |y, l| {
            unpack(h.raw, l, &mut out[y * row..(y + 1) * row])
        })?;
    } else {
        let stride = (w * h.depth).div_ceil(16) * 2;
        let need = h.data_at + (ht - 1) * stride + line;
        if d.len() < need {
            return Err(Fail::Corrupt(format!(
                "the Sun raster image data needs {need} bytes, the file has {} (truncated)",
                d.len()
            )));
        }
        for y in 0..ht {
            let at = h.data_at + y * stride;
            unpack(h.raw, &d[at..at + line], &mut out[y * row..(y + 1) * row]);
        }
    }
    let pixels = match (h.raw, &h.palette) {
        (Raw::Bit, _) => Pixels::Bilevel(out),
        (Raw::Nibble, None) => Pixels::L(out.iter().map(|&v| v * 0x11).collect()),
        (Raw::Byte, None) => Pixels::L(out),
        (Raw::Nibble | Raw::Byte, Some(p)) => {
            let n = p.len() / 3;
            let mut pal = blank_palette();
            for (i, e) in pal.iter_mut().enumerate().take(n) {
                *e = [p[i], p[i + n], p[i + 2 * n], 255];
            }
            Pixels::P(out, pal)
        }
        _ => Pixels::Rgb(out),
    };
    Ok(Raster {
        width: w as u32,
        height: ht as u32,
        pixels,
        transparency: Transparency::None,
    })
}
