//! The older raster formats PIL opens (SGI, PCX, DCX, SUN, XBM, XPM, MSP, IM, IMT, DIB):
//! - every file of these formats in the Pillow 13.0.0 corpus decodes to the RGB bytes upstream's
//!   `load_image` gave (`rgb_sha256` in `fixtures/corpus/corpus.json`), and every file upstream
//!   refuses is refused with a typed error (needs the corpus images: `cargo xtask conformance
//!   --corpus` fetches them into `target/corpus/`);
//! - the generated files of `fixtures/legacy/` (rules the corpus does not reach) decode to the
//!   RGB bytes the pinned Pillow gave them (`MANIFEST.json`);
//! - truncated and garbled copies of the corpus files give errors, never a panic.

use glm5v_prep::{DecodeOptions, ImageSource, PrepError, load_image, probe};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

const FORMATS: &[&str] = &[
    "SGI", "PCX", "DCX", "SUN", "XBM", "XPM", "MSP", "IM", "IMT", "DIB",
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn hex(b: &[u8]) -> String {
    Sha256::digest(b)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A corpus entry of these formats: path, upstream's verdict, its RGB bytes' sha256 and size,
/// PIL's format name.
type Entry = (String, bool, Option<String>, Option<(u32, u32)>, String);

fn corpus_entries() -> Vec<Entry> {
    let text = std::fs::read_to_string(repo().join("fixtures/corpus/corpus.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| {
            f["pil_format"]
                .as_str()
                .is_some_and(|p| FORMATS.contains(&p))
        })
        .map(|f| {
            let size = f["rgb_size"]
                .as_array()
                .map(|s| (s[0].as_u64().unwrap() as u32, s[1].as_u64().unwrap() as u32));
            (
                f["path"].as_str().unwrap().to_string(),
                f["verdict"] == "ok",
                f["rgb_sha256"].as_str().map(str::to_string),
                size,
                f["pil_format"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn corpus_dir() -> PathBuf {
    let dir = std::env::var_os("GLM5V_CORPUS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target/corpus/pillow-13.0.0/Tests/images"));
    let dir = repo().join(dir);
    assert!(
        dir.is_dir(),
        "{} is missing: run `cargo xtask conformance --corpus` once (or set GLM5V_CORPUS_DIR)",
        dir.display()
    );
    dir
}

fn src(name: &str, bytes: Vec<u8>) -> ImageSource {
    ImageSource::Bytes {
        name: name.into(),
        bytes,
    }
}

#[test]
#[ignore = "needs the Pillow sdist's images: run `cargo xtask conformance --corpus` once"]
fn corpus_files_decode_as_upstream() {
    let dir = corpus_dir();
    let entries = corpus_entries();
    assert!(entries.len() >= 40, "{} corpus entries", entries.len());
    let mut bad = Vec::new();
    for (path, ok, sha, size, _) in &entries {
        let bytes = std::fs::read(dir.join(path)).unwrap();
        let s = src(path, bytes);
        match (load_image(&s, &DecodeOptions::default()), ok) {
            (Ok(img), true) => {
                let got = (img.width(), img.height());
                let h = probe(&s, &DecodeOptions::default()).unwrap();
                if Some(got) != *size
                    || (h.width, h.height) != got
                    || Some(hex(img.as_raw())) != *sha
                {
                    bad.push(format!("{path}: decodes to other pixels ({got:?})"));
                }
            }
            (Err(e), true) => bad.push(format!("{path}: refused: {e}")),
            (Ok(_), false) => bad.push(format!("{path}: upstream refuses it, we decode it")),
            (Err(_), false) => {}
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
#[ignore = "needs the Pillow sdist's images: run `cargo xtask conformance --corpus` once"]
fn truncated_and_garbled_corpus_files_give_errors() {
    let dir = corpus_dir();
    for (path, ok, _, _, format) in corpus_entries() {
        if !ok {
            continue;
        }
        let bytes = std::fs::read(dir.join(&path)).unwrap();
        let mut cuts: Vec<usize> = vec![0, 1, 4, 12, 31, 100, 600];
        cuts.extend([bytes.len() / 2, bytes.len() * 9 / 10, bytes.len() - 1]);
        for cut in cuts.into_iter().filter(|&c| c < bytes.len()) {
            let r = std::panic::catch_unwind(|| {
                load_image(
                    &src(&path, bytes[..cut].to_vec()),
                    &DecodeOptions::default(),
                )
            });
            let r = r.unwrap_or_else(|_| panic!("{path} cut at {cut}: panicked"));
            // Up to half of the file, the image data is incomplete: PIL refuses it too, and the
            // error names the format.
            if cut <= bytes.len() / 2 {
                let named = matches!(
                    &r,
                    Err(PrepError::Corrupt { format: f, .. }
                        | PrepError::Unsupported { format: f, .. }) if *f == format
                );
                // A few bytes may be another format's magic (`/* X` is XBM's); IMT has none.
                assert!(
                    r.is_err() && (named || cut < 12 || format == "IMT"),
                    "{path} cut at {cut}: {r:?}"
                );
            }
        }
        // Garbled: every 7th byte after the first 16 flipped.
        let mut g = bytes.clone();
        for b in g.iter_mut().skip(16).step_by(7) {
            *b ^= 0x5a;
        }
        let r = std::panic::catch_unwind(|| load_image(&src(&path, g), &DecodeOptions::default()));
        assert!(r.is_ok(), "{path} garbled: panicked");
    }
}

#[test]
fn generated_files_decode_as_upstream() {
    // `GLM5V_LEGACY_SET`: another folder of files with an `expected.json` of the same form.
    let set = std::env::var_os("GLM5V_LEGACY_SET")
        .map_or_else(|| repo().join("fixtures/legacy"), |p| repo().join(p));
    let text = std::fs::read_to_string(set.join("expected.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let cases = v.as_object().unwrap();
    assert!(cases.len() >= 30, "{} cases", cases.len());
    let seed = |name: &str| {
        cases[name]
            .get("seed")
            .map(|s| s.to_string())
            .unwrap_or_default()
    };
    let mut bad = Vec::new();
    for (name, want) in cases {
        let s = src(name, std::fs::read(set.join(name)).unwrap());
        let got = load_image(&s, &DecodeOptions::default());
        match (want.get("error"), got) {
            (Some(_), Err(_)) => {}
            (Some(e), Ok(_)) => bad.push(format!(
                "{name}{}: decoded, upstream raised {e}",
                seed(name)
            )),
            (None, Err(e)) => bad.push(format!("{name}{}: refused: {e}", seed(name))),
            (None, Ok(img)) => {
                let h = probe(&s, &DecodeOptions::default()).unwrap();
                let size = [img.width() as u64, img.height() as u64];
                if want["size"] != serde_json::json!(size)
                    || want["format"] != h.format
                    || want["rgb_sha256"] != hex(img.as_raw()).as_str()
                    || (h.width, h.height) != (img.width(), img.height())
                {
                    bad.push(format!(
                        "{name}{}: other pixels ({} {size:?})",
                        seed(name),
                        h.format
                    ));
                }
            }
        }
    }
    assert!(
        bad.is_empty(),
        "{} of {}:\n{}",
        bad.len(),
        cases.len(),
        bad.join("\n")
    );
}

/// A header of each format promising 60000 x 60000 pixels.
fn huge_headers() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let (w, h) = (60_000u32, 60_000u32);
    let mut sgi = vec![0u8; 512];
    sgi[..12].copy_from_slice(&[0x01, 0xda, 0, 1, 0, 2, 0xea, 0x60, 0xea, 0x60, 0, 1]);
    let mut pcx = vec![0u8; 128];
    pcx[..4].copy_from_slice(&[10, 5, 1, 1]);
    pcx[8..12].copy_from_slice(&[0x5f, 0xea, 0x5f, 0xea]);
    pcx[65] = 1;
    let mut dcx = 0x3ADE68B1u32.to_le_bytes().to_vec();
    dcx.extend(12u32.to_le_bytes());
    dcx.extend(0u32.to_le_bytes());
    dcx.extend(&pcx);
    let mut sun = Vec::new();
    for v in [0x59A66A95u32, w, h, 8, 0, 1, 0, 0] {
        sun.extend(v.to_be_bytes());
    }
    let xbm = format!("#define a_width {w}\n#define a_height {h}\nstatic char a_bits[] = {{\n");
    let xpm = format!("/* XPM */\nstatic char *a[] = {{\n\"{w} {h} 1 1\",\n\"a c #000000\",\n");
    let mut msp = b"DanM".to_vec();
    msp.extend((w as u16).to_le_bytes());
    msp.extend((h as u16).to_le_bytes());
    msp.resize(32, 0);
    let x = msp
        .chunks(2)
        .fold(0u16, |a, c| a ^ u16::from_le_bytes([c[0], c[1]]));
    msp[30..32].copy_from_slice(&x.to_le_bytes());
    let im = format!("Image type: RGB image\r\nImage size (x*y): {w}*{h}\r\n\x1a");
    let imt = format!("width {w}\nheight {h}\npixel n8\n\x0c");
    let mut dib = 40u32.to_le_bytes().to_vec();
    dib.extend((w as i32).to_le_bytes());
    dib.extend((h as i32).to_le_bytes());
    dib.extend(1u16.to_le_bytes());
    dib.extend(24u16.to_le_bytes());
    dib.resize(40, 0);
    vec![
        ("a.sgi", "SGI", sgi),
        ("a.pcx", "PCX", pcx),
        ("a.dcx", "DCX", dcx),
        ("a.ras", "SUN", sun),
        ("a.xbm", "XBM", xbm.into_bytes()),
        ("a.xpm", "XPM", xpm.into_bytes()),
        ("a.msp", "MSP", msp),
        ("a.im", "IM", im.into_bytes()),
        ("a.imt", "IMT", imt.into_bytes()),
        ("a.dib", "DIB", dib),
    ]
}

#[test]
fn headers_over_the_budget_are_refused_before_decoding() {
    for (name, format, bytes) in huge_headers() {
        let s = src(name, bytes);
        for r in [
            probe(&s, &DecodeOptions::default()).map(|_| ()),
            load_image(&s, &DecodeOptions::default()).map(|_| ()),
        ] {
            match r {
                Err(PrepError::DecodeBudget { pixels, .. }) => {
                    assert_eq!(pixels, 3_600_000_000, "{name}")
                }
                other => panic!("{name} ({format}): {other:?}"),
            }
        }
        // `probe` reads the size without decoding (a budget that allows it).
        let opts = DecodeOptions {
            max_pixels: u64::MAX,
            ..Default::default()
        };
        let h = probe(&s, &opts).unwrap();
        assert_eq!((h.width, h.height, h.format), (60_000, 60_000, format));
    }
}
