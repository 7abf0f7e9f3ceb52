//! BLP (Blizzard mipmaps), the first mipmap, as Pillow 13.0.0's `BlpImagePlugin` reads it. Mode
//! RGBA when the header's alpha flag is set, else RGB; the decoded bytes are handed to the raw
//! decoder in that mode (`set_as_raw`), row after row of the image's width, whatever layout they
//! came in (so a DXT image whose width is not a multiple of 4, or DXT3/DXT5 data without the
//! alpha flag, is read as PIL misreads it). Too few bytes is an error; extra bytes are ignored.
//! - BLP1 JPEG: the shared JPEG header plus the mipmap's data, decoded (`jpeg.rs`, a stream cut
//!   short by a marker filled in as libjpeg fills it, since PIL ignores that warning; PIL forces
//!   a four-component stream's colour space to CMYK, the same as libjpeg infers unless an Adobe
//!   marker says YCCK, which is refused), converted to RGB and read back as BGR (red and blue
//!   swap places, as in PIL).
//! - BLP1 palette (encoding 4 or 5) and BLP2 uncompressed: one byte per pixel into a 256-entry
//!   BGRA palette.
//! - BLP2 DXT1/DXT3/DXT5: the plugin's own Python block decoders (`unpack_565` shifts without
//!   replicating the high bits; thirds and halves by floor division), not `BcnDecode.c`.

use super::Fail;
use super::bytes::le32;
use super::modes::{Pixels, Raster, Transparency};

fn truncated() -> Fail {
    Fail::Corrupt("the BLP data ends early (PIL: Truncated File Read)".into())
}

/// One of the plugin's DXT block decoders: a block onto four row accumulators.
type BlockFn = fn(&[u8], bool, &mut [Vec<u8>; 4]);

fn not_enough() -> Fail {
    Fail::Corrupt("the BLP mipmap is smaller than the image (PIL: not enough image data)".into())
}

struct Head {
    blp2: bool,
    compression: i32,
    encoding: i32,
    alpha: bool,
    alpha_encoding: i8,
    width: u32,
    height: u32,
    /// Where the mipmap offsets and lengths are.
    tables: usize,
}

fn open(d: &[u8]) -> Result<Head, Fail> {
    let short = || Fail::Corrupt("the file ends inside the BLP header (truncated)".into());
    let blp2 = match d.get(..4) {
        Some(b"BLP1") => false,
        Some(b"BLP2") => true,
        _ => return Err(Fail::Corrupt("bad BLP magic".into())),
    };
    let compression = le32(d, 4).ok_or_else(short)? as i32;
    if blp2 {
        let b = d.get(8..20).ok_or_else(short)?;
        Ok(Head {
            blp2,
            compression,
            encoding: b[0] as i8 as i32,
            alpha: b[1] != 0,
            alpha_encoding: b[2] as i8,
            width: le32(d, 12).ok_or_else(short)?,
            height: le32(d, 16).ok_or_else(short)?,
            tables: 20,
        })
    } else {
        Ok(Head {
            blp2,
            compression,
            alpha: le32(d, 8).ok_or_else(short)? != 0,
            width: le32(d, 12).ok_or_else(short)?,
            height: le32(d, 16).ok_or_else(short)?,
            encoding: le32(d, 20).ok_or_else(short)? as i32,
            alpha_encoding: 0,
            tables: 28,
        })
    }
}

pub(crate) fn dims(d: &[u8]) -> Result<(u32, u32), Fail> {
    // `_open` reads the BLP1 encoding and subtype words too.
    let h = open(d)?;
    if !h.blp2 && d.len() < 28 {
        return Err(Fail::Corrupt(
            "the file ends inside the BLP header (truncated)".into(),
        ));
    }
    Ok((h.width, h.height))
}

/// `_safe_read`: exactly `n` bytes from `pos` (none for `n <= 0`).
fn read(d: &[u8], pos: &mut usize, n: i64) -> Result<Vec<u8>, Fail> {
    if n <= 0 {
        return Ok(Vec::new());
    }
    let n = usize::try_from(n).map_err(|_| truncated())?;
    let s = d.get(*pos..pos.saturating_add(n)).ok_or_else(truncated)?;
    *pos += n;
    Ok(s.to_vec())
}

/// `_read_palette` (256 BGRA entries) then `_read_bgra`: one index per byte of the mipmap.
fn paletted(
    d: &[u8],
    pos: &mut usize,
    len: u32,
    alpha: bool,
    from: Option<usize>,
) -> Result<Vec<u8>, Fail> {
    let pal = read(d, pos, 1024)?;
    if let Some(at) = from {
        *pos = at;
    }
    let idx = read(d, pos, len as i64)?;
    let mut out = Vec::with_capacity(idx.len() * 4);
    for &i in &idx {
        let e = &pal[i as usize * 4..i as usize * 4 + 4];
        out.extend([e[2], e[1], e[0]]);
        if alpha {
            out.push(e[3]);
        }
    }
    Ok(out)
}

pub(crate) fn decode(d: &[u8], max_bytes: usize) -> Result<Raster, Fail> {
    let h = open(d)?;
    let (w, hh) = (h.width as usize, h.height as usize);
    let bpp = if h.alpha { 4 } else { 3 };
    let need = w
        .checked_mul(hh)
        .and_then(|n| n.checked_mul(bpp))
        .filter(|&n| n <= max_bytes && n > 0)
        .ok_or(Fail::Limits)?;
    let mut pos = h.tables;
    let offsets = read(d, &mut pos, 64)?;
    let lengths = read(d, &mut pos, 64)?;
    let (off0, len0) = (
        le32(&offsets, 0).unwrap_or(0) as usize,
        le32(&lengths, 0).unwrap_or(0),
    );
    let unsupported = |what: String| Err(Fail::Unsupported(what));
    let data = match (h.blp2, h.compression, h.encoding) {
        (false, 0, _) => {
            let bgr = jpeg(d, &mut pos, off0, len0, max_bytes)?;
            if !h.alpha {
                bgr
            } else {
                // The raw decoder reads 3 bytes a pixel into RGBA, alpha 255.
                let n = w * hh;
                if bgr.len() < n * 3 {
                    return Err(not_enough());
                }
                let mut out = Vec::with_capacity(n * 4);
                for p in bgr.chunks_exact(3).take(n) {
                    out.extend([p[0], p[1], p[2], 255]);
                }
                out
            }
        }
        (false, 1, 4 | 5) => paletted(d, &mut pos, len0, h.alpha, None)?,
        (false, 1, e) => return unsupported(format!("BLP1 encoding {e} (PIL: unsupported)")),
        (false, c, _) => return unsupported(format!("BLP1 compression {c} (PIL: unsupported)")),
        (true, 1, 1) => paletted(d, &mut pos, len0, h.alpha, Some(off0))?,
        (true, 1, 2) => {
            // The palette is read (and must be there) before the blocks.
            read(d, &mut pos, 1024)?;
            pos = off0;
            let (bw, bh) = (w.div_ceil(4), hh.div_ceil(4));
            let (block, decode): (usize, BlockFn) = match h.alpha_encoding {
                0 => (8, dxt1),
                1 => (16, dxt3),
                7 => (16, dxt5),
                a => return unsupported(format!("BLP2 alpha encoding {a} (PIL: unsupported)")),
            };
            let mut out = Vec::new();
            for _ in 0..bh {
                let line = read(d, &mut pos, (bw * block) as i64)?;
                let mut rows: [Vec<u8>; 4] = Default::default();
                for b in line.chunks_exact(block) {
                    decode(b, h.alpha, &mut rows);
                }
                for r in rows {
                    out.extend(r);
                }
            }
            out
        }
        (true, 1, e) => return unsupported(format!("BLP2 encoding {e} (PIL: unknown)")),
        (true, c, _) => return unsupported(format!("BLP2 compression {c} (PIL: unknown)")),
    };
    let mut data = data;
    if data.len() < need {
        return Err(not_enough());
    }
    data.truncate(need);
    Ok(Raster {
        width: h.width,
        height: h.height,
        pixels: if h.alpha {
            Pixels::Rgba(data)
        } else {
            Pixels::Rgb(data)
        },
        transparency: Transparency::None,
    })
}

/// BLP1 JPEG: `_decode_jpeg_stream`. RGB samples, red and blue swapped (`set_as_raw(..., "BGR")`),
/// alpha 255 in an RGBA image.
fn jpeg(
    d: &[u8],
    pos: &mut usize,
    off0: usize,
    len0: u32,
    max_bytes: usize,
) -> Result<Vec<u8>, Fail> {
    let hlen = le32(&read(d, pos, 4)?, 0).unwrap_or(0);
    let mut stream = read(d, pos, hlen as i64)?;
    read(d, pos, off0 as i64 - *pos as i64)?;
    stream.extend(read(d, pos, len0 as i64)?);
    let raster = super::jpeg::decode_accepting_early_marker(&stream, max_bytes)?;
    if matches!(raster.pixels, Pixels::Cmyk(_)) && adobe_ycck(&stream) {
        // PIL forces libjpeg's colour space to CMYK here ("jpegmode" CMYK), which for a YCCK
        // stream skips the YCC conversion `jpeg.rs` makes.
        return Err(Fail::Unsupported(
            "a YCCK (Adobe transform 2) JPEG inside a BLP, which PIL reads as plain CMYK".into(),
        ));
    }
    let mut rgb = raster.to_rgb();
    for p in rgb.chunks_exact_mut(3) {
        p.swap(0, 2);
    }
    Ok(rgb)
}

/// Whether the JPEG's Adobe APP14 segment says YCCK (transform 2).
fn adobe_ycck(j: &[u8]) -> bool {
    let mut pos = 2;
    while let (Some(&ff), Some(&m)) = (j.get(pos), j.get(pos + 1)) {
        if ff != 0xff || m == 0xda || m == 0xd9 {
            return false;
        }
        let len = j
            .get(pos + 2..pos + 4)
            .map_or(0, |b| u16::from_be_bytes([b[0], b[1]]) as usize);
        let seg = j.get(pos + 4..pos + 2 + len).unwrap_or(&[]);
        if m == 0xee && seg.starts_with(b"Adobe") && seg.get(11) == Some(&2) {
            return true;
        }
        pos += 2 + len.max(2);
    }
    false
}

/// `unpack_565`.
fn rgb565(c: u16) -> [u32; 3] {
    let c = c as u32;
    [(c >> 11 & 0x1f) << 3, (c >> 5 & 0x3f) << 2, (c & 0x1f) << 3]
}

/// The four colours of the plugin's DXT colour block (`four`: always the 4-colour mode).
fn colours(b: &[u8], four: bool) -> [[u8; 4]; 4] {
    let (c0, c1) = (
        u16::from_le_bytes([b[0], b[1]]),
        u16::from_le_bytes([b[2], b[3]]),
    );
    let (p, q) = (rgb565(c0), rgb565(c1));
    let mix = |a: [u32; 3], b: [u32; 3]| {
        [
            ((2 * a[0] + b[0]) / 3) as u8,
            ((2 * a[1] + b[1]) / 3) as u8,
            ((2 * a[2] + b[2]) / 3) as u8,
            255,
        ]
    };
    let solid = |a: [u32; 3]| [a[0] as u8, a[1] as u8, a[2] as u8, 255];
    if four || c0 > c1 {
        [solid(p), solid(q), mix(p, q), mix(q, p)]
    } else {
        let half = [
            ((p[0] + q[0]) / 2) as u8,
            ((p[1] + q[1]) / 2) as u8,
            ((p[2] + q[2]) / 2) as u8,
            255,
        ];
        [solid(p), solid(q), half, [0, 0, 0, 0]]
    }
}

/// `decode_dxt1`: RGB, or RGBA with `alpha`.
fn dxt1(b: &[u8], alpha: bool, rows: &mut [Vec<u8>; 4]) {
    let c = colours(b, false);
    let bits = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    for (j, row) in rows.iter_mut().enumerate() {
        for i in 0..4 {
            let p = c[(bits >> (2 * (4 * j + i)) & 3) as usize];
            row.extend_from_slice(if alpha { &p } else { &p[..3] });
        }
    }
}

/// `decode_dxt3`: RGBA, 4-bit alpha times 17.
fn dxt3(b: &[u8], _alpha: bool, rows: &mut [Vec<u8>; 4]) {
    let c = colours(&b[8..], true);
    let code = u32::from_le_bytes([b[12], b[13], b[14], b[15]]);
    for (j, row) in rows.iter_mut().enumerate() {
        for i in 0..4 {
            let k = 4 * j + i;
            let a = if i % 2 == 0 {
                b[k / 2] & 0xf
            } else {
                b[k / 2] >> 4
            };
            let p = c[(code >> (2 * k) & 3) as usize];
            row.extend([p[0], p[1], p[2], a * 17]);
        }
    }
}

/// `decode_dxt5`: RGBA, interpolated 3-bit alpha.
fn dxt5(b: &[u8], _alpha: bool, rows: &mut [Vec<u8>; 4]) {
    let (a0, a1) = (b[0] as u32, b[1] as u32);
    let code2 = b[2] as u32 | (b[3] as u32) << 8;
    let code1 = b[4] as u32 | (b[5] as u32) << 8 | (b[6] as u32) << 16 | (b[7] as u32) << 24;
    let c = colours(&b[8..], true);
    let code = u32::from_le_bytes([b[12], b[13], b[14], b[15]]);
    for (j, row) in rows.iter_mut().enumerate() {
        for i in 0..4 {
            let k = 4 * j + i;
            let s = 3 * k;
            let ac = if s <= 12 {
                code2 >> s & 7
            } else if s == 15 {
                code2 >> 15 | (code1 << 1 & 6)
            } else {
                code1 >> (s - 16) & 7
            };
            let a = match ac {
                0 => a0,
                1 => a1,
                _ if a0 > a1 => ((8 - ac) * a0 + (ac - 1) * a1) / 7,
                6 => 0,
                7 => 255,
                _ => ((6 - ac) * a0 + (ac - 1) * a1) / 5,
            };
            let p = c[(code >> (2 * k) & 3) as usize];
            row.extend([p[0], p[1], p[2], a as u8]);
        }
    }
}
