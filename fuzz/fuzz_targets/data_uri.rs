//! Data URIs (`data:image/...;base64,<payload>`) through `probe` and `load_image`: the input is
//! taken as text (lossily) and, when it is not already a data URI, prefixed with a PNG one, so
//! both the URI parsing and Python-compatible base64 decoding are exercised.
#![no_main]

use glm5v_prep::{DecodeOptions, ImageSource, load_image, probe};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let uri = if text.starts_with("data:") {
        text.into_owned()
    } else {
        format!("data:image/png;base64,{text}")
    };
    let opts = DecodeOptions {
        max_pixels: 1 << 20,
        ..DecodeOptions::default()
    };
    let src = ImageSource::DataUri(uri);
    let header = probe(&src, &opts);
    if let Ok(img) = load_image(&src, &opts) {
        let h = header.expect("load_image succeeded but probe failed");
        assert_eq!((h.width, h.height), (img.width(), img.height()));
    }
});
