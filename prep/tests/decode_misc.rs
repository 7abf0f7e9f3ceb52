//! The formats read through prep's own ports of Pillow 13.0.0's plugins (SPIDER, PFM, FITS,
//! BLP, FLI, 16-bit TGA, McIdas, GBR, DDS BC6H; `prep/src/decode/*.rs`): files built to reach
//! the rules the Pillow corpus does not (`fixtures/misc/`, `fixtures/scripts/gen_misc_formats.py`)
//! decode to upstream's `load_image` RGB (and, with transparency, `--alpha white` to the
//! processor's `convert_to_rgb`), or are refused where upstream refuses them; `probe`
//! gives the size before decoding; every truncation of every file is a typed error, never a panic;
//! a header over the decode budget is refused before decoding. (The corpus suite checks the
//! Pillow corpus's files of these formats and of FTEX, PCD, PIXAR and XVThumb.)

use glm5v_prep::{AlphaMode, DecodeOptions, ImageSource, PrepError, load_image, probe};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/misc")
}

fn src(name: &str, bytes: Vec<u8>) -> ImageSource {
    ImageSource::Bytes {
        name: name.into(),
        bytes,
    }
}

fn cases() -> Vec<(String, serde_json::Value)> {
    let text = std::fs::read_to_string(dir().join("expected.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v.as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

#[test]
fn generated_files_decode_to_upstreams_rgb() {
    let cases = cases();
    assert_eq!(cases.len(), 28);
    let mut whites = 0;
    for (name, want) in cases {
        let bytes = std::fs::read(dir().join(&name)).unwrap();
        let s = src(&name, bytes);
        let got = load_image(&s, &DecodeOptions::default());
        if let Some(err) = want.get("error") {
            let e = got
                .err()
                .unwrap_or_else(|| panic!("{name}: upstream refuses it ({err})"));
            assert!(matches!(e, PrepError::Corrupt { .. }), "{name}: {e}");
            continue;
        }
        let img = got.unwrap_or_else(|e| panic!("{name}: {e}"));
        let size: Vec<u64> = want["size"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(
            vec![img.width() as u64, img.height() as u64],
            size,
            "{name}"
        );
        let h = probe(&s, &DecodeOptions::default()).unwrap();
        assert_eq!((h.width, h.height), (img.width(), img.height()), "{name}");
        assert_eq!(h.format, want["format"].as_str().unwrap(), "{name}");
        let sha: String = Sha256::digest(img.as_raw())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(sha, want["rgb_sha256"].as_str().unwrap(), "{name}");
        // With transparency (an alpha band or a palette): `--alpha white` is the processor's
        // `convert_to_rgb` of the opened image.
        if let Some(white) = want.get("white_rgb_sha256") {
            let opts = DecodeOptions {
                alpha: AlphaMode::White,
                ..Default::default()
            };
            let img = load_image(&s, &opts).unwrap_or_else(|e| panic!("{name}: {e}"));
            let sha: String = Sha256::digest(img.as_raw())
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            assert_eq!(sha, white.as_str().unwrap(), "{name} (alpha white)");
            whites += 1;
        }
    }
    assert_eq!(whites, 10);
}

#[test]
fn truncations_are_typed_errors() {
    for (name, _) in cases() {
        let bytes = std::fs::read(dir().join(&name)).unwrap();
        let full = load_image(&src(&name, bytes.clone()), &DecodeOptions::default()).ok();
        // FITS data units are padded to 2880 bytes: cut inside the data, not the padding.
        let end = match name.ends_with(".fits") {
            true => 2880 + 6 * 5,
            false => bytes.len(),
        };
        for cut in (0..end).step_by(3) {
            let r = std::panic::catch_unwind(|| {
                load_image(
                    &src(&name, bytes[..cut].to_vec()),
                    &DecodeOptions::default(),
                )
            });
            let r = r.unwrap_or_else(|_| panic!("{name} cut at {cut}: panic"));
            match r {
                Err(
                    PrepError::Corrupt { .. }
                    | PrepError::Unsupported { .. }
                    | PrepError::UnknownFormat { .. }
                    | PrepError::Empty { .. }
                    | PrepError::ZeroSize { .. },
                ) => {}
                Err(e) => panic!("{name} cut at {cut}: {e}"),
                // A cut past what the decoder reads (a TGA footer, which only touches alpha):
                // the same pixels as the whole file.
                Ok(img) => assert_eq!(
                    Some(img.as_raw()),
                    full.as_ref().map(|f| f.as_raw()),
                    "{name} cut at {cut} decoded to other pixels"
                ),
            }
        }
    }
}

#[test]
fn headers_over_the_budget_are_refused_before_decoding() {
    // A 100000 x 100000 SPIDER header (floats, big-endian), no pixels.
    let mut h = [0f32; 27];
    h[0] = 100_000.0; // nslice... word 1: rows
    h[1] = 100_000.0; // word 2: rows
    h[4] = 1.0; // iform
    h[11] = 100_000.0; // word 12: columns
    h[12] = 1.0; // labrec
    h[21] = 1024.0; // labbyt
    h[22] = 1024.0; // lenbyt
    let spider: Vec<u8> = h.iter().flat_map(|v| v.to_be_bytes()).collect();
    let pfm = b"Pf\n100000 100000\n-1.0\n".to_vec();
    let mut fli = vec![0u8; 128];
    fli[4..6].copy_from_slice(&0xAF12u16.to_le_bytes());
    fli[8..12].copy_from_slice(&[0xff, 0xff, 0xff, 0xff]);
    for (name, bytes) in [("big.spider", spider), ("big.pfm", pfm), ("big.fli", fli)] {
        let s = src(name, bytes);
        for r in [
            probe(&s, &DecodeOptions::default()).map(|_| ()),
            load_image(&s, &DecodeOptions::default()).map(|_| ()),
        ] {
            assert!(
                matches!(r, Err(PrepError::DecodeBudget { .. })),
                "{name}: {r:?}"
            );
        }
    }
}
