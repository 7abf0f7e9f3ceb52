//! Decoded pixels equal PIL's: every fixture in `tests/data/decode/` against the sha256 of what
//! `convert_to_rgb(load_image(path))` gives for it (pillow 13.0.0), recorded by
//! `tests/data/decode/generate.py` in `expected.json`.

use glm5v_prep::decode::{AlphaMode, DecodeOptions, ImageSource, load_image, probe};
use sha2::{Digest, Sha256};
use std::path::PathBuf;

fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/decode")
}

fn expected() -> serde_json::Map<String, serde_json::Value> {
    let text = std::fs::read_to_string(data_dir().join("expected.json")).expect("expected.json");
    serde_json::from_str::<serde_json::Value>(&text)
        .unwrap()
        .as_object()
        .unwrap()
        .clone()
}

fn hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
fn every_fixture_decodes_to_pils_rgb() {
    let exp = expected();
    assert!(
        exp.len() >= 70,
        "expected.json lists {} fixtures",
        exp.len()
    );
    let mut failures = Vec::new();
    for (name, e) in &exp {
        let src = ImageSource::Path(data_dir().join(name));
        let (w, h) = (
            e["width"].as_u64().unwrap() as u32,
            e["height"].as_u64().unwrap() as u32,
        );
        match load_image(&src, &DecodeOptions::default()) {
            Ok(img) => {
                if img.dimensions() != (w, h) {
                    failures.push(format!("{name}: size {:?}, PIL {w}x{h}", img.dimensions()));
                } else if hex(img.as_raw()) != e["rgb_sha256"].as_str().unwrap() {
                    failures.push(format!("{name}: RGB differs from PIL's"));
                }
            }
            Err(err) => failures.push(format!("{name}: {err}")),
        }
        if let Some(white) = e.get("white_sha256") {
            let opts = DecodeOptions {
                alpha: AlphaMode::White,
                ..Default::default()
            };
            match load_image(&src, &opts) {
                Ok(img) if hex(img.as_raw()) == white.as_str().unwrap() => {}
                Ok(_) => failures.push(format!(
                    "{name}: white composite differs from convert_to_rgb"
                )),
                Err(err) => failures.push(format!("{name} (white): {err}")),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} fixtures fail:\n{}",
        failures.len(),
        exp.len(),
        failures.join("\n")
    );
}

#[test]
fn probe_reports_pils_size_format_and_orientation() {
    for (name, e) in &expected() {
        let src = ImageSource::Path(data_dir().join(name));
        let hdr =
            probe(&src, &DecodeOptions::default()).unwrap_or_else(|err| panic!("{name}: {err}"));
        assert_eq!(
            (hdr.width as u64, hdr.height as u64),
            (e["width"].as_u64().unwrap(), e["height"].as_u64().unwrap()),
            "{name}: probe size"
        );
        assert_eq!(hdr.format, e["format"].as_str().unwrap(), "{name}: format");
        let o = e["orientation"].as_u64().unwrap();
        assert_eq!(hdr.orientation as u64, o, "{name}: orientation");
    }
}

#[test]
fn without_transparency_white_equals_drop() {
    // convert_to_rgb only composites when there is transparency; otherwise it is convert("RGB").
    for (name, e) in &expected() {
        if e.get("white_sha256").is_some() {
            continue;
        }
        let src = ImageSource::Path(data_dir().join(name));
        let white = DecodeOptions {
            alpha: AlphaMode::White,
            ..Default::default()
        };
        let a = load_image(&src, &DecodeOptions::default()).unwrap();
        let b = load_image(&src, &white).unwrap();
        assert!(a == b, "{name}");
    }
}
