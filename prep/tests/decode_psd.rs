//! PSD (`prep/src/decode/psd.rs`): the merged composite of PSD files built here decodes to the
//! pixels Pillow's `PsdImagePlugin` gives (raw and PackBits bands, inverted CMYK), `probe` reads
//! the header size, a header over the decode budget is refused before decoding, and a PackBits run
//! past the end of a row is an error as in PIL (the Pillow corpus suite checks all 10 accepted
//! PSDs against upstream).

use glm5v_prep::{DecodeOptions, ImageSource, PrepError, load_image, probe};

fn src(name: &str, bytes: Vec<u8>) -> ImageSource {
    ImageSource::Bytes {
        name: name.into(),
        bytes,
    }
}

/// Header, empty colour mode data, resources and layer sections, then `data` (compression first).
fn psd(w: u32, h: u32, channels: u16, mode: u16, data: &[u8]) -> Vec<u8> {
    let mut d = b"8BPS".to_vec();
    d.extend(1u16.to_be_bytes());
    d.extend([0u8; 6]);
    d.extend(channels.to_be_bytes());
    d.extend(h.to_be_bytes());
    d.extend(w.to_be_bytes());
    d.extend(8u16.to_be_bytes());
    d.extend(mode.to_be_bytes());
    for _ in 0..3 {
        d.extend(0u32.to_be_bytes());
    }
    d.extend_from_slice(data);
    d
}

#[test]
fn raw_and_packbits_composites_decode_to_their_pixels() {
    // RGB 2x1 raw: planes R, G, B.
    let mut data = 0u16.to_be_bytes().to_vec();
    data.extend([10, 20, 30, 40, 50, 60]);
    let s = src("raw.psd", psd(2, 1, 3, 3, &data));
    let h = probe(&s, &DecodeOptions::default()).unwrap();
    assert_eq!((h.width, h.height, h.format), (2, 1, "PSD"));
    let img = load_image(&s, &DecodeOptions::default()).unwrap();
    assert_eq!(img.as_raw(), &[10, 30, 50, 20, 40, 60]);

    // CMYK 2x1 in PackBits: each band one row, a run of 2 (0xff); stored inverted (";I").
    let mut data = 1u16.to_be_bytes().to_vec();
    for _ in 0..4 {
        data.extend(2u16.to_be_bytes());
    }
    for v in [255u8, 255, 255, 155] {
        data.extend([0xff, v]);
    }
    let img = load_image(
        &src("cmyk.psd", psd(2, 1, 4, 4, &data)),
        &DecodeOptions::default(),
    )
    .unwrap();
    // C = M = Y = 0, K = 100: 255 - 100 = 155 in every band (PIL's cmyk2rgb).
    assert_eq!(img.as_raw(), &[155; 6]);
}

#[test]
fn budget_and_packbits_overrun_are_refused() {
    let big = psd(100_000, 100_000, 3, 3, &[]);
    for r in [
        probe(&src("big.psd", big.clone()), &DecodeOptions::default()).map(|_| ()),
        load_image(&src("big.psd", big), &DecodeOptions::default()).map(|_| ()),
    ] {
        assert!(
            matches!(
                r,
                Err(PrepError::DecodeBudget {
                    pixels: 10_000_000_000,
                    ..
                })
            ),
            "{r:?}"
        );
    }
    // Gray 2x1, PackBits run of 3 into a row of 2.
    let mut data = 1u16.to_be_bytes().to_vec();
    data.extend(2u16.to_be_bytes());
    data.extend([0xfe, 7]);
    let e = load_image(
        &src("over.psd", psd(2, 1, 1, 1, &data)),
        &DecodeOptions::default(),
    )
    .unwrap_err();
    assert!(
        matches!(&e, PrepError::Corrupt { format, .. } if format == "PSD")
            && e.to_string().contains("overrun"),
        "{e}"
    );
}
