//! EXIF orientation the way PIL's `Image.getexif()` finds it: the Orientation tag (0x0112) of IFD0
//! of the embedded TIFF structure, else a `tiff:Orientation` in XMP. `ImageOps.exif_transpose` then
//! acts only on values 2-8; anything else leaves the image as it is.

use super::bytes::{rd16, rd32};

/// Where a format keeps its orientation. Collected by the header parsers, resolved by [`resolve`].
#[derive(Debug, Default, Clone)]
pub(crate) struct OrientationSources {
    /// PIL's `info["exif"]`: a TIFF structure, optionally behind one or two `Exif\0\0` prefixes.
    pub exif: Option<Vec<u8>>,
    /// PNG's `Raw profile type exif` text (hex dump), used when `exif` is absent.
    pub raw_profile: Option<Vec<u8>>,
    /// XMP packet (`XML:com.adobe.xmp` / `xmp`).
    pub xmp: Option<Vec<u8>>,
    /// Orientation read directly from a TIFF file's own IFD (TIFF files).
    pub tiff_ifd: Option<u32>,
}

/// The orientation value PIL would see (1 when absent or unreadable). Values outside 1-8 are
/// reported as 1 because `exif_transpose` ignores them.
pub(crate) fn resolve(src: &OrientationSources) -> u8 {
    let mut value: Option<u32> = src.tiff_ifd;
    if value.is_none() {
        let exif = match (&src.exif, &src.raw_profile) {
            (Some(e), _) => Some(e.clone()),
            (None, Some(raw)) => raw_profile_bytes(raw),
            (None, None) => None,
        };
        if let Some(e) = exif {
            value = orientation_from_exif(&e);
        }
    }
    if value.is_none()
        && let Some(x) = &src.xmp
    {
        value = orientation_from_xmp(x);
    }
    match value {
        Some(v @ 1..=8) => v as u8,
        _ => 1,
    }
}

/// `bytes.fromhex("".join(text.split("\n")[3:]))`: the hex dump after the three header lines.
fn raw_profile_bytes(text: &[u8]) -> Option<Vec<u8>> {
    let mut lines = text.split(|&b| b == b'\n');
    for _ in 0..3 {
        lines.next()?;
    }
    let mut out = Vec::new();
    let mut hi: Option<u8> = None;
    for line in lines {
        for &c in line {
            if c.is_ascii_whitespace() {
                continue;
            }
            let d = (c as char).to_digit(16)? as u8;
            match hi.take() {
                None => hi = Some(d),
                Some(h) => out.push(h << 4 | d),
            }
        }
    }
    if hi.is_some() { None } else { Some(out) }
}

/// Strips `^(Exif\0\0){1,2}` and reads IFD0's Orientation tag from the TIFF structure.
pub(crate) fn orientation_from_exif(data: &[u8]) -> Option<u32> {
    let mut d = data;
    for _ in 0..2 {
        if let Some(rest) = d.strip_prefix(b"Exif\0\0".as_slice()) {
            d = rest;
        }
    }
    let (le, ifd0) = tiff_header(d)?;
    ifd_orientation(d, le, ifd0 as usize)
}

/// Byte order and first-IFD offset of a classic TIFF header.
pub(crate) fn tiff_header(d: &[u8]) -> Option<(bool, u32)> {
    if d.len() < 8 {
        return None;
    }
    let le = match &d[0..4] {
        b"II*\0" => true,
        b"MM\0*" => false,
        _ => return None,
    };
    Some((le, rd32(d, 4, le)?))
}

/// The Orientation entry (0x0112) of the IFD at `off`: its first integer value (BYTE, SHORT,
/// LONG or their signed forms): PIL's tag table gives Orientation a count of 1, so
/// `ImageFileDirectory_v2` keeps `values[0]` whatever the stored count. A tag that is present but
/// unreadable gives `Some(0)` (no transpose, no XMP fallback); absent gives `None`.
pub(crate) fn ifd_orientation(d: &[u8], le: bool, off: usize) -> Option<u32> {
    let n = rd16(d, off, le)? as usize;
    for i in 0..n {
        let e = off + 2 + i * 12;
        let tag = rd16(d, e, le)?;
        if tag != 0x0112 {
            continue;
        }
        let typ = rd16(d, e + 2, le)?;
        let count = rd32(d, e + 4, le)? as usize;
        let size = match typ {
            1 | 6 => 1,
            3 | 8 => 2,
            4 | 9 => 4,
            _ => return Some(0),
        };
        if count == 0 {
            return Some(0);
        }
        // Values up to 4 bytes are stored in the entry, longer ones at an offset.
        let at = if size * count <= 4 {
            e + 8
        } else {
            rd32(d, e + 8, le)? as usize
        };
        let v = match typ {
            1 => d.get(at).map(|&v| v as u32),
            6 => d.get(at).map(|&v| v as i8 as i32 as u32),
            3 => rd16(d, at, le).map(u32::from),
            8 => rd16(d, at, le).map(|v| v as i16 as i32 as u32),
            _ => rd32(d, at, le),
        };
        return Some(v.unwrap_or(0));
    }
    None
}

/// `re.search(r'tiff:Orientation(="|>)([0-9])', xmp)`.
pub(crate) fn orientation_from_xmp(x: &[u8]) -> Option<u32> {
    let key = b"tiff:Orientation";
    let mut start = 0;
    while let Some(p) = find(&x[start..], key) {
        let at = start + p + key.len();
        let rest = &x[at..];
        let digit = if rest.starts_with(b"=\"") {
            rest.get(2)
        } else if rest.starts_with(b">") {
            rest.get(1)
        } else {
            None
        };
        if let Some(&c) = digit
            && c.is_ascii_digit()
        {
            return Some((c - b'0') as u32);
        }
        start = start + p + 1;
    }
    None
}

pub(crate) fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || hay.len() < needle.len() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exif_with(le: bool, typ: u16, value: u16) -> Vec<u8> {
        let mut v = b"Exif\0\0".to_vec();
        let w16 =
            |v: &mut Vec<u8>, x: u16| v.extend(if le { x.to_le_bytes() } else { x.to_be_bytes() });
        let w32 =
            |v: &mut Vec<u8>, x: u32| v.extend(if le { x.to_le_bytes() } else { x.to_be_bytes() });
        v.extend(if le { b"II*\0" } else { b"MM\0*" });
        w32(&mut v, 8);
        w16(&mut v, 1);
        w16(&mut v, 0x0112);
        w16(&mut v, typ);
        w32(&mut v, 1);
        w16(&mut v, value);
        w16(&mut v, 0);
        w32(&mut v, 0);
        v
    }

    #[test]
    fn reads_orientation_both_byte_orders() {
        for le in [true, false] {
            for o in 1..=8u16 {
                let e = exif_with(le, 3, o);
                assert_eq!(orientation_from_exif(&e), Some(o as u32));
                let src = OrientationSources {
                    exif: Some(e),
                    ..Default::default()
                };
                assert_eq!(resolve(&src), o as u8);
            }
        }
    }

    #[test]
    fn out_of_range_and_xmp_fallback() {
        let src = OrientationSources {
            exif: Some(exif_with(true, 3, 9)),
            ..Default::default()
        };
        assert_eq!(resolve(&src), 1);
        let src = OrientationSources {
            xmp: Some(b"<x tiff:Orientation=\"6\"/>".to_vec()),
            ..Default::default()
        };
        assert_eq!(resolve(&src), 6);
        let src = OrientationSources {
            xmp: Some(b"<tiff:Orientation>8</tiff:Orientation>".to_vec()),
            ..Default::default()
        };
        assert_eq!(resolve(&src), 8);
    }

    #[test]
    fn raw_profile_hex() {
        let e = exif_with(false, 3, 3);
        let hex: String = e.iter().map(|b| format!("{b:02x}")).collect();
        let text = format!("\nexif\n{:8}\n{}\n", e.len(), hex);
        let src = OrientationSources {
            raw_profile: Some(text.into_bytes()),
            ..Default::default()
        };
        assert_eq!(resolve(&src), 3);
    }
}
