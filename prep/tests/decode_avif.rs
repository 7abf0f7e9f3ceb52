//! AVIF (`prep/src/decode/avif.rs`): files Pillow 13.0.0 wrote (`fixtures/avif/`,
//! `fixtures/scripts/gen_avif.py`: 4:2:0 / 4:2:2 / 4:4:4 / 4:0:0, full and limited range, odd
//! sizes, alpha straight and premultiplied, orientations, and the BT.601 / BT.709 / BT.2020 /
//! unspecified / chroma-derived matrices) decode to upstream's `load_image` RGB; so do 10/12-bit
//! and identity-matrix files made by avifenc (`fixtures/avif_hbd/`, `gen_avif_hbd.py`: every
//! layout with and without alpha, premultiplied, limited range, BT.709 / BT.2020, lossless).
//! libavif's own test files (`fixtures/avif_libavif/`: grids, `idat`, several extents, image
//! sequences, 10/12-bit, refusals) decode or fail as upstream does. The header gives the size
//! after orientation before any decode; a header over the decode budget is refused before
//! decoding; truncated and garbled files give typed errors, never a panic. (The Pillow corpus
//! suite checks the 16 AVIFs of Pillow's tests against upstream.)

use glm5v_prep::{DecodeOptions, ImageSource, PrepError, load_image, probe};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/avif")
}

fn src(name: &str, bytes: Vec<u8>) -> ImageSource {
    ImageSource::Bytes {
        name: name.into(),
        bytes,
    }
}

fn expected() -> serde_json::Map<String, serde_json::Value> {
    let text = std::fs::read_to_string(dir().join("expected.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v.as_object().unwrap().clone()
}

fn size_of(want: &serde_json::Value) -> (u32, u32) {
    let s = want["size"].as_array().unwrap();
    (s[0].as_u64().unwrap() as u32, s[1].as_u64().unwrap() as u32)
}

/// Every file of a fixture set decodes to upstream's RGB (size and sha256); the mismatches.
fn check_set(set: &Path, cases: &serde_json::Map<String, serde_json::Value>) -> Vec<String> {
    let mut wrong = Vec::new();
    for (name, want) in cases {
        let bytes = std::fs::read(set.join(name)).unwrap();
        let img = match load_image(&src(name, bytes), &DecodeOptions::default()) {
            Ok(img) => img,
            Err(e) => {
                wrong.push(format!("{name}: {e}"));
                continue;
            }
        };
        let sha: String = Sha256::digest(img.as_raw())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        if (img.width(), img.height()) != size_of(want)
            || sha != want["rgb_sha256"].as_str().unwrap()
        {
            wrong.push(format!("{name}: other pixels than upstream's"));
        }
    }
    wrong
}

#[test]
fn pillow_written_avifs_decode_to_upstreams_rgb() {
    let cases = expected();
    assert_eq!(cases.len(), 31);
    let wrong = check_set(&dir(), &cases);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn high_bit_depth_avifs_decode_to_upstreams_rgb() {
    let set = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/avif_hbd");
    let text = std::fs::read_to_string(set.join("expected.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let cases = v.as_object().unwrap();
    assert_eq!(cases.len(), 24);
    let wrong = check_set(&set, cases);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn header_gives_size_after_orientation() {
    for (name, want) in &expected() {
        let bytes = std::fs::read(dir().join(name)).unwrap();
        let h = probe(&src(name, bytes), &DecodeOptions::default()).unwrap();
        assert_eq!(h.format, "AVIF", "{name}");
        assert_eq!((h.width, h.height), size_of(want), "{name}");
    }
    let bytes = std::fs::read(dir().join("orient6.avif")).unwrap();
    let h = probe(&src("orient6.avif", bytes), &DecodeOptions::default()).unwrap();
    assert_eq!((h.width, h.height, h.orientation), (21, 37, 6));
}

#[test]
fn budget_refuses_before_decoding() {
    let bytes = std::fs::read(dir().join("yuv420_full_odd.avif")).unwrap();
    let opts = DecodeOptions {
        max_pixels: 37 * 21 - 1,
        ..Default::default()
    };
    match load_image(&src("odd.avif", bytes), &opts) {
        Err(PrepError::DecodeBudget { pixels, .. }) => assert_eq!(pixels, 37 * 21),
        other => panic!("expected DecodeBudget, got {other:?}"),
    }
}

fn typed(e: &PrepError) -> bool {
    matches!(
        e,
        PrepError::Corrupt { format, .. } | PrepError::Unsupported { format, .. } if format == "AVIF"
    ) || matches!(e, PrepError::UnknownFormat { .. })
}

#[test]
fn truncated_and_garbled_avifs_are_typed_errors() {
    for name in ["alpha_420.avif", "yuv444_full.avif", "orient5.avif"] {
        let full = std::fs::read(dir().join(name)).unwrap();
        for cut in [
            0,
            10,
            40,
            100,
            300,
            full.len() / 2,
            full.len() - 200,
            full.len() - 1,
        ] {
            let r = load_image(&src(name, full[..cut].to_vec()), &DecodeOptions::default());
            match r {
                Err(e) => assert!(typed(&e) || cut == 0, "{name} cut at {cut}: {e:?}"),
                Ok(_) => panic!("{name} cut at {cut} decoded"),
            }
        }
        // Garbled: every 7th byte of the second half flipped; any outcome but a panic, and an
        // error is a typed one.
        let mut bad = full.clone();
        for i in (full.len() / 2..full.len()).step_by(7) {
            bad[i] ^= 0x5a;
        }
        if let Err(e) = load_image(&src(name, bad), &DecodeOptions::default()) {
            assert!(typed(&e), "{name} garbled: {e:?}");
        }
        // A garbled container: the meta box's bytes scrambled.
        let mut bad = full.clone();
        for b in bad.iter_mut().skip(40).take(60) {
            *b = b.wrapping_mul(31).wrapping_add(7);
        }
        if let Err(e) = load_image(&src(name, bad), &DecodeOptions::default()) {
            assert!(typed(&e), "{name} garbled meta: {e:?}");
        }
    }
}

#[test]
fn libavif_test_files_decode_as_upstream_or_fail_as_it_does() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/avif_libavif");
    let text = std::fs::read_to_string(dir.join("expected.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let cases = v.as_object().unwrap();
    assert_eq!(cases.len(), 13);
    let mut wrong = Vec::new();
    for (name, want) in cases {
        let bytes = std::fs::read(dir.join(name)).unwrap();
        let got = load_image(&src(name, bytes), &DecodeOptions::default());
        match (got, want.get("error")) {
            (Err(e), Some(_)) => assert!(typed(&e), "{name}: {e:?}"),
            (Ok(_), Some(err)) => wrong.push(format!("{name}: decoded, upstream raises {err}")),
            (Err(e), None) => wrong.push(format!("{name}: {e}")),
            (Ok(img), None) => {
                let sha: String = Sha256::digest(img.as_raw())
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect();
                if (img.width(), img.height()) != size_of(want)
                    || sha != want["rgb_sha256"].as_str().unwrap()
                {
                    wrong.push(format!("{name}: other pixels than upstream's"));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn a_stream_that_makes_the_av1_decoder_panic_is_a_corrupt_file() {
    // One byte of the color item's AV1 data changed: rav1d 1.1.0 unwraps a `None` on it
    // (src/decode.rs); the vendored rav1d lets that panic unwind (third_party/rav1d/VENDORED.md) and
    // prep reports the file as corrupt, where the panic used to abort the process. Upstream
    // fails on it too ("Decoding of color planes failed").
    let set = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/avif_hbd");
    let mut bytes = std::fs::read(set.join("d10_422_alpha.avif")).unwrap();
    assert_eq!(bytes[1075], 51);
    bytes[1075] = 77;
    for _ in 0..2 {
        match load_image(
            &src("damaged.avif", bytes.clone()),
            &DecodeOptions::default(),
        ) {
            Err(PrepError::Corrupt { format, detail, .. }) => {
                assert_eq!(format, "AVIF");
                assert!(detail.contains("AV1"), "{detail}");
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }
}
