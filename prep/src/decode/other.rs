//! Formats PIL opens: recognised from their leading bytes so that the
//! refusal names the format ("unsupported format: DDS") instead of "not a supported image"; QOI,
//! PPM (P1-P6), TGA and ICO found here are decoded (`header::sniff`, `foreign.rs`), and so are
//! JPEG 2000 and ICNS, which `header::sniff` recognises before this list, and PFM, BLP, FITS,
//! FTEX, FLI, GBR, McIdas, PCD, PIXAR and XVThumb (their own readers).
//!
//! The tests are Pillow 13.0.0's plugin `_accept` functions (and, for the plugins without one,
//! the first checks of their `_open`: IM, PCD, TGA), tried after the formats prep reads. PIL tries
//! its plugins in turn and falls through to the next when one fails, so a damaged file may be
//! named here after the plugin whose bytes it starts with while PIL ends up calling it something
//! else; either way the error names a format, and nothing is decoded.

use super::bytes::{be16, be32, le16, le32};

/// PIL's `Image.format` for a file of a format prep does not read, when its leading bytes say so.
pub(crate) fn pil_format(d: &[u8]) -> Option<&'static str> {
    let starts = |p: &[u8]| d.starts_with(p);
    if d.get(4..8) == Some(b"ftyp")
        && matches!(d.get(8..12), Some(b"avif" | b"avis" | b"mif1" | b"msf1"))
    {
        return Some("AVIF");
    }
    // ICO / CUR with at least one entry (with none PIL's plugins fail, and a TGA header can
    // start with the same four bytes).
    if (starts(b"\0\0\x01\0") || starts(b"\0\0\x02\0")) && le16(d, 4).is_some_and(|n| n > 0) {
        return Some(if d[2] == 1 { "ICO" } else { "CUR" });
    }
    let magic: &[(&[u8], &str)] = &[
        (b"BLP1", "BLP"),
        (b"BLP2", "BLP"),
        (b"BUFR", "BUFR"),
        (b"ZCZC", "BUFR"),
        (b"DDS ", "DDS"),
        (b"%!PS", "EPS"),
        (b"SIMPLE", "FITS"),
        (b"FTEX", "FTEX"),
        (b"\x89HDF\r\n\x1a\n", "HDF5"),
        (b"\0\0\0\0\0\0\0\x04", "MCIDAS"),
        (b"DanM", "MSP"),
        (b"LinS", "MSP"),
        (b"\x80\xe8\0\0", "PIXAR"),
        (b"8BPS", "PSD"),
        (b"qoif", "QOI"),
        (b"\xd7\xcd\xc6\x9a\0\0", "WMF"),
        (b"\x01\0\0\0", "WMF"),
        (b"/* XPM */", "XPM"),
        (b"#define", "XBM"),
        (b"\n#define", "XBM"),
        (b"P7 332", "XVThumb"),
        (b"Image type:", "IM"),
    ];
    if let Some((_, name)) = magic.iter().find(|(m, _)| starts(m)) {
        return Some(name);
    }
    if le32(d, 0) == Some(0x3ADE68B1) {
        return Some("DCX");
    }
    if le32(d, 0) == Some(0xC6D3D0C5) {
        return Some("EPS");
    }
    if matches!(le16(d, 4), Some(0xAF11 | 0xAF12)) && matches!(le16(d, 14), Some(0 | 3)) {
        return Some("FLI");
    }
    // GBR's `_accept` also takes a Sun raster 1 or 2 pixels wide; its `_open` then refuses it
    // unless the Sun header's data length reads as a GBR colour depth (1 or 4).
    if be32(d, 0) == Some(0x59A66A95) && !matches!(be32(d, 16), Some(1 | 4)) {
        return Some("SUN");
    }
    if be32(d, 0).is_some_and(|n| n >= 20) && matches!(be32(d, 4), Some(1 | 2)) {
        return Some("GBR");
    }
    if starts(b"GRIB") && d.get(7) == Some(&1) {
        return Some("GRIB");
    }
    if d.len() >= 2 && d[0] == 10 && matches!(d[1], 0 | 2 | 3 | 5) {
        return Some("PCX");
    }
    if d.len() >= 2 && d[0] == b'P' && matches!(d[1], b'f' | b'F') {
        // Float PNM (PIL's format name is still "PPM").
        return Some("PFM");
    }
    if d.len() >= 2 && d[0] == b'P' && b"0123456fy".contains(&d[1]) {
        return Some("PPM");
    }
    if be16(d, 0) == Some(474) {
        return Some("SGI");
    }
    if be32(d, 0) == Some(0x59A66A95) {
        return Some("SUN");
    }
    if starts(b"/*") {
        return Some("XBM");
    }
    if d.get(2048..2052) == Some(b"PCD_") {
        return Some("PCD");
    }
    if matches!(le32(d, 0), Some(12 | 40 | 52 | 56 | 64 | 108 | 124)) {
        return Some("DIB");
    }
    // TgaImagePlugin._open: colour map type 0 or 1, a known image type, a positive size, a
    // known depth.
    if d.len() >= 18
        && d[1] <= 1
        && matches!(d[2], 1 | 2 | 3 | 9 | 10 | 11)
        && le16(d, 12).is_some_and(|w| w > 0)
        && le16(d, 14).is_some_and(|h| h > 0)
        && matches!(d[16], 1 | 8 | 16 | 24 | 32)
    {
        return Some("TGA");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::pil_format;

    #[test]
    fn names_formats_by_their_leading_bytes() {
        assert_eq!(pil_format(b"qoif\0\0\0\x10"), Some("QOI"));
        assert_eq!(pil_format(b"P6\n3 2\n255\n"), Some("PPM"));
        assert_eq!(pil_format(b"\0\0\0\x1cftypavif"), Some("AVIF"));
        assert_eq!(pil_format(b"8BPS\0\x01"), Some("PSD"));
        assert_eq!(pil_format(b"\0\0\x01\0\x01\0"), Some("ICO"));
        // An uncompressed 2x1 true-colour TGA header.
        let mut tga = [0u8; 18];
        tga[2] = 2;
        tga[12] = 2;
        tga[14] = 1;
        tga[16] = 24;
        assert_eq!(pil_format(&tga), Some("TGA"));
        // The same first four bytes with an entry count: a cursor.
        tga[4] = 1;
        assert_eq!(pil_format(&tga), Some("CUR"));
        tga[4] = 0;
        tga[16] = 7;
        assert_eq!(pil_format(&tga), None);
        assert_eq!(pil_format(b"hello, world"), None);
        assert_eq!(pil_format(b""), None);
    }
}
