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
    // A placeable WMF header (PIL identifies it; loading needs a Windows-only handler).
    let s = src(
        "a.wmf",
        b"\xd7\xcd\xc6\x9a\0\0\0\0\0\0\x10\0\x10\0".to_vec(),
    );
    let e = load_image(&s, &DecodeOptions::default()).unwrap_err();
    assert!(
        matches!(&e, PrepError::Unsupported { format, .. } if format == "WMF"),
        "{e}"
    );
    assert!(e.to_string().contains("unsupported format: WMF"), "{e}");
}

/// An RGB (not RGBA) PNG, 2x1, PIXELS.
fn rgb_png() -> Vec<u8> {
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, 2, 1);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut w = enc.write_header().unwrap();
    w.write_image_data(&PIXELS).unwrap();
    w.finish().unwrap();
    out
}

/// An ICO whose largest entry is an RGB PNG (fuzz finding F6: the `image` crate's ICO decoder
/// refuses a PNG entry that is not RGBA, PIL reads it through its PNG reader): PIL's entry
/// choice (largest width x height first) picks the 2x1 PNG over a 1x1 entry listed before it,
/// whose data is not an image at all.
#[test]
fn an_ico_png_entry_in_rgb_is_read_as_pil_reads_it() {
    let png = rgb_png();
    let mut ico = vec![0, 0, 1, 0, 2, 0];
    let data_at = 6 + 2 * 16;
    // entry 0: 1x1, 32 bpp, 4 junk bytes after the PNG
    ico.extend_from_slice(&[1, 1, 0, 0, 1, 0, 32, 0]);
    ico.extend_from_slice(&4u32.to_le_bytes());
    ico.extend_from_slice(&((data_at + png.len()) as u32).to_le_bytes());
    // entry 1: 2x1, 24 bpp, the PNG
    ico.extend_from_slice(&[2, 1, 0, 0, 1, 0, 24, 0]);
    ico.extend_from_slice(&(png.len() as u32).to_le_bytes());
    ico.extend_from_slice(&(data_at as u32).to_le_bytes());
    ico.extend_from_slice(&png);
    ico.extend_from_slice(b"junk");
    let s = src("a.ico", ico);
    let h = probe(&s, &DecodeOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((h.width, h.height), (2, 1));
    let img = load_image(&s, &DecodeOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(img.as_raw(), &PIXELS.to_vec());
}

/// The F6 reproducer itself (its first byte is the fuzz target's format selector): upstream's
/// `load_image` gives a 7x5 RGB image whose bytes hash as below (Pillow 13.0.0).
#[test]
fn fuzz_finding_f6_decodes_to_upstreams_pixels() {
    use sha2::{Digest, Sha256};
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../fuzz/regressions/formats/f6_ico_with_an_rgb_png_entry"
    );
    let bytes = std::fs::read(path).unwrap()[1..].to_vec();
    let img = load_image(&src("f6.ico", bytes), &DecodeOptions::default())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((img.width(), img.height()), (7, 5));
    let digest: String = Sha256::digest(img.as_raw())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(
        digest,
        "eacfd1b0bd334ac1e1ba62be95ac5c0023a41373b4227a9b428dfbb57767e358"
    );
}

/// An ICO whose entries tie on size and depth: PIL sorts the directory stably (by depth, then
/// by width x height descending) and opens the first entry of the largest, so the earliest of
/// the tied entries in the file (Pillow 13.0.0 on these bytes, built the same way in Python:
/// (30, 20, 10) for both); the `image` crate's own choice among ties is another entry.
#[test]
fn an_ico_with_tied_entries_opens_the_first_as_pil_does() {
    let bmp = |bgr: [u8; 3]| {
        let mut v = Vec::new();
        v.extend_from_slice(&40u32.to_le_bytes());
        v.extend_from_slice(&1i32.to_le_bytes());
        v.extend_from_slice(&2i32.to_le_bytes()); // height doubled (the AND mask)
        v.extend_from_slice(&[1, 0, 32, 0]);
        v.resize(40, 0);
        v.extend_from_slice(&[bgr[0], bgr[1], bgr[2], 255]);
        v.extend_from_slice(&[0; 4]); // the AND mask's row
        v
    };
    for n in [2usize, 3] {
        let images: Vec<Vec<u8>> = [[10, 20, 30], [40, 50, 60], [70, 80, 90]][..n]
            .iter()
            .map(|&c| bmp(c))
            .collect();
        let mut ico = vec![0, 0, 1, 0, n as u8, 0];
        let mut at = 6 + 16 * n;
        for img in &images {
            ico.extend_from_slice(&[1, 1, 0, 0, 1, 0, 32, 0]);
            ico.extend_from_slice(&(img.len() as u32).to_le_bytes());
            ico.extend_from_slice(&(at as u32).to_le_bytes());
            at += img.len();
        }
        images.iter().for_each(|img| ico.extend_from_slice(img));
        let img = load_image(&src("tie.ico", ico), &DecodeOptions::default()).unwrap();
        assert_eq!(img.dimensions(), (1, 1));
        assert_eq!(img.as_raw().as_slice(), &[30, 20, 10], "{n} tied entries");
    }
}

/// An ICO whose largest entries tie on size but not on depth: PIL's stable sorts (depth
/// ascending, then size descending) open the one of lower depth, whichever comes first in the
/// file (Pillow 13.0.0 on these bytes, built the same way in Python: a 24-bit 1x1 entry and a
/// 32-bit one give the 24-bit entry's pixel in both orders; a 1x1 then a 2x2 gives the 2x2).
#[test]
fn an_ico_with_entries_of_one_size_opens_the_lowest_depth_as_pil_does() {
    let bmp = |bgr: [u8; 3], bpp: u16, side: i32| {
        let mut v = Vec::new();
        v.extend_from_slice(&40u32.to_le_bytes());
        v.extend_from_slice(&side.to_le_bytes());
        v.extend_from_slice(&(2 * side).to_le_bytes()); // height doubled (the AND mask)
        v.extend_from_slice(&1u16.to_le_bytes());
        v.extend_from_slice(&bpp.to_le_bytes());
        v.resize(40, 0);
        for _ in 0..side {
            let mut row = Vec::new();
            for _ in 0..side {
                row.extend_from_slice(&bgr);
                if bpp == 32 {
                    row.push(255);
                }
            }
            row.resize(row.len().div_ceil(4) * 4, 0);
            v.extend_from_slice(&row);
        }
        v.extend(std::iter::repeat_n(0u8, 4 * side as usize)); // the AND mask's rows
        v
    };
    let ico = |entries: &[(i32, u16, [u8; 3])]| {
        let images: Vec<Vec<u8>> = entries.iter().map(|&(s, b, c)| bmp(c, b, s)).collect();
        let mut ico = vec![0, 0, 1, 0, entries.len() as u8, 0];
        let mut at = 6 + 16 * entries.len();
        for (img, &(side, bpp, _)) in images.iter().zip(entries) {
            ico.extend_from_slice(&[side as u8, side as u8, 0, 0, 1, 0]);
            ico.extend_from_slice(&bpp.to_le_bytes());
            ico.extend_from_slice(&(img.len() as u32).to_le_bytes());
            ico.extend_from_slice(&(at as u32).to_le_bytes());
            at += img.len();
        }
        images.iter().for_each(|img| ico.extend_from_slice(img));
        ico
    };
    for (entries, size, pixel) in [
        (
            vec![(1, 24, [10, 20, 30]), (1, 32, [40, 50, 60])],
            1,
            [30, 20, 10],
        ),
        (
            vec![(1, 32, [10, 20, 30]), (1, 24, [40, 50, 60])],
            1,
            [60, 50, 40],
        ),
        (
            vec![(1, 32, [10, 20, 30]), (2, 32, [40, 50, 60])],
            2,
            [60, 50, 40],
        ),
    ] {
        let img = load_image(&src("depth.ico", ico(&entries)), &DecodeOptions::default())
            .unwrap_or_else(|e| panic!("{entries:?}: {e}"));
        assert_eq!(img.dimensions(), (size, size), "{entries:?}");
        assert_eq!(&img.as_raw()[..3], &pixel, "{entries:?}");
    }
}
