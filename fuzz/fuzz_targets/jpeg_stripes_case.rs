//! The striped JPEG decode (row bands on separate libjpeg decompressors, each skipping to its
//! first row) against the whole-image decode, and the banded, horizontally resized RGB rows
//! `prep_images` reads against the whole image resized row by row.
//!
//! The first byte picks the stripe count (2-5, bits 0-1) and the resized width (bits 2-7: a
//! share of the image's width); the rest is the file. Only images whose header passes the
//! decode budget check (at most 2 Mpixel) are decoded, as in `load_image`. Invariants: both
//! decodes succeed with the same samples, or both fail; the banded rows equal the resized rows.
//!
//! The check itself; `jpeg_stripes.rs` is the cargo-fuzz target calling it, and
//! `prep/tests/fuzz_regressions.rs` replays the committed findings and seeds through it.

use glm5v_prep::decode::fuzz_hooks::{hresize_rows, jpeg_rows_hresized, jpeg_striped};
use glm5v_prep::{DecodeOptions, ImageSource, probe};

/// One execution of the `jpeg_stripes` fuzz target (also replayed by `prep/tests/fuzz_regressions.rs`):
/// panics when an invariant fails.
pub fn check(data: &[u8]) {
    let Some((&mode, bytes)) = data.split_first() else {
        return;
    };
    let opts = DecodeOptions {
        max_pixels: 1 << 21,
        ..DecodeOptions::default()
    };
    let src = ImageSource::Bytes {
        name: "fuzz".into(),
        bytes: bytes.to_vec(),
    };
    match probe(&src, &opts) {
        Ok(h) if h.format == "JPEG" => {}
        _ => return,
    }
    let stripes = 2 + (mode & 3) as usize;
    let max_bytes = 64 << 20;
    let one = jpeg_striped(bytes, max_bytes, 1);
    let many = jpeg_striped(bytes, max_bytes, stripes);
    match (&one, &many) {
        (Ok(a), Ok(b)) => {
            assert_eq!((a.0, a.1, a.2), (b.0, b.1, b.2), "other geometry");
            if let Some(i) = a.3.iter().zip(&b.3).position(|(x, y)| x != y) {
                let row = i / (a.0 * a.2);
                panic!("{stripes} stripes: sample {i} (row {row}) differs from one pass");
            }
        }
        (Err(_), Err(_)) => {}
        (Ok(_), Err(e)) => panic!("one pass decodes, {stripes} stripes fail: {e}"),
        (Err(e), Ok(_)) => panic!("{stripes} stripes decode, one pass fails: {e}"),
    }
    let Ok((w, h, 3, rows)) = one else {
        return;
    };
    // a width other than the image's (prep resizes while decoding only then)
    let out_w = (1 + w * (mode >> 2) as usize / 64).min(2 * w);
    let out_w = if out_w == w { w + 1 } else { out_w };
    let banded = jpeg_rows_hresized(bytes, max_bytes, stripes, out_w)
        .unwrap_or_else(|e| panic!("the banded resized decode fails where one pass does not: {e}"))
        .expect("a 3-component JPEG");
    let want = hresize_rows(&rows, w, out_w);
    assert_eq!(banded.len(), h * out_w * 3);
    if let Some(i) = want.iter().zip(&banded).position(|(x, y)| x != y) {
        panic!(
            "{stripes} bands resized to {out_w}: byte {i} (row {}) differs from the whole image resized",
            i / (out_w * 3)
        );
    }
}
