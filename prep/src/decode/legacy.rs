//! The older raster formats PIL opens, each read as its Pillow 13.0.0 plugin reads it, in its own
//! file: SGI (`sgi.rs`), PCX and DCX (`pcx.rs`), Sun raster (`sun.rs`), XBM (`xbm.rs`), XPM
//! (`xpm.rs`), MSP (`msp.rs`), IM and IMT (`im.rs`), DIB (`dib.rs`, through `bmp.rs`). This file
//! routes a [`Format`] to its header reader and decoder, and holds the Python text helpers the
//! text headers need.

use super::Fail;
use super::header::Format;
use super::modes::Raster;

/// Width and height from the header, before any pixel is decoded.
pub(crate) fn dims(d: &[u8], f: Format) -> Result<(u32, u32), Fail> {
    match f {
        Format::Sgi => super::sgi::dims(d),
        Format::Pcx | Format::Dcx => super::pcx::dims(d, f == Format::Dcx),
        Format::Sun => super::sun::dims(d),
        Format::Xbm => super::xbm::dims(d),
        Format::Xpm => super::xpm::dims(d),
        Format::Msp => super::msp::dims(d),
        Format::Im | Format::Imt => super::im::dims(d, f == Format::Imt),
        Format::Dib => super::dib::dims(d),
        _ => Err(Fail::Unsupported(format!(
            "{} is not a legacy format",
            f.name()
        ))),
    }
}

/// The image in the mode PIL's plugin gives it.
pub(crate) fn decode(d: &[u8], f: Format, max_bytes: usize) -> Result<Raster, Fail> {
    match f {
        Format::Sgi => super::sgi::decode(d, max_bytes),
        Format::Pcx | Format::Dcx => super::pcx::decode(d, f == Format::Dcx, max_bytes),
        Format::Sun => super::sun::decode(d, max_bytes),
        Format::Xbm => super::xbm::decode(d, max_bytes),
        Format::Xpm => super::xpm::decode(d, max_bytes),
        Format::Msp => super::msp::decode(d, max_bytes),
        Format::Im | Format::Imt => super::im::decode(d, f == Format::Imt, max_bytes),
        Format::Dib => super::dib::decode(d, max_bytes),
        _ => Err(Fail::Unsupported(format!(
            "{} is not a legacy format",
            f.name()
        ))),
    }
}

/// A file no plugin with a magic takes, that PIL's IM or IMT plugin opens (their `_open` tried
/// in PIL's order: IM, then IMT).
pub(crate) fn sniff_text(d: &[u8]) -> Option<Format> {
    if super::im::dims(d, false).is_ok() {
        Some(Format::Im)
    } else if super::im::dims(d, true).is_ok() {
        Some(Format::Imt)
    } else {
        None
    }
}

/// Python's `int(text)` for the ASCII forms these headers hold: surrounding whitespace, an
/// optional sign, decimal digits with single underscores between them. `None` where Python
/// raises `ValueError`.
pub(crate) fn py_int(text: &[u8]) -> Option<i64> {
    let t = rstrip(text);
    let t = &t[t.iter().position(|&c| !py_space(c)).unwrap_or(t.len())..];
    let (neg, digits) = match t.split_first() {
        Some((b'-', r)) => (true, r),
        Some((b'+', r)) => (false, r),
        _ => (false, t),
    };
    if digits.is_empty()
        || !digits[0].is_ascii_digit()
        || !digits[digits.len() - 1].is_ascii_digit()
        || digits.windows(2).any(|w| w == b"__")
    {
        return None;
    }
    let mut v: i64 = 0;
    for &c in digits {
        match c {
            b'_' => {}
            b'0'..=b'9' => v = v.checked_mul(10)?.checked_add((c - b'0') as i64)?,
            _ => return None,
        }
    }
    Some(if neg { -v } else { v })
}

/// Python's `bytes.readline(limit)`: the line from `pos` up to and including `\n`, at most
/// `limit` bytes; empty at the end of the data.
pub(crate) fn readline(d: &[u8], pos: usize, limit: usize) -> &[u8] {
    let rest = d.get(pos..).unwrap_or(&[]);
    let rest = &rest[..rest.len().min(limit)];
    match rest.iter().position(|&b| b == b'\n') {
        Some(i) => &rest[..=i],
        None => rest,
    }
}

/// Python's whitespace for `bytes.strip()` and `bytes.split()`.
pub(crate) fn py_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

/// Python's `bytes.rstrip()`.
pub(crate) fn rstrip(s: &[u8]) -> &[u8] {
    let n = s.iter().rposition(|&c| !py_space(c)).map_or(0, |i| i + 1);
    &s[..n]
}

/// Python's `bytes.split()`: the runs of non-whitespace.
pub(crate) fn split_ws(s: &[u8]) -> impl Iterator<Item = &[u8]> {
    s.split(|&c| py_space(c)).filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_text_helpers_match_python() {
        // Python 3.11: int(b"...") for each.
        let cases: &[(&[u8], Option<i64>)] = &[
            (b"128", Some(128)),
            (b" 12 ", Some(12)),
            (b"+7", Some(7)),
            (b"-3", Some(-3)),
            (b"1_000", Some(1000)),
            (b"1__0", None),
            (b"_1", None),
            (b"1_", None),
            (b"", None),
            (b"0x10", None),
            (b"12a", None),
            (b"\x0b5\x0c", Some(5)),
        ];
        for (text, want) in cases {
            assert_eq!(py_int(text), *want, "{:?}", String::from_utf8_lossy(text));
        }
        // b" a\tb\x0bc\x0c d ".split() and b"x \x0b\x0c\n".rstrip().
        let parts: Vec<&[u8]> = split_ws(b" a\tb\x0bc\x0c d ").collect();
        assert_eq!(parts, [&b"a"[..], b"b", b"c", b"d"]);
        assert_eq!(rstrip(b"x \x0b\x0c\n"), b"x");
        assert_eq!(readline(b"ab\ncd", 0, 75), b"ab\n");
        assert_eq!(readline(b"ab\ncd", 3, 75), b"cd");
        assert_eq!(readline(b"abcdef\n", 0, 4), b"abcd");
        assert_eq!(readline(b"ab", 5, 75), b"");
    }
}
