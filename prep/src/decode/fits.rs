//! FITS as Pillow 13.0.0's `FitsImagePlugin` reads it: 80-byte header cards in 2880-byte
//! blocks, `SIMPLE = T` first; the keywords of every header unit read so far go into one table,
//! and the first unit (primary or extension) whose table gives a size is the image. BITPIX 8,
//! 16, 32, -32 and -64 give modes L, I;16 (big-endian samples), I (big-endian), F (big-endian
//! float, doubles narrowed), rows stored bottom to top. A `BINTABLE` extension with `ZIMAGE = T`
//! and `ZCMPTYPE = 'GZIP_1  '` is PIL's `fits_gzip` decoder: the gzip stream after the table
//! holds 4-byte big-endian values, of which the low `|ZBITPIX| / 8` bytes are kept (for -32,
//! all four: a float).

use super::Fail;
use super::modes::{Pixels, Raster, Transparency};
use std::collections::HashMap;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Raw,
    Gzip,
}

struct Head {
    width: u32,
    height: u32,
    bitpix: i32,
    kind: Kind,
    /// Where the pixel data (for gzip: the gzip stream) starts.
    offset: usize,
}

fn corrupt(what: &str) -> Fail {
    Fail::Corrupt(what.to_string())
}

/// `int(value)` of a header value (Python's int() of the bytes).
fn int(h: &HashMap<Vec<u8>, Vec<u8>>, key: &[u8]) -> Result<i64, Fail> {
    let v = h.get(key).ok_or_else(|| {
        Fail::Corrupt(format!(
            "the FITS header has no {} (PIL: KeyError)",
            String::from_utf8_lossy(key)
        ))
    })?;
    std::str::from_utf8(v)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| {
            Fail::Corrupt(format!(
                "the FITS {} value is not an integer",
                String::from_utf8_lossy(key)
            ))
        })
}

/// `_get_size`.
fn size(h: &HashMap<Vec<u8>, Vec<u8>>, prefix: &[u8]) -> Result<Option<(i64, i64)>, Fail> {
    let k = |s: &[u8]| [prefix, s].concat();
    Ok(match int(h, &k(b"NAXIS"))? {
        0 => None,
        1 => Some((1, int(h, &k(b"NAXIS1"))?)),
        _ => Some((int(h, &k(b"NAXIS1"))?, int(h, &k(b"NAXIS2"))?)),
    })
}

/// What `_parse_headers` finds: width, height, BITPIX, decoder, offset past the header.
type Found = (i64, i64, i32, Kind, i64);

/// `_parse_headers`: `None` when this unit has no image.
fn parse(h: &HashMap<Vec<u8>, Vec<u8>>) -> Result<Option<Found>, Fail> {
    let mut prefix: &[u8] = b"";
    let mut kind = Kind::Raw;
    let mut offset = 0i64;
    if h.get(&b"XTENSION"[..]).map(|v| &v[..]) == Some(b"'BINTABLE'")
        && h.get(&b"ZIMAGE"[..]).map(|v| &v[..]) == Some(b"T")
        && h.get(&b"ZCMPTYPE"[..])
            .ok_or_else(|| corrupt("a compressed FITS table without ZCMPTYPE"))?
            == b"'GZIP_1  '"
    {
        let (w, hh) = size(h, b"")?.unwrap_or((0, 0));
        offset = w
            .checked_mul(hh)
            .and_then(|v| v.checked_mul(int(h, b"BITPIX").ok()? / 8))
            .ok_or_else(|| corrupt("FITS table size out of range"))?;
        prefix = b"Z";
        kind = Kind::Gzip;
    }
    let Some((w, hh)) = size(h, prefix)? else {
        return Ok(None);
    };
    let bitpix = int(h, &[prefix, b"BITPIX"].concat())?;
    match bitpix {
        8 | 16 | 32 | -32 => {}
        -64 if kind == Kind::Raw => {}
        _ => {
            return Err(Fail::Unsupported(format!(
                "FITS BITPIX {bitpix} (PIL: unsupported number of bits)"
            )));
        }
    }
    Ok(Some((w, hh, bitpix as i32, kind, offset)))
}

fn open(d: &[u8]) -> Result<Head, Fail> {
    let mut h: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    let mut in_progress = false;
    let mut found: Option<Found> = None;
    let mut pos = 0usize;
    loop {
        if pos >= d.len() {
            return Err(corrupt("the FITS file ends inside its headers (truncated)"));
        }
        let card = &d[pos..(pos + 80).min(d.len())];
        pos += 80;
        let keyword = card.get(..8).unwrap_or(card).trim_ascii();
        if keyword == b"SIMPLE" || keyword == b"XTENSION" {
            in_progress = true;
        } else if !h.is_empty() && !in_progress {
            break;
        } else if keyword == b"END" {
            pos = pos.min(d.len()).div_ceil(2880) * 2880;
            if found.is_none() {
                found = parse(&h)?;
            }
            in_progress = false;
            continue;
        }
        if found.is_some() {
            continue;
        }
        let rest = card.get(8..).unwrap_or(&[]);
        let mut value = rest
            .split(|&c| c == b'/')
            .next()
            .unwrap_or(&[])
            .trim_ascii();
        if let Some(v) = value.strip_prefix(b"=") {
            value = v.trim_ascii();
        }
        if h.is_empty() && (!keyword.starts_with(b"SIMPLE") || value != b"T") {
            return Err(corrupt("not a FITS file (no SIMPLE = T)"));
        }
        h.insert(keyword.to_vec(), value.to_vec());
    }
    let (w, hh, bitpix, kind, offset) =
        found.ok_or_else(|| Fail::Unsupported("a FITS file without image data".into()))?;
    let offset = usize::try_from(offset.saturating_add(pos as i64 - 80))
        .map_err(|_| corrupt("a negative FITS data offset"))?;
    let dim = |v: i64| u32::try_from(v).map_err(|_| Fail::Corrupt(format!("FITS size {v}")));
    Ok(Head {
        width: dim(w)?,
        height: dim(hh)?,
        bitpix,
        kind,
        offset,
    })
}

pub(crate) fn dims(d: &[u8]) -> Result<(u32, u32), Fail> {
    open(d).map(|h| (h.width, h.height))
}

pub(crate) fn decode(d: &[u8], max_bytes: usize) -> Result<Raster, Fail> {
    let h = open(d)?;
    let (w, hh) = (h.width as usize, h.height as usize);
    let n = w
        .checked_mul(hh)
        .filter(|&n| n.saturating_mul(8) <= max_bytes && n > 0)
        .ok_or(Fail::Limits)?;
    let rest = d.get(h.offset..).unwrap_or(&[]);
    let pixels = match h.kind {
        Kind::Raw => {
            let size = (h.bitpix.unsigned_abs() / 8) as usize;
            let data = rest
                .get(..n * size)
                .ok_or_else(|| corrupt("the file ends before the FITS data does (truncated)"))?;
            // Bottom row first.
            let rows: Vec<&[u8]> = data.chunks_exact(w * size).rev().collect();
            let flat = rows.concat();
            match h.bitpix {
                8 => Pixels::L(flat),
                16 => Pixels::I16(
                    flat.chunks_exact(2)
                        .map(|b| u16::from_be_bytes([b[0], b[1]]))
                        .collect(),
                ),
                32 => Pixels::I32(
                    flat.chunks_exact(4)
                        .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
                        .collect(),
                ),
                -32 => Pixels::F(
                    flat.chunks_exact(4)
                        .map(|b| f32::from_be_bytes([b[0], b[1], b[2], b[3]]))
                        .collect(),
                ),
                _ => Pixels::F(
                    flat.chunks_exact(8)
                        .map(|b| f64::from_be_bytes(b.try_into().unwrap_or([0; 8])) as f32)
                        .collect(),
                ),
            }
        }
        Kind::Gzip => {
            let v = gunzip(rest, n * 4)?;
            if v.len() < n * 4 {
                return Err(corrupt(
                    "the FITS gzip data is smaller than the image (PIL: not enough image data)",
                ));
            }
            let rows: Vec<&[u8]> = v[..n * 4].chunks_exact(w * 4).rev().collect();
            let vals = rows.concat();
            let words = vals.chunks_exact(4).map(|b| [b[0], b[1], b[2], b[3]]);
            match h.bitpix {
                8 => Pixels::L(words.map(|b| b[3]).collect()),
                16 => Pixels::I16(words.map(|b| u16::from_be_bytes([b[2], b[3]])).collect()),
                32 => Pixels::I32(words.map(i32::from_be_bytes).collect()),
                _ => Pixels::F(words.map(f32::from_be_bytes).collect()),
            }
        }
    };
    Ok(Raster {
        width: h.width,
        height: h.height,
        pixels,
        transparency: Transparency::None,
    })
}

/// The first `want` bytes of the gzip stream at the start of `d`, member after member
/// (`gzip.open(fd).read(want)`; the compressed tables hold one member per tile).
fn gunzip(d: &[u8], want: usize) -> Result<Vec<u8>, Fail> {
    use miniz_oxide::inflate::TINFLStatus;
    use miniz_oxide::inflate::core::{DecompressorOxide, decompress, inflate_flags};
    let bad = || corrupt("corrupt FITS gzip data (PIL: Corrupt FITS gzip data)");
    let mut out = vec![0u8; want];
    let (mut at, mut pos) = (0usize, 0usize);
    while at < want {
        let h = d.get(pos..).unwrap_or(&[]);
        if h.is_empty() && pos > 0 {
            // The stream ends: `read` gives what it has.
            break;
        }
        if h.len() < 10 || h[0] != 0x1f || h[1] != 0x8b || h[2] != 8 {
            return Err(corrupt("the FITS gzip data is not a gzip stream"));
        }
        let flags = h[3];
        let mut p = 10usize;
        if flags & 4 != 0 {
            let n = h.get(p..p + 2).ok_or_else(bad)?;
            p += 2 + u16::from_le_bytes([n[0], n[1]]) as usize;
        }
        for bit in [8u8, 16] {
            if flags & bit != 0 {
                let z = h
                    .get(p..)
                    .and_then(|r| r.iter().position(|&c| c == 0))
                    .ok_or_else(bad)?;
                p += z + 1;
            }
        }
        if flags & 2 != 0 {
            p += 2;
        }
        let body = h.get(p..).ok_or_else(bad)?;
        let mut r = Box::<DecompressorOxide>::default();
        let (status, used, written) = decompress(
            &mut r,
            body,
            &mut out,
            at,
            inflate_flags::TINFL_FLAG_USING_NON_WRAPPING_OUTPUT_BUF,
        );
        at += written;
        match status {
            TINFLStatus::Done => pos += p + used + 8,
            TINFLStatus::HasMoreOutput => break,
            _ => {
                return Err(corrupt(
                    "the FITS gzip data is truncated or corrupt (PIL: Truncated/Corrupt FITS \
                     gzip data)",
                ));
            }
        }
    }
    out.truncate(at);
    Ok(out)
}
