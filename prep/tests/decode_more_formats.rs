//! QOI, PNM, TGA and ICO (read through the `image` crate, `prep/src/decode/foreign.rs`): small
//! images built here decode to their known pixels, `probe` reports their size, and a header that
//! promises more pixels than the decode budget is refused before any decoding (the Pillow corpus
//! suite, `cargo xtask conformance --corpus`, checks the same decoders against upstream).

use glm5v_prep::{DecodeOptions, ImageSource, PrepError, load_image, probe};

fn src(name: &str, bytes: Vec<u8>) -> ImageSource {
    ImageSource::Bytes {
        name: name.into(),
        bytes,
    }
}

/// A 2x1 image: red, then (10, 20, 30).
const PIXELS: [u8; 6] = [255, 0, 0, 10, 20, 30];

fn ppm(w: u32, h: u32) -> Vec<u8> {
    let mut b = format!("P6\n{w} {h}\n255\n").into_bytes();
    b.extend_from_slice(&PIXELS);
    b
}

fn tga(w: u16, h: u16) -> Vec<u8> {
    // Uncompressed true colour, 24 bits, top-left origin (descriptor bit 5).
    let mut b = vec![0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    b.extend_from_slice(&w.to_le_bytes());
    b.extend_from_slice(&h.to_le_bytes());
    b.extend_from_slice(&[24, 0x20]);
    for p in PIXELS.chunks(3) {
        b.extend_from_slice(&[p[2], p[1], p[0]]);
    }
    b
}

fn qoi(w: u32, h: u32) -> Vec<u8> {
    let mut b = b"qoif".to_vec();
    b.extend_from_slice(&w.to_be_bytes());
    b.extend_from_slice(&h.to_be_bytes());
    b.extend_from_slice(&[3, 0]);
    for p in PIXELS.chunks(3) {
        b.push(0xfe); // QOI_OP_RGB
        b.extend_from_slice(p);
    }
    b.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 1]);
    b
}

#[test]
fn small_images_decode_to_their_pixels() {
    for (name, bytes) in [
        ("a.ppm", ppm(2, 1)),
        ("a.tga", tga(2, 1)),
        ("a.qoi", qoi(2, 1)),
    ] {
        let s = src(name, bytes);
        let h = probe(&s, &DecodeOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!((h.width, h.height), (2, 1), "{name}");
        let img = load_image(&s, &DecodeOptions::default()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(img.as_raw(), &PIXELS.to_vec(), "{name}");
    }
}

#[test]
fn headers_over_the_budget_are_refused_before_decoding() {
    // 60000 x 60000 = 3.6e9 pixels, no pixel data behind the header.
    for (name, mut bytes) in [
        ("big.ppm", ppm(60000, 60000)),
        ("big.tga", tga(60000, 60000)),
        ("big.qoi", qoi(60000, 60000)),
    ] {
        bytes.truncate(bytes.len() - 6);
        let s = src(name, bytes);
        for r in [
            probe(&s, &DecodeOptions::default()).map(|_| ()),
            load_image(&s, &DecodeOptions::default()).map(|_| ()),
        ] {
            match r {
                Err(PrepError::DecodeBudget { pixels, .. }) => assert_eq!(pixels, 3_600_000_000),
                other => panic!("{name}: {other:?}"),
            }
        }
    }
}

#[test]
fn formats_pil_opens_but_prep_does_not_are_named() {
    let s = src(
        "a.sgi",
        b"\x01\xda\x01\x01\0\x02\0\x10\0\x10\0\x03".to_vec(),
    );
    let e = load_image(&s, &DecodeOptions::default()).unwrap_err();
    assert!(
        matches!(&e, PrepError::Unsupported { format, .. } if format == "SGI"),
        "{e}"
    );
    assert!(e.to_string().contains("unsupported format: SGI"), "{e}");
}
