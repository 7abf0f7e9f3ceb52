//! Getting the bytes: files, and data URIs decoded as `load_image` does
//! (`image.split(",")[1]`, then Python's lenient `base64.decodebytes`).

use super::ImageSource;
use crate::error::{PrepError, Result};

/// The encoded bytes of a source.
pub(crate) fn read_bytes(src: &ImageSource) -> Result<std::borrow::Cow<'_, [u8]>> {
    use std::borrow::Cow;
    let bytes: Cow<'_, [u8]> = match src {
        ImageSource::Path(p) => Cow::Owned(std::fs::read(p).map_err(|source| PrepError::Io {
            path: p.clone(),
            source,
        })?),
        ImageSource::Bytes { bytes, .. } => Cow::Borrowed(bytes.as_slice()),
        ImageSource::DataUri(uri) => {
            Cow::Owned(data_uri_payload(uri).map_err(|detail| PrepError::DataUri {
                input: src.name(),
                detail,
            })?)
        }
    };
    if bytes.is_empty() {
        return Err(PrepError::Empty { input: src.name() });
    }
    Ok(bytes)
}

/// `load_image` on a `data:image/...` string: the text between the first and second comma,
/// base64-decoded.
pub(crate) fn data_uri_payload(uri: &str) -> std::result::Result<Vec<u8>, String> {
    if !uri.starts_with("data:image/") {
        return Err(
            "only `data:image/...;base64,` URIs are accepted (as transformers' load_image)".into(),
        );
    }
    let mut parts = uri.split(',');
    parts.next();
    let payload = parts
        .next()
        .ok_or("no comma: the base64 payload follows the first comma")?;
    python_b64decode(payload.as_bytes())
}

/// CPython's non-strict `binascii.a2b_base64` (what `base64.decodebytes` calls): characters
/// outside the alphabet are skipped; a complete pad sequence ends decoding; a dangling partial
/// quad is an error.
pub(crate) fn python_b64decode(s: &[u8]) -> std::result::Result<Vec<u8>, String> {
    fn val(c: u8) -> Option<u8> {
        match c {
            b'A'..=b'Z' => Some(c - b'A'),
            b'a'..=b'z' => Some(c - b'a' + 26),
            b'0'..=b'9' => Some(c - b'0' + 52),
            b'+' => Some(62),
            b'/' => Some(63),
            _ => None,
        }
    }
    let mut out = Vec::with_capacity(s.len() / 4 * 3);
    let mut quad_pos = 0u32;
    let mut left_char = 0u32;
    let mut pads = 0u32;
    let mut data_chars = 0usize;
    for &c in s {
        if c == b'=' {
            if quad_pos >= 2 {
                pads += 1;
                if quad_pos + pads >= 4 {
                    return Ok(out);
                }
            }
            continue;
        }
        let Some(v) = val(c) else { continue };
        data_chars += 1;
        pads = 0;
        match quad_pos {
            0 => {
                quad_pos = 1;
                left_char = v as u32;
            }
            1 => {
                quad_pos = 2;
                out.push(((left_char << 2) | (v as u32 >> 4)) as u8);
                left_char = v as u32 & 0x0f;
            }
            2 => {
                quad_pos = 3;
                out.push(((left_char << 4) | (v as u32 >> 2)) as u8);
                left_char = v as u32 & 0x03;
            }
            _ => {
                quad_pos = 0;
                out.push(((left_char << 6) | v as u32) as u8);
                left_char = 0;
            }
        }
    }
    match quad_pos {
        0 => Ok(out),
        1 => Err(format!(
            "invalid base64: the number of data characters ({data_chars}) cannot be 1 more than a multiple of 4"
        )),
        _ => Err("invalid base64: incorrect padding".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_base64_rules() {
        assert_eq!(python_b64decode(b"aGVsbG8=").unwrap(), b"hello");
        assert_eq!(python_b64decode(b"aGVs\nbG8=").unwrap(), b"hello");
        // Non-alphabet characters are skipped.
        assert_eq!(python_b64decode(b"aG!Vs bG8=").unwrap(), b"hello");
        // Data after a complete pad is ignored.
        assert_eq!(python_b64decode(b"aGVsbG8=QUFB").unwrap(), b"hello");
        assert!(python_b64decode(b"aGVsbG8").is_err());
        assert!(python_b64decode(b"aGVsb").is_err());
    }

    #[test]
    fn data_uri_takes_the_second_comma_field() {
        assert_eq!(
            data_uri_payload("data:image/png;base64,aGVsbG8=").unwrap(),
            b"hello"
        );
        assert_eq!(
            data_uri_payload("data:image/png;base64,aGVsbG8=,junk").unwrap(),
            b"hello"
        );
        assert!(data_uri_payload("data:image/png;base64").is_err());
        assert!(data_uri_payload("data:text/plain;base64,aGVsbG8=").is_err());
    }
}
