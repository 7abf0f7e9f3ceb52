//! CUR (`prep/src/decode/cur.rs`): a masked 8-bit gray cursor built here decodes as Pillow's
//! `CurImagePlugin` composes it (the inverted AND half pastes the XOR half onto black), `probe`
//! gives the halved bitmap height, and a bitmap header over the decode budget is refused before
//! decoding (the Pillow corpus suite checks its 3 cursors against upstream).

use glm5v_prep::{DecodeOptions, ImageSource, PrepError, load_image, probe};

/// One entry; its bitmap: a 40-byte header (`w` x `2h`, 8 bits), a gray palette, `rows` (bottom
/// up, each padded to 4 bytes).
fn cur(w: u32, h2: u32, rows: &[u8]) -> Vec<u8> {
    let mut d = vec![0, 0, 2, 0, 1, 0];
    d.extend([w as u8, (h2 / 2) as u8, 0, 0, 0, 0, 0, 0]);
    d.extend(((40 + 1024 + rows.len() * 4) as u32).to_le_bytes());
    d.extend(22u32.to_le_bytes());
    for v in [40u32, w, h2] {
        d.extend(v.to_le_bytes());
    }
    d.extend(1u16.to_le_bytes());
    d.extend(8u16.to_le_bytes());
    for v in [0u32, 0, 0, 0, 256, 0] {
        d.extend(v.to_le_bytes());
    }
    for i in 0..=255u8 {
        d.extend([i, i, i, 0]);
    }
    for &r in rows {
        d.extend([r, 0, 0, 0]);
    }
    d
}

fn src(bytes: Vec<u8>) -> ImageSource {
    ImageSource::Bytes {
        name: "a.cur".into(),
        bytes,
    }
}

#[test]
fn masked_gray_cursor_composes_as_pillow() {
    // File rows (bottom up): XOR 200 (image row 3), XOR 100 (row 2), AND 255 (row 1), AND 0 (row 0).
    let s = src(cur(1, 4, &[200, 100, 255, 0]));
    let h = probe(&s, &DecodeOptions::default()).unwrap();
    assert_eq!((h.width, h.height, h.format), (1, 2, "CUR"));
    let img = load_image(&s, &DecodeOptions::default()).unwrap();
    // Row 0: AND 0 -> mask 255, XOR row 2 (100) shows; row 1: AND 255 -> black.
    assert_eq!(img.as_raw(), &[100, 100, 100, 0, 0, 0]);
}

#[test]
fn bitmap_over_the_budget_is_refused_before_decoding() {
    let s = src(cur(100, 2, &[]));
    let mut bytes = match s {
        ImageSource::Bytes { bytes, .. } => bytes,
        _ => unreachable!(),
    };
    // Width 100000, height 2 x 100000 in the bitmap header (at 22 + 4 and 22 + 8).
    bytes[26..30].copy_from_slice(&100_000u32.to_le_bytes());
    bytes[30..34].copy_from_slice(&200_000u32.to_le_bytes());
    for r in [
        probe(&src(bytes.clone()), &DecodeOptions::default()).map(|_| ()),
        load_image(&src(bytes), &DecodeOptions::default()).map(|_| ()),
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
}
