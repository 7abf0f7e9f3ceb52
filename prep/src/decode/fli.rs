//! FLI/FLC (Autodesk Animator), the first frame, as Pillow 13.0.0's `FliImagePlugin` and
//! `FliDecode.c` read it: mode P, its palette a gray ramp replaced entry by entry by the first
//! frame's first COLOR chunk (type 4: 8-bit values, type 11: 6-bit values shifted left by 2), the
//! frame at offset 128 decoded over a black (index 0) image by its chunks: SS2 word deltas (7),
//! LC byte deltas (12), BLACK (13), BRUN (15), COPY (16); COLOR (4, 11) and PSTAMP (18) are
//! skipped. Bounds and errors follow the C decoder: a frame shorter than its size is truncated,
//! data running past the read buffer is an overrun, an unknown chunk (or a prefix chunk where
//! the frame should be) is refused, as PIL refuses it.

use super::Fail;
use super::bytes;
use super::modes::{Pixels, Raster, Transparency, blank_palette};

fn le16(d: &[u8], at: usize) -> Option<usize> {
    bytes::le16(d, at).map(usize::from)
}
fn le32(d: &[u8], at: usize) -> Option<usize> {
    bytes::le32(d, at).map(|v| v as usize)
}

fn bad(what: &str) -> Fail {
    Fail::Corrupt(what.to_string())
}

fn overrun() -> Fail {
    Fail::Corrupt("the FLI frame data runs past its end (PIL: buffer overrun)".into())
}

/// `_open`'s header checks; the size.
pub(crate) fn dims(d: &[u8]) -> Result<(u32, u32), Fail> {
    let s = d
        .get(..128)
        .ok_or_else(|| bad("the file ends inside the FLI header (truncated)"))?;
    let zero = |r: std::ops::Range<usize>| s[r].iter().all(|&b| b == 0);
    let magic = le16(s, 4).unwrap_or(0);
    if !matches!(magic, 0xAF11 | 0xAF12)
        || !matches!(le16(s, 14), Some(0 | 3))
        || !zero(20..22)
        || !zero(42..80)
        || !zero(88..128)
    {
        return Err(bad("not an FLI/FLC file (PIL: cannot identify it)"));
    }
    Ok((
        le16(s, 8).unwrap_or(0) as u32,
        le16(s, 10).unwrap_or(0) as u32,
    ))
}

/// The palette `_open` builds: a gray ramp, then the first COLOR chunk of the first frame
/// (after a prefix chunk, if any).
fn palette(d: &[u8]) -> Result<Box<[[u8; 4]; 256]>, Fail> {
    let mut pal = blank_palette();
    for (i, e) in pal.iter_mut().enumerate() {
        *e = [i as u8, i as u8, i as u8, 255];
    }
    let short = || bad("the file ends inside the first FLI frame header (truncated)");
    let mut at = 128;
    if le16(d, at + 4).ok_or_else(short)? == 0xF100 {
        at = at.saturating_add(le32(d, at).ok_or_else(short)?);
    }
    if le16(d, at + 4).ok_or_else(short)? != 0xF1FA {
        return Ok(pal);
    }
    let n = le16(d, at + 6).ok_or_else(short)?;
    let mut pos = at + 16;
    let mut size: Option<usize> = None;
    for _ in 0..n {
        if let Some(s) = size {
            pos = pos.saturating_add(s).saturating_sub(6);
        }
        let kind = le16(d, pos + 4).ok_or_else(short)?;
        if kind == 4 || kind == 11 {
            let shift = if kind == 11 { 2 } else { 0 };
            read_palette(d, pos + 6, shift, &mut pal)?;
            break;
        }
        let s = le32(d, pos).ok_or_else(short)?;
        if s == 0 {
            break;
        }
        size = Some(s);
        pos += 6;
    }
    Ok(pal)
}

/// `_palette`: packets of (skip, count (0: 256), count RGB triples).
fn read_palette(
    d: &[u8],
    mut pos: usize,
    shift: u32,
    pal: &mut [[u8; 4]; 256],
) -> Result<(), Fail> {
    let short = || bad("the file ends inside the FLI palette (truncated)");
    let packets = le16(d, pos).ok_or_else(short)?;
    pos += 2;
    let mut i = 0usize;
    for _ in 0..packets {
        let s = d.get(pos..pos + 2).ok_or_else(short)?;
        pos += 2;
        i += s[0] as usize;
        let n = if s[1] == 0 { 256 } else { s[1] as usize };
        if i + n > 256 {
            return Err(bad("too much FLI palette data (PIL refuses it too)"));
        }
        let rgb = &d[pos.min(d.len())..(pos + n * 3).min(d.len())];
        pos += n * 3;
        if !rgb.len().is_multiple_of(3) {
            return Err(short());
        }
        for c in rgb.chunks_exact(3) {
            let v = [
                (c[0] as u32) << shift,
                (c[1] as u32) << shift,
                (c[2] as u32) << shift,
            ];
            if v.iter().any(|&x| x > 255) {
                return Err(bad("FLI palette data out of range (PIL refuses it too)"));
            }
            pal[i] = [v[0] as u8, v[1] as u8, v[2] as u8, 255];
            i += 1;
        }
    }
    Ok(())
}

pub(crate) fn decode(d: &[u8], max_bytes: usize) -> Result<Raster, Fail> {
    let (w, h) = dims(d)?;
    let pal = palette(d)?;
    let (xs, ys) = (w as usize, h as usize);
    let n = xs
        .checked_mul(ys)
        .filter(|&n| n <= max_bytes)
        .ok_or(Fail::Limits)?;
    let framesize = le32(d, 128)
        .ok_or_else(|| bad("the file ends before the first FLI frame (missing frame size)"))?;
    // PIL reads `framesize` bytes at a time and the decoder waits for a whole frame (less one
    // pad byte); the file ending first is a truncated image.
    let rest = &d[128..];
    let b = &rest[..rest.len().min(framesize)];
    if framesize == 0 || b.len() + b.len() % 2 < framesize {
        return Err(bad(
            "the file ends inside the first FLI frame (PIL: image file is truncated)",
        ));
    }
    let mut img = vec![0u8; n];
    frame(b, &mut img, xs, ys)?;
    Ok(Raster {
        width: w,
        height: h,
        pixels: Pixels::P(img, pal),
        transparency: Transparency::None,
    })
}

/// `ImagingFliDecode` on the buffer `b` (the frame, as far as PIL has read it).
fn frame(b: &[u8], img: &mut [u8], xs: usize, ys: usize) -> Result<(), Fail> {
    if b.len() < 8 {
        return Err(overrun());
    }
    if le16(b, 4) != Some(0xF1FA) {
        return Err(bad(
            "the first FLI frame is not a frame chunk (PIL: unrecognized data stream contents)",
        ));
    }
    let chunks = le16(b, 6).unwrap_or(0);
    let mut ptr = 16usize;
    let mut bytes = b.len() as i64 - 16;
    for _ in 0..chunks {
        if bytes < 10 {
            return Err(overrun());
        }
        // Everything up to `end` is readable (the C decoder's `ptr + bytes`).
        let end = ptr + bytes as usize;
        let at = |i: usize| -> u8 { if i < end { b[i] } else { 0 } };
        let oob = |dp: usize, off: usize| dp + off > end;
        let data = ptr + 6;
        match le16(b, ptr + 4).unwrap_or(0) {
            4 | 11 | 18 => {}
            7 => ss2(b, data, end, img, xs, ys)?,
            12 => {
                let mut dp = data;
                let mut y = at(dp) as usize | (at(dp + 1) as usize) << 8;
                let ymax = y + (at(dp + 2) as usize | (at(dp + 3) as usize) << 8);
                dp += 4;
                while y < ymax && y < ys {
                    let row = &mut img[y * xs..(y + 1) * xs];
                    if oob(dp, 1) {
                        return Err(overrun());
                    }
                    let packets = at(dp);
                    dp += 1;
                    let mut x = 0usize;
                    let mut p = 0;
                    while p < packets {
                        if oob(dp, 2) {
                            return Err(overrun());
                        }
                        x += at(dp) as usize;
                        let c = at(dp + 1);
                        let i;
                        if c & 0x80 != 0 {
                            i = 256 - c as usize;
                            if x + i > xs {
                                break;
                            }
                            if oob(dp, 3) {
                                return Err(overrun());
                            }
                            row[x..x + i].fill(at(dp + 2));
                            dp += 3;
                        } else {
                            i = c as usize;
                            if x + i > xs {
                                break;
                            }
                            if oob(dp, 2 + i) {
                                return Err(overrun());
                            }
                            row[x..x + i].copy_from_slice(&b[dp + 2..dp + 2 + i]);
                            dp += 2 + i;
                        }
                        p += 1;
                        x += i;
                    }
                    if p < packets {
                        break;
                    }
                    y += 1;
                }
                if y < ymax {
                    return Err(overrun());
                }
            }
            13 => img.fill(0),
            15 => {
                let mut dp = data;
                for row in img.chunks_exact_mut(xs) {
                    dp += 1;
                    let mut x = 0usize;
                    while x < xs {
                        if oob(dp, 2) {
                            return Err(overrun());
                        }
                        let c = at(dp);
                        if c & 0x80 != 0 {
                            let i = 256 - c as usize;
                            if x + i > xs {
                                break;
                            }
                            if oob(dp, i + 1) {
                                return Err(overrun());
                            }
                            row[x..x + i].copy_from_slice(&b[dp + 1..dp + 1 + i]);
                            dp += i + 1;
                            x += i;
                        } else {
                            let i = c as usize;
                            if x + i > xs {
                                break;
                            }
                            row[x..x + i].fill(at(dp + 1));
                            dp += 2;
                            x += i;
                        }
                    }
                    if x != xs {
                        return Err(overrun());
                    }
                }
            }
            16 => {
                if xs * ys > i32::MAX as usize {
                    return Err(overrun());
                }
                if data + xs * ys > end {
                    // PIL then goes on reading the file past the frame as more of it.
                    return Err(bad(
                        "an FLI COPY chunk larger than its frame (PIL: image file is truncated)",
                    ));
                }
                img.copy_from_slice(&b[data..data + xs * ys]);
            }
            _ => {
                return Err(bad(
                    "an unknown FLI chunk type (PIL: unrecognized data stream contents)",
                ));
            }
        }
        let advance = le32(b, ptr).unwrap_or(0);
        if advance == 0 {
            return Err(bad("an FLI chunk of size 0 (PIL: broken data stream)"));
        }
        if advance as i64 > bytes {
            return Err(overrun());
        }
        ptr += advance;
        bytes -= advance as i64;
    }
    Ok(())
}

/// The SS2 (word delta) chunk.
fn ss2(
    b: &[u8],
    mut dp: usize,
    end: usize,
    img: &mut [u8],
    xs: usize,
    ys: usize,
) -> Result<(), Fail> {
    let at = |i: usize| -> u8 { if i < end { b[i] } else { 0 } };
    let oob = |dp: usize, off: usize| dp + off > end;
    let w16 = |i: usize| at(i) as usize | (at(i + 1) as usize) << 8;
    let lines = w16(dp);
    dp += 2;
    let (mut l, mut y) = (0usize, 0usize);
    while l < lines && y < ys {
        if oob(dp, 2) {
            return Err(overrun());
        }
        let mut packets = w16(dp);
        dp += 2;
        while packets & 0x8000 != 0 {
            if packets & 0x4000 != 0 {
                y += 65536 - packets;
                if y >= ys {
                    return Err(overrun());
                }
            } else if xs > 0 {
                img[y * xs + xs - 1] = packets as u8;
            }
            if oob(dp, 2) {
                return Err(overrun());
            }
            packets = w16(dp);
            dp += 2;
        }
        let row = &mut img[y * xs..(y + 1) * xs];
        let mut x = 0usize;
        let mut p = 0;
        while p < packets {
            if oob(dp, 2) {
                return Err(overrun());
            }
            x += at(dp) as usize;
            let c = at(dp + 1);
            if c >= 128 {
                if oob(dp, 4) {
                    return Err(overrun());
                }
                let i = 256 - c as usize;
                if x + 2 * i > xs {
                    break;
                }
                for _ in 0..i {
                    row[x] = at(dp + 2);
                    row[x + 1] = at(dp + 3);
                    x += 2;
                }
                dp += 4;
            } else {
                let i = 2 * c as usize;
                if x + i > xs {
                    break;
                }
                if oob(dp, 2 + i) {
                    return Err(overrun());
                }
                row[x..x + i].copy_from_slice(&b[dp + 2..dp + 2 + i]);
                dp += 2 + i;
                x += i;
            }
            p += 1;
        }
        if p < packets {
            break;
        }
        l += 1;
        y += 1;
    }
    if l < lines {
        return Err(overrun());
    }
    Ok(())
}
