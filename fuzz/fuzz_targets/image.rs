//! Image bytes through `plan_image` (header only) and `load_image` + `preprocess_rgb` (decode,
//! resize, pad, patchify), with a small token budget (64) and a small decode budget (1 Mpixel) so
//! that an execution stays fast. The first byte picks the alpha mode; the rest is the file.
//!
//! Invariants checked beyond "no panic": when both succeed, the plan's grid is the grid prep
//! produced, and `pixel_values` has grid_h * grid_w rows of 1176 finite values.
#![no_main]

use glm5v_prep::{AlphaMode, ImageSource, PrepOptions, load_image, plan_image, preprocess_rgb};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, bytes)) = data.split_first() else {
        return;
    };
    let mut opts = PrepOptions::default();
    opts.image.min_tokens = 4;
    opts.image.max_tokens = 64;
    opts.decode.max_pixels = 1 << 20;
    opts.decode.alpha = if mode & 1 == 0 {
        AlphaMode::Drop
    } else {
        AlphaMode::White
    };
    let src = ImageSource::Bytes {
        name: "fuzz".into(),
        bytes: bytes.to_vec(),
    };
    let plan = plan_image(&src, &opts);
    let Ok(img) = load_image(&src, &opts.decode) else {
        return;
    };
    // A decodable image has a readable header: plan must not fail where load succeeds.
    let plan = plan.expect("load_image succeeded but plan_image failed");
    assert_eq!(
        (plan.width, plan.height),
        (img.width() as usize, img.height() as usize)
    );
    let prepared = preprocess_rgb(&img, &opts).expect("a decoded image preprocesses");
    assert_eq!(
        prepared.grid_thw, plan.grid_thw,
        "plan and prep disagree on the grid"
    );
    assert!(plan.tokens <= 64, "token budget exceeded: {}", plan.tokens);
    assert_eq!(prepared.pixel_values.len(), plan.patches * 1176);
    assert!(prepared.pixel_values.iter().all(|v| v.is_finite()));
});
