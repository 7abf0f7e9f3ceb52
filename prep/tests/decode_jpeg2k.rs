//! JPEG 2000 and ICNS (`prep/src/decode/jpeg2k.rs`, `icns.rs`): files Pillow 13.0.0 wrote or
//! that `fixtures/scripts/gen_jpeg2k.py` built (`fixtures/jpeg2k/`: modes L, LA, RGB, RGBA, I;16
//! and P, lossless and lossy, tiled with offsets, quality layers; written by Pillow's own OpenJPEG
//! through ctypes: sYCC 4:2:0, a 4:2:2 codestream without colour space, a subsampled first sRGB
//! component, signed 8-bit and 12-bit gray, 12-bit RGB; ICNS with RLE + mask, raw RGB, it32 and a JPEG
//! 2000 entry) decode to upstream's `load_image` RGB; `probe` reads their size from the
//! header; truncated and garbled files give typed errors naming the format (the first half of
//! each is refused, as PIL refuses it); a header over the decode budget is refused before
//! decoding. The Pillow corpus suite checks the rest against upstream (JPEG2000 11/11, ICNS 3/3).

use glm5v_prep::{AlphaMode, DecodeOptions, ImageSource, PrepError, load_image, probe};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

fn src(name: &str, bytes: Vec<u8>) -> ImageSource {
    ImageSource::Bytes {
        name: name.into(),
        bytes,
    }
}

fn decode(name: &str, bytes: Vec<u8>) -> Result<image::RgbImage, PrepError> {
    load_image(&src(name, bytes), &DecodeOptions::default())
}

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/jpeg2k")
}

fn expected() -> serde_json::Map<String, serde_json::Value> {
    let text = std::fs::read_to_string(dir().join("expected.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v.as_object().unwrap().clone()
}

fn format_of(name: &str) -> &'static str {
    if name.ends_with(".icns") {
        "ICNS"
    } else {
        "JPEG2000"
    }
}

fn size_of(want: &serde_json::Value) -> (u32, u32) {
    let s = want["size"].as_array().unwrap();
    (s[0].as_u64().unwrap() as u32, s[1].as_u64().unwrap() as u32)
}

#[test]
fn files_decode_to_upstreams_rgb() {
    let cases = expected();
    assert_eq!(cases.len(), 21);
    for (name, want) in &cases {
        let bytes = std::fs::read(dir().join(name)).unwrap();
        let img = decode(name, bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!((img.width(), img.height()), size_of(want), "{name}");
        let sha: String = Sha256::digest(img.as_raw())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(
            sha,
            want["rgb_sha256"].as_str().unwrap(),
            "{name} (PIL mode {})",
            want["pil_mode"]
        );
    }
}

#[test]
fn alpha_white_composites_as_convert_to_rgb() {
    let white = DecodeOptions {
        alpha: AlphaMode::White,
        ..DecodeOptions::default()
    };
    for (name, want) in &expected() {
        let bytes = std::fs::read(dir().join(name)).unwrap();
        let img = load_image(&src(name, bytes), &white).unwrap_or_else(|e| panic!("{name}: {e}"));
        let sha: String = Sha256::digest(img.as_raw())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(sha, want["white_sha256"].as_str().unwrap(), "{name}");
    }
}

#[test]
fn probe_reads_size_and_format_from_the_header() {
    for (name, want) in &expected() {
        let bytes = std::fs::read(dir().join(name)).unwrap();
        let h = probe(&src(name, bytes), &DecodeOptions::default()).unwrap();
        assert_eq!((h.width, h.height), size_of(want), "{name}");
        assert_eq!(h.format, format_of(name), "{name}");
    }
}

/// A typed refusal that names the format.
fn assert_typed(name: &str, r: Result<image::RgbImage, PrepError>) {
    match r {
        Ok(_) => {}
        Err(PrepError::Corrupt { format, .. } | PrepError::Unsupported { format, .. }) => {
            assert_eq!(format, format_of(name), "{name}")
        }
        Err(PrepError::DecodeBudget { .. } | PrepError::ZeroSize { .. }) => {}
        Err(e) => panic!("{name}: untyped refusal {e}"),
    }
}

#[test]
fn truncated_and_garbled_files_are_typed_errors() {
    for (name, want) in &expected() {
        let bytes = std::fs::read(dir().join(name)).unwrap();
        // The first half: PIL refuses each of these, and so do we.
        assert!(want["half_refused"].as_bool().unwrap(), "{name}");
        let half = decode(name, bytes[..bytes.len() / 2].to_vec());
        assert!(half.is_err(), "{name}: the first half decoded");
        assert_typed(name, half);
        for cut in (12..bytes.len()).step_by(7) {
            assert_typed(name, decode(name, bytes[..cut].to_vec()));
        }
        // Bytes overwritten one at a time after the signature, through the headers and into the
        // data.
        for at in (12..bytes.len().min(400)).step_by(3) {
            for v in [0x00u8, 0xff, 0x7f] {
                let mut b = bytes.clone();
                b[at] = v;
                assert_typed(name, decode(name, b));
            }
        }
    }
}

#[test]
fn a_header_over_the_budget_is_refused_before_decoding() {
    // The codestream's SIZ (Xsiz, Ysiz at bytes 8..16) made 100000 x 100000.
    let mut j2k = std::fs::read(dir().join("rgb_lossless.j2k")).unwrap();
    j2k[8..12].copy_from_slice(&100_000u32.to_be_bytes());
    j2k[12..16].copy_from_slice(&100_000u32.to_be_bytes());
    for r in [
        probe(&src("big.j2k", j2k.clone()), &DecodeOptions::default()).map(|_| ()),
        decode("big.j2k", j2k).map(|_| ()),
    ] {
        assert!(
            matches!(
                r,
                Err(PrepError::DecodeBudget {
                    width: 100_000,
                    height: 100_000,
                    ..
                })
            ),
            "{r:?}"
        );
    }
    // An ICNS whose PNG entry promises 500000 x 500000 (the corpus's oom-*.icns: PIL's
    // DecompressionBombError), refused from the entry's header.
    let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
    png.extend(500_000u32.to_be_bytes());
    png.extend(500_000u32.to_be_bytes());
    png.extend([8, 6, 0, 0, 0]);
    let crc = crc32(&png[12..]);
    png.extend(crc.to_be_bytes());
    let mut icns = b"icns".to_vec();
    icns.extend(((8 + 8 + png.len()) as u32).to_be_bytes());
    icns.extend(b"ic07");
    icns.extend(((8 + png.len()) as u32).to_be_bytes());
    icns.extend(&png);
    let r = probe(&src("big.icns", icns), &DecodeOptions::default());
    assert!(
        matches!(r, Err(PrepError::DecodeBudget { width: 500_000, .. })),
        "{r:?}"
    );
}

#[test]
fn a_palette_with_alpha_is_refused_by_name() {
    // palette_pclr.jp2 with its palette's three columns made four and its colour space CMYK.
    let mut d = std::fs::read(dir().join("palette_pclr.jp2")).unwrap();
    let c = find(&d, b"colr") + 4;
    d[c + 3..c + 7].copy_from_slice(&12u32.to_be_bytes());
    let p = find(&d, b"pclr") + 4;
    // NE = 1 entry of 4 columns: depths 7,7,7,7 and one entry (both fit the old box's 12 bytes).
    d[p..p + 12].copy_from_slice(&[0, 1, 4, 7, 7, 7, 7, 1, 2, 3, 4, 0]);
    match decode("cmyk_palette.jp2", d) {
        Err(PrepError::Unsupported { format, detail, .. }) => {
            assert_eq!(format, "JPEG2000");
            assert!(detail.contains("palette"), "{detail}");
        }
        r => panic!("{r:?}"),
    }
}

fn find(d: &[u8], what: &[u8]) -> usize {
    d.windows(what.len()).position(|w| w == what).unwrap()
}

/// CRC-32 (PNG's).
fn crc32(d: &[u8]) -> u32 {
    let mut c = 0xffff_ffffu32;
    for &b in d {
        c ^= b as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0xedb8_8320
            } else {
                c >> 1
            };
        }
    }
    !c
}
