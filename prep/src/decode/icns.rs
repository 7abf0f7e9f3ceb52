//! ICNS (macOS icons) as Pillow 13.0.0's `IcnsImagePlugin` reads it: the entries indexed by
//! type (a later entry of a type replaces an earlier one), the largest `(width, height, scale)`
//! present taken as the image, and every entry of that size read in `IcnsFile.SIZES` order:
//! - PNG and JPEG 2000 entries (`ic07`...`ic14`, `icp4`-`icp6`) are the image as they are
//!   (`png.rs`, `jpeg2k.rs`; a PNG is read from its offset to the end of the file, as PIL hands
//!   it the file object; a JPEG 2000 entry is its own bytes, converted to RGBA by PIL: for the
//!   RGB conversion that follows, the same pixels). The entry's own transparency key does not
//!   survive (`load_image` converts the ICNS image, whose `info` holds none).
//! - Otherwise the RGB entry (`it32`, `ih32`, `il32`, `is32`: raw, or PackBits-like runs per
//!   band) with the 8-bit mask (`t8mk`, `h8mk`, `l8mk`, `s8mk`) as alpha when there is one.
//!
//! The size is the chosen entry's: for a PNG or JPEG 2000 entry, the one its header gives when
//! it passes the plugin's size check (`IcnsImageFile.size`'s setter), so the decode budget sees
//! what PIL's `_decompression_bomb_check` sees.

use super::Fail;
use super::bytes::be32;
use super::modes::{Pixels, Raster, Transparency};

type Size = (u32, u32, u32);
/// An entry type and its reader.
type Entry = (&'static [u8; 4], Reader);
/// A reader and its entry's (start, length).
type Found = (Reader, usize, i64);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reader {
    /// `read_png_or_jpeg2000`.
    PngOrJp2,
    /// `read_32t`: a 4-byte zero signature, then `read_32`.
    Rgb32t,
    /// `read_32`.
    Rgb32,
    /// `read_mk`.
    Mask,
}

/// `IcnsFile.SIZES`.
const SIZES: &[(Size, &[Entry])] = &[
    ((512, 512, 2), &[(b"ic10", Reader::PngOrJp2)]),
    ((512, 512, 1), &[(b"ic09", Reader::PngOrJp2)]),
    ((256, 256, 2), &[(b"ic14", Reader::PngOrJp2)]),
    ((256, 256, 1), &[(b"ic08", Reader::PngOrJp2)]),
    ((128, 128, 2), &[(b"ic13", Reader::PngOrJp2)]),
    (
        (128, 128, 1),
        &[
            (b"ic07", Reader::PngOrJp2),
            (b"it32", Reader::Rgb32t),
            (b"t8mk", Reader::Mask),
        ],
    ),
    ((64, 64, 1), &[(b"icp6", Reader::PngOrJp2)]),
    ((32, 32, 2), &[(b"ic12", Reader::PngOrJp2)]),
    (
        (48, 48, 1),
        &[(b"ih32", Reader::Rgb32), (b"h8mk", Reader::Mask)],
    ),
    (
        (32, 32, 1),
        &[
            (b"icp5", Reader::PngOrJp2),
            (b"il32", Reader::Rgb32),
            (b"l8mk", Reader::Mask),
        ],
    ),
    ((16, 16, 2), &[(b"ic11", Reader::PngOrJp2)]),
    (
        (16, 16, 1),
        &[
            (b"icp4", Reader::PngOrJp2),
            (b"is32", Reader::Rgb32),
            (b"s8mk", Reader::Mask),
        ],
    ),
];

fn bad(msg: &str) -> Fail {
    Fail::Corrupt(format!("{msg} (PIL fails on it too)"))
}

/// `IcnsFile.__init__`: entry type -> (start, length); later entries of a type win.
fn entries(d: &[u8]) -> Result<Vec<([u8; 4], usize, i64)>, Fail> {
    if !d.starts_with(b"icns") {
        return Err(bad("not an icns file"));
    }
    let filesize = be32(d, 4).ok_or_else(|| bad("the ICNS header is truncated"))? as i64;
    let mut out: Vec<([u8; 4], usize, i64)> = Vec::new();
    let mut i: i64 = 8;
    while i < filesize {
        let at = i as usize;
        let (sig, block) = match (d.get(at..at + 4), be32(d, at + 4)) {
            (Some(s), Some(b)) => (<[u8; 4]>::try_from(s).unwrap_or_default(), b as i64),
            _ => return Err(bad("the ICNS file ends inside an entry header")),
        };
        if block <= 0 {
            return Err(bad("invalid ICNS block header"));
        }
        i += 8;
        let len = block - 8;
        match out.iter_mut().find(|e| e.0 == sig) {
            Some(e) => *e = (sig, i as usize, len),
            None => out.push((sig, i as usize, len)),
        }
        i += len;
    }
    Ok(out)
}

/// `bestsize` and the entries of that size, in `SIZES` order.
fn best(d: &[u8]) -> Result<(Size, Vec<Found>), Fail> {
    let dct = entries(d)?;
    let has = |code: &[u8; 4]| dct.iter().find(|e| &e.0 == code);
    let size = SIZES
        .iter()
        .filter(|(_, fmts)| fmts.iter().any(|(c, _)| has(c).is_some()))
        .map(|(s, _)| *s)
        .max()
        .ok_or_else(|| bad("no 32-bit icon resources found"))?;
    let fmts = SIZES
        .iter()
        .find(|(s, _)| *s == size)
        .map_or(&[][..], |(_, f)| *f);
    let readers = fmts
        .iter()
        .filter_map(|(c, r)| has(c).map(|e| (*r, e.1, e.2)))
        .collect();
    Ok((size, readers))
}

/// What a PNG or JPEG 2000 entry starts with.
enum Embedded<'a> {
    /// From the entry to the end of the file.
    Png(&'a [u8]),
    /// The entry's bytes.
    Jp2(&'a [u8]),
}

fn embedded(d: &[u8], start: usize, len: i64) -> Result<Embedded<'_>, Fail> {
    let rest = d.get(start..).unwrap_or(&[]);
    let sig = &rest[..rest.len().min(12)];
    if sig.starts_with(b"\x89PNG\r\n\x1a\n") {
        Ok(Embedded::Png(rest))
    } else if sig.starts_with(b"\xff\x4f\xff\x51")
        || sig.starts_with(b"\x0d\x0a\x87\x0a")
        || sig == b"\x00\x00\x00\x0cjP  \x0d\x0a\x87\x0a"
    {
        // `fobj.read(length)`: a negative length reads to the end.
        let n = if len < 0 { rest.len() } else { len as usize };
        Ok(Embedded::Jp2(&rest[..n.min(rest.len())]))
    } else {
        Err(bad("unsupported icon subimage format"))
    }
}

/// The `IcnsImageFile.size` setter: `value` is allowed when some listed size, scaled, matches.
fn size_allowed(d: &[u8], (w, h): (u32, u32)) -> Result<bool, Fail> {
    if w == 0 || h == 0 {
        return Ok(false);
    }
    let dct = entries(d)?;
    Ok(SIZES
        .iter()
        .filter(|(_, fmts)| fmts.iter().any(|(c, _)| dct.iter().any(|e| &e.0 == *c)))
        .any(|((sw, sh, s), _)| {
            let (sw, sh) = ((sw * s) as f64, (sh * s) as f64);
            let scale = (sw as u64 / w as u64) as f64;
            sh / h as f64 == scale
        }))
}

/// The image size: the embedded image's for PNG / JPEG 2000, else the chosen size.
pub(crate) fn dims(d: &[u8]) -> Result<(u32, u32), Fail> {
    let (size, readers) = best(d)?;
    if let Some(&(_, start, len)) = readers.iter().find(|r| r.0 == Reader::PngOrJp2) {
        return match embedded(d, start, len)? {
            Embedded::Png(p) => {
                let h = super::header::png(p)?;
                Ok((h.width, h.height))
            }
            Embedded::Jp2(j) => super::jpeg2k::dims(j),
        };
    }
    Ok((size.0 * size.2, size.1 * size.2))
}

/// `read_32`: three bands, raw when the entry is exactly their size, else runs; reading does
/// not stop at the entry's end.
fn read_32(d: &[u8], start: usize, len: i64, w: usize, h: usize) -> Result<Vec<u8>, Fail> {
    let n = w * h;
    if len == (n * 3) as i64 {
        return d
            .get(start..start + 3 * n)
            .map(|b| b.to_vec())
            .ok_or_else(|| bad("not enough image data in an ICNS RGB entry"));
    }
    let mut rgb = vec![0u8; 3 * n];
    let mut pos = start;
    for band in 0..3 {
        let mut data: Vec<u8> = Vec::with_capacity(n);
        let mut left = n as i64;
        while left > 0 {
            let Some(&b) = d.get(pos) else { break };
            pos += 1;
            let count;
            if b & 0x80 != 0 {
                count = b as usize - 125;
                if let Some(&v) = d.get(pos) {
                    data.extend(std::iter::repeat_n(v, count));
                }
                pos += 1;
            } else {
                count = b as usize + 1;
                let end = (pos + count).min(d.len());
                data.extend_from_slice(d.get(pos..end).unwrap_or(&[]));
                pos += count;
            }
            left -= count as i64;
        }
        if left != 0 {
            return Err(bad(&format!("error reading ICNS channel [{left} left]")));
        }
        if data.len() < n {
            return Err(bad("not enough image data in an ICNS RGB entry"));
        }
        for (i, &v) in data[..n].iter().enumerate() {
            rgb[3 * i + band] = v;
        }
    }
    Ok(rgb)
}

pub(crate) fn decode(d: &[u8], max_bytes: usize) -> Result<Raster, Fail> {
    let (size, readers) = best(d)?;
    let (w, h) = ((size.0 * size.2) as usize, (size.1 * size.2) as usize);
    let mut whole: Option<Raster> = None;
    let mut rgb: Option<Vec<u8>> = None;
    let mut mask: Option<Vec<u8>> = None;
    for (reader, start, len) in readers {
        match reader {
            Reader::PngOrJp2 => {
                let mut r = match embedded(d, start, len)? {
                    Embedded::Png(p) => super::png::decode(p, max_bytes)?,
                    Embedded::Jp2(j) => super::jpeg2k::decode(j, max_bytes)?,
                };
                r.transparency = Transparency::None;
                // A PNG palette's tRNS alphas live in the entry's `info`, not in its palette:
                // gone with it (`convert("RGBA")` of the ICNS image gives opaque pixels).
                if let Pixels::P(_, pal) = &mut r.pixels {
                    pal.iter_mut().for_each(|e| e[3] = 255);
                }
                whole = Some(r);
            }
            Reader::Rgb32t => {
                if d.get(start..start + 4) != Some(&[0, 0, 0, 0]) {
                    return Err(bad("unknown it32 signature, expecting 0x00000000"));
                }
                rgb = Some(read_32(d, start + 4, len - 4, w, h)?);
            }
            Reader::Rgb32 => rgb = Some(read_32(d, start, len, w, h)?),
            Reader::Mask => {
                let m = d
                    .get(start..start + w * h)
                    .ok_or_else(|| bad("not enough image data in an ICNS mask"))?;
                mask = Some(m.to_vec());
            }
        }
    }
    if let Some(r) = whole {
        if !size_allowed(d, (r.width, r.height))? {
            return Err(bad("the embedded image is not one of the allowed sizes"));
        }
        return Ok(r);
    }
    let rgb = rgb.ok_or_else(|| bad("the chosen ICNS size has a mask but no RGB entry"))?;
    let pixels = match mask {
        Some(m) => Pixels::Rgba(
            rgb.chunks_exact(3)
                .zip(m)
                .flat_map(|(p, a)| [p[0], p[1], p[2], a])
                .collect(),
        ),
        None => Pixels::Rgb(rgb),
    };
    Ok(Raster {
        width: w as u32,
        height: h as u32,
        pixels,
        transparency: Transparency::None,
    })
}
