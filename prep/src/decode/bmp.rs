//! BMP read as Pillow 13.0.0's `BmpImagePlugin` reads it, so that every file PIL accepts gives
//! PIL's pixels and every file it refuses is refused (the Pillow corpus holds the cases):
//! - headers of 12 bytes (OS/2 1.x: unsigned 16-bit sizes, 3-byte palette entries) and of 40,
//!   52, 56, 64, 108 or 124 bytes (4-byte entries; a height whose top byte is 0xFF is top-down,
//!   `2^32 - h` rows); the planes field is not checked;
//! - depths 1, 4, 8 (palette), 16 (5-5-5, or 5-6-5 by bitfields), 24, 32; others are refused;
//! - bitfields only in PIL's layouts (its `SUPPORTED` table), alpha only where a layout has it;
//! - RLE8 / RLE4 by PIL's `BmpRleDecoder`: skipped pixels (end of line, delta) are index 0, runs
//!   are clipped at the row end, absolute runs are word-aligned to the file offset; data that ends
//!   before the image is refused, as PIL's `set_as_raw` does;
//! - the palette is read right after the header (and bitfield masks); a palette of exactly the gray
//!   ramp (or black/white for two colours) gives mode L (or 1), read with 8-bit (1-bit) samples
//!   whatever the depth, as PIL does;
//! - the pixel data starts at the file header's offset, moved past the palette when that offset
//!   points at the palette itself; rows are padded to 4 bytes, bottom-up unless top-down;
//! - 5/6-bit channels widen by truncating division (`ImagingUnpackBGR15`: `v * 255 / 31`).

use super::Fail;
use super::bytes::{le16, le32};
use super::modes::{Pixels, Raster, Transparency, blank_palette};

fn short() -> Fail {
    Fail::Corrupt("the file ends inside the BMP header (truncated)".into())
}

fn truncated() -> Fail {
    Fail::Corrupt("the file ends before the image data does (truncated)".into())
}

/// What `BmpImageFile._bitmap` reads before any pixel.
struct Info {
    width: u32,
    height: u32,
    top_down: bool,
    bits: u16,
    compression: u32,
    /// Palette entries (`colors`, or `1 << bits`).
    colors: u32,
    /// 3 (OS/2 1.x) or 4 bytes per palette entry.
    padding: usize,
    /// `(r, g, b, a)` masks for bitfields.
    masks: Option<[u32; 4]>,
    /// Where the palette starts (after the header and any masks).
    palette_at: usize,
    /// The file header's data offset.
    offset: usize,
    header_size: u32,
}

fn info(d: &[u8]) -> Result<Info, Fail> {
    let offset = le32(d, 10).ok_or_else(short)? as usize;
    let header_size = le32(d, 14).ok_or_else(short)?;
    let h = 18; // the header's fields after its size
    let mut i = match header_size {
        12 => Info {
            width: le16(d, h).ok_or_else(short)? as u32,
            height: le16(d, h + 2).ok_or_else(short)? as u32,
            top_down: false,
            bits: le16(d, h + 6).ok_or_else(short)?,
            compression: 0,
            colors: 0,
            padding: 3,
            masks: None,
            palette_at: 14 + 12,
            offset,
            header_size,
        },
        40 | 52 | 56 | 64 | 108 | 124 => {
            if d.len() < 14 + header_size as usize {
                return Err(short());
            }
            let y_flip = d[h + 7] == 0xff;
            let raw_h = le32(d, h + 4).ok_or_else(short)?;
            Info {
                width: le32(d, h).ok_or_else(short)?,
                height: if y_flip { raw_h.wrapping_neg() } else { raw_h },
                top_down: y_flip,
                bits: le16(d, h + 10).ok_or_else(short)?,
                compression: le32(d, h + 12).ok_or_else(short)?,
                colors: le32(d, h + 28).ok_or_else(short)?,
                padding: 4,
                masks: None,
                palette_at: 14 + header_size as usize,
                offset,
                header_size,
            }
        }
        n => {
            return Err(Fail::Unsupported(format!(
                "BMP header of {n} bytes (PIL refuses it too)"
            )));
        }
    };
    if i.compression == 3 {
        let m = if header_size >= 52 {
            let a = if header_size >= 56 {
                le32(d, h + 48).ok_or_else(short)?
            } else {
                0
            };
            [
                le32(d, h + 36).ok_or_else(short)?,
                le32(d, h + 40).ok_or_else(short)?,
                le32(d, h + 44).ok_or_else(short)?,
                a,
            ]
        } else {
            // A 40-byte header: three masks follow it.
            let at = 14 + header_size as usize;
            i.palette_at = at + 12;
            [
                le32(d, at).ok_or_else(short)?,
                le32(d, at + 4).ok_or_else(short)?,
                le32(d, at + 8).ok_or_else(short)?,
                0,
            ]
        };
        i.masks = Some(m);
    }
    if i.colors == 0 {
        i.colors = 1u32.checked_shl(i.bits as u32).unwrap_or(0);
    }
    Ok(i)
}

/// Width and height as PIL reports them (for the header check and `plan`).
pub(crate) fn dims(d: &[u8]) -> Result<(u32, u32), Fail> {
    let i = info(d)?;
    Ok((i.width, i.height))
}

/// How the samples are laid out (PIL's raw modes).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// Palette indices or gray values of `bits` bits (1, 4 or 8).
    Index(u32),
    Bgr15,
    Bgr16,
    Bgr,
    /// 32-bit: byte positions of r, g, b and (optionally) a.
    Quad([usize; 3], Option<usize>),
}

/// PIL's `SUPPORTED` bitfield layouts, as a [`Layout`].
fn bitfields(bits: u16, m: [u32; 4]) -> Option<Layout> {
    let byte = |mask: u32| -> Option<usize> { (0..4).find(|k| mask == 0xff << (8 * k)) };
    match bits {
        32 => {
            const OK: [[u32; 4]; 8] = [
                [0xff0000, 0xff00, 0xff, 0],
                [0xff000000, 0xff0000, 0xff00, 0],
                [0xff000000, 0xff00, 0xff, 0],
                [0xff000000, 0xff0000, 0xff00, 0xff],
                [0xff, 0xff00, 0xff0000, 0xff000000],
                [0xff0000, 0xff00, 0xff, 0xff000000],
                [0xff000000, 0xff00, 0xff, 0xff0000],
                [0, 0, 0, 0],
            ];
            if !OK.contains(&m) {
                return None;
            }
            if m == [0, 0, 0, 0] {
                // PIL reads it as "BGRA".
                return Some(Layout::Quad([2, 1, 0], Some(3)));
            }
            let a = if m[3] == 0 { None } else { byte(m[3]) };
            Some(Layout::Quad([byte(m[0])?, byte(m[1])?, byte(m[2])?], a))
        }
        24 if m[..3] == [0xff0000, 0xff00, 0xff] => Some(Layout::Bgr),
        16 if m[..3] == [0xf800, 0x7e0, 0x1f] => Some(Layout::Bgr16),
        16 if m[..3] == [0x7c00, 0x3e0, 0x1f] => Some(Layout::Bgr15),
        _ => None,
    }
}

pub(crate) fn decode(d: &[u8], max_bytes: usize) -> Result<Raster, Fail> {
    let i = info(d)?;
    let (w, h) = (i.width as usize, i.height as usize);
    if w.saturating_mul(h).saturating_mul(4) > max_bytes {
        return Err(Fail::Limits);
    }
    let rle = matches!(i.compression, 1 | 2);
    let mut layout = match (i.bits, i.compression) {
        (1 | 4 | 8, 0..=2) => Layout::Index(i.bits as u32),
        (16, 0) => Layout::Bgr15,
        (24, 0) => Layout::Bgr,
        (32, 0) => Layout::Quad([2, 1, 0], None),
        (16 | 24 | 32, 1 | 2) => Layout::Index(8),
        (b @ (16 | 24 | 32), 3) => bitfields(b, i.masks.unwrap_or_default())
            .ok_or_else(|| Fail::Unsupported("BMP bitfields layout (PIL refuses it too)".into()))?,
        (1 | 4 | 8, 3) => {
            return Err(Fail::Unsupported(
                "BMP bitfields layout (PIL refuses it too)".into(),
            ));
        }
        (1 | 4 | 8 | 16 | 24 | 32, c) => {
            return Err(Fail::Unsupported(format!(
                "BMP compression {c} (PIL refuses it too)"
            )));
        }
        (b, _) => {
            return Err(Fail::Unsupported(format!(
                "BMP pixel depth {b} (PIL refuses it too)"
            )));
        }
    };
    if rle && i.bits > 8 {
        // PIL's RLE decoder would give an RGB image one byte per pixel; no real file does this.
        return Err(Fail::Unsupported(format!(
            "RLE-compressed BMP of {} bits per pixel",
            i.bits
        )));
    }

    // The palette (modes P, L and 1).
    let mut offset = i.offset;
    let mut gray: Option<bool> = None; // Some(true): mode "1"; Some(false): mode "L"
    let mut palette = blank_palette();
    if i.bits <= 8 {
        if !(1..=65536).contains(&i.colors) {
            return Err(Fail::Unsupported(format!(
                "BMP palette of {} colours (PIL refuses it too)",
                i.colors
            )));
        }
        let colors = i.colors as usize;
        let end = i.palette_at.saturating_add(colors * i.padding).min(d.len());
        let pal = d.get(i.palette_at..end).unwrap_or(&[]);
        let is_gray = (0..colors).all(|ind| {
            let val = if colors == 2 {
                [0u8, 255][ind]
            } else {
                ind as u8
            };
            pal.get(ind * i.padding..ind * i.padding + 3) == Some(&[val, val, val][..])
        });
        if is_gray {
            gray = Some(colors <= 2);
            // PIL reads the samples as its raw mode "1" or "L" whatever the file's depth.
            if !rle {
                layout = Layout::Index(if colors <= 2 { 1 } else { 8 });
            }
        } else {
            if pal.len() > 256 * i.padding {
                // `putpalette` raises "invalid palette size".
                return Err(Fail::Unsupported(format!(
                    "BMP palette of {} entries, more than 256 (PIL refuses it too)",
                    pal.len() / i.padding
                )));
            }
            for (k, p) in pal.chunks_exact(i.padding).enumerate() {
                palette[k] = [p[2], p[1], p[0], 255];
            }
        }
        if offset == 14 + i.header_size as usize {
            offset += i.padding * colors;
        }
    }
    if offset == 0 {
        offset = i.palette_at
            + if i.bits <= 8 {
                i.padding * i.colors as usize
            } else {
                0
            };
    }

    let samples: Vec<u8> = if rle {
        if gray == Some(true) {
            return Err(Fail::Unsupported(
                "RLE-compressed black-and-white BMP".into(),
            ));
        }
        rle_decode(d, offset, w, h, i.compression == 2, i.top_down)?
    } else {
        unpack(d, offset, w, h, layout, i.bits as usize, i.top_down)?
    };
    let pixels = match (layout, gray) {
        (Layout::Index(_), Some(true)) => Pixels::Bilevel(
            samples
                .into_iter()
                .map(|v| if v != 0 { 255 } else { 0 })
                .collect(),
        ),
        (Layout::Index(_), Some(false)) => Pixels::L(samples),
        (Layout::Index(_), None) => Pixels::P(samples, palette),
        (Layout::Quad(_, Some(_)), _) => Pixels::Rgba(samples),
        _ => Pixels::Rgb(samples),
    };
    Ok(Raster {
        width: i.width,
        height: i.height,
        pixels,
        transparency: Transparency::None,
    })
}

/// Uncompressed rows: one sample per pixel for [`Layout::Index`] (the index or gray value), else
/// RGB (RGBA for layouts with alpha). Rows are `file_bits` per pixel, padded to 4 bytes (PIL's
/// stride, also where the layout reads fewer or more bits per pixel).
fn unpack(
    d: &[u8],
    offset: usize,
    w: usize,
    h: usize,
    layout: Layout,
    file_bits: usize,
    top_down: bool,
) -> Result<Vec<u8>, Fail> {
    let stride = ((w * file_bits + 31) >> 3) & !3;
    let row_need = match layout {
        Layout::Index(b) => (w * b as usize).div_ceil(8),
        Layout::Bgr15 | Layout::Bgr16 => 2 * w,
        Layout::Bgr => 3 * w,
        Layout::Quad(..) => 4 * w,
    };
    if row_need > stride {
        // A layout wider than the file's rows (a gray palette read as 8-bit from 4-bit rows):
        // PIL's raw decoder refuses the negative skip.
        return Err(Fail::Unsupported(
            "BMP whose gray palette makes PIL read rows wider than the file's (PIL refuses it too)"
                .into(),
        ));
    }
    // PIL decodes a row once its samples are there: the last row's padding may be missing.
    let need = h
        .saturating_sub(1)
        .checked_mul(stride)
        .and_then(|n| n.checked_add(offset + row_need))
        .ok_or_else(truncated)?;
    if d.len() < need {
        return Err(truncated());
    }
    let per = match layout {
        Layout::Index(_) => 1,
        Layout::Quad(_, Some(_)) => 4,
        _ => 3,
    };
    let mut out = Vec::with_capacity(w * h * per);
    for y in 0..h {
        let src = if top_down { y } else { h - 1 - y };
        let row = &d[offset + src * stride..offset + src * stride + row_need];
        match layout {
            Layout::Index(b) => {
                let b = b as usize;
                let mask = ((1u16 << b) - 1) as u8;
                for x in 0..w {
                    let bit = x * b;
                    out.push((row[bit / 8] >> (8 - b - bit % 8)) & mask);
                }
            }
            Layout::Bgr15 | Layout::Bgr16 => {
                let (r_shift, g_max) = if layout == Layout::Bgr16 {
                    (11, 63)
                } else {
                    (10, 31)
                };
                for x in 0..w {
                    let p = u16::from_le_bytes([row[2 * x], row[2 * x + 1]]) as u32;
                    out.push((((p >> r_shift) & 31) * 255 / 31) as u8);
                    out.push((((p >> 5) & g_max) * 255 / g_max) as u8);
                    out.push(((p & 31) * 255 / 31) as u8);
                }
            }
            Layout::Bgr => {
                for p in row[..w * 3].chunks_exact(3) {
                    out.extend([p[2], p[1], p[0]]);
                }
            }
            Layout::Quad([r, g, b], a) => {
                for p in row[..w * 4].chunks_exact(4) {
                    out.extend([p[r], p[g], p[b]]);
                    if let Some(a) = a {
                        out.push(p[a]);
                    }
                }
            }
        }
    }
    Ok(out)
}

/// PIL's `BmpRleDecoder`, one index per pixel, rows top to bottom.
fn rle_decode(
    d: &[u8],
    offset: usize,
    w: usize,
    h: usize,
    rle4: bool,
    top_down: bool,
) -> Result<Vec<u8>, Fail> {
    let dest = w * h;
    let mut data: Vec<u8> = Vec::with_capacity(dest);
    let mut pos = offset;
    let mut x = 0usize;
    while data.len() < dest {
        let (Some(&n), Some(&byte)) = (d.get(pos), d.get(pos + 1)) else {
            break;
        };
        pos += 2;
        if n != 0 {
            let n = if x + n as usize > w {
                w.saturating_sub(x)
            } else {
                n as usize
            };
            if rle4 {
                let (first, second) = (byte >> 4, byte & 0x0f);
                data.extend((0..n).map(|k| if k % 2 == 0 { first } else { second }));
            } else {
                data.extend(std::iter::repeat_n(byte, n));
            }
            x += n;
        } else {
            match byte {
                0 => {
                    while !data.len().is_multiple_of(w) {
                        data.push(0);
                    }
                    x = 0;
                }
                1 => break,
                2 => {
                    let (Some(&right), Some(&up)) = (d.get(pos), d.get(pos + 1)) else {
                        break;
                    };
                    pos += 2;
                    let skip = (right as usize + up as usize * w).min(dest - data.len());
                    data.extend(std::iter::repeat_n(0, skip));
                    x = data.len() % w;
                }
                count => {
                    let count_px = (dest - data.len()).min(count as usize);
                    let byte_count = if rle4 { count_px.div_ceil(2) } else { count_px };
                    let end = (pos + byte_count).min(d.len());
                    let read = &d[pos.min(end)..end];
                    pos = end;
                    if rle4 {
                        for (k, &b) in read.iter().enumerate() {
                            data.push(b >> 4);
                            if k * 2 + 1 < count_px {
                                data.push(b & 0x0f);
                            }
                        }
                    } else {
                        data.extend_from_slice(read);
                    }
                    if read.len() < byte_count || data.len() == dest {
                        break;
                    }
                    x += count as usize;
                    if !pos.is_multiple_of(2) {
                        pos += 1;
                    }
                }
            }
        }
    }
    if data.len() < dest {
        return Err(Fail::Corrupt(format!(
            "the RLE data ends after {} of {dest} pixels (PIL refuses it too: not enough image data)",
            data.len()
        )));
    }
    data.truncate(dest);
    if !top_down {
        // PIL's raw unpacking with ystep -1: the first decoded row is the bottom one.
        let mut flipped = Vec::with_capacity(dest);
        for row in data.chunks_exact(w).rev() {
            flipped.extend_from_slice(row);
        }
        data = flipped;
    }
    Ok(data)
}
