//! `smart_resize` and the content-size rule against upstream's own function
//! (`tests/data/smart_resize_cases.json`, made by `gen_smart_resize_cases.py`) and invariants.

use glm5v_prep::smart_resize::{
    Budget, content_size, fitted_content_height, geometry, smart_resize,
};
use proptest::prelude::*;
use serde_json::Value;

fn budget(c: &Value) -> Budget {
    let u = |k: &str| c[k].as_u64().unwrap() as usize;
    Budget {
        num_frames: u("num_frames"),
        temporal_factor: u("temporal_factor"),
        factor: u("factor"),
        min_tokens: u("min_tokens"),
        max_tokens: u("max_tokens"),
    }
}

#[test]
fn matches_upstream_cases() {
    let text = include_str!("data/smart_resize_cases.json");
    let doc: Value = serde_json::from_str(text).unwrap();
    let cases = doc["cases"].as_array().unwrap();
    assert!(cases.len() >= 200, "{} cases", cases.len());
    let (mut checked, mut errors) = (0, 0);
    for c in cases {
        let b = budget(c);
        let (h, w) = (
            c["height"].as_u64().unwrap() as usize,
            c["width"].as_u64().unwrap() as usize,
        );
        let got = geometry(&b, h, w);
        if c.get("error").is_some() {
            assert!(got.is_err(), "{c}: upstream raises, we returned {got:?}");
            errors += 1;
            continue;
        }
        let g = got.unwrap_or_else(|e| panic!("{c}: {e}"));
        let pair = |k: &str| {
            (
                c[k][0].as_u64().unwrap() as usize,
                c[k][1].as_u64().unwrap() as usize,
            )
        };
        assert_eq!(g.canvas, pair("canvas"), "canvas of {c}");
        assert_eq!(g.content, pair("content"), "content of {c}");
        checked += 1;
    }
    assert!(
        checked > 190 && errors >= 4,
        "{checked} checked, {errors} errors"
    );
}

/// Independent brute force of upstream's rule with exact integer arithmetic: scan every
/// content height instead of bisecting.
fn brute_force(b: &Budget, h: usize, w: usize) -> (usize, usize) {
    let f = b.factor;
    let align = |v: usize| v.div_ceil(f) * f;
    let frames = brute_force_frames(b.num_frames);
    let ppt = b.temporal_factor * f * f;
    let (min_px, max_px) = (b.min_tokens * ppt, b.max_tokens * ppt);
    let (mut ah, mut aw) = (align(h), align(w));
    if frames * ah * aw < min_px {
        let scale = (min_px as f64 / (b.num_frames * h * w) as f64).sqrt();
        ah = align(((h as f64 * scale).ceil() as usize).max(1));
        aw = align(((w as f64 * scale).ceil() as usize).max(1));
    }
    if frames * ah * aw > max_px {
        let mut best = (f, f);
        for ch in 1..=h {
            let cw = (w * ch / h).max(1);
            if frames * align(ch) * align(cw) <= max_px {
                best = (align(ch), align(cw));
            }
        }
        return best;
    }
    (ah, aw)
}

#[test]
fn brute_force_frames_rule_matches_python_round() {
    // round(n / 2) * 2 with half-to-even: n = 1 -> 0 -> max(2, 0) = 2; 3 -> 2 -> 4; 5 -> 2 -> 4; 7 -> 4 -> 8.
    for (n, want) in [
        (1usize, 2usize),
        (2, 2),
        (3, 4),
        (5, 4),
        (7, 8),
        (9, 8),
        (11, 12),
    ] {
        assert_eq!(brute_force_frames(n), want, "n={n}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn canvas_aligned_and_within_budget(h in 1usize..5000, w in 1usize..5000, max_t in 16usize..20000) {
        let b = Budget { max_tokens: max_t, ..Budget::IMAGE_DEFAULT };
        let (ch, cw) = smart_resize(&b, h, w).unwrap();
        prop_assert!(ch % 28 == 0 && cw % 28 == 0 && ch > 0 && cw > 0);
        let tokens = ch * cw / 784;
        prop_assert!(tokens <= max_t, "{} tokens > {}", tokens, max_t);
        // Whenever the image is not a sliver and the maximum leaves room, the minimum holds
        // too. Room: the min-scaled canvas is a x b merge-aligned tokens with a0*b0 = 16 and
        // a0/b0 <= 40 before rounding up, so at most (a0+1.04)(b0+1.04) < 48 tokens; under a
        // smaller maximum upstream's fit-within-budget search may shrink a tiny image below the
        // minimum (e.g. 1x5 with max 16 -> 28x28, 1 token, as upstream does).
        if h.max(w) <= 40 * h.min(w) && max_t >= 48 {
            prop_assert!(tokens >= 16, "{}x{} -> {}x{}: {} tokens", h, w, ch, cw, tokens);
        }
    }

    #[test]
    fn agrees_with_brute_force(h in 1usize..1500, w in 1usize..1500, frames in 1usize..9,
                               min_t in 1usize..64, max_t in 8usize..3000) {
        let b = Budget { num_frames: frames, min_tokens: min_t, max_tokens: max_t, ..Budget::IMAGE_DEFAULT };
        match smart_resize(&b, h, w) {
            Ok(got) => prop_assert_eq!(got, brute_force(&b, h, w)),
            // Upstream raises only when one aligned patch over the frames exceeds the maximum.
            Err(_) => {
                let frames_al = brute_force_frames(frames);
                prop_assert!(max_t * 2 * 784 < frames_al * 784);
            }
        }
    }

    #[test]
    fn search_returns_largest_fitting_height(h in 1usize..3000, w in 1usize..3000, max_t in 1usize..4000) {
        let b = Budget { max_tokens: max_t, ..Budget::IMAGE_DEFAULT };
        let align = |v: usize| v.div_ceil(28) * 28;
        let fits = |ch: usize| 2 * align(ch) * align((w * ch / h).max(1)) <= max_t * 1568;
        let want = (1..=h).rev().find(|&ch| fits(ch));
        prop_assert_eq!(fitted_content_height(&b, h, w).unwrap(), want);
        if let Some(ch) = want { prop_assert!(ch == h || !fits(ch + 1)); }
    }

    #[test]
    fn content_keeps_aspect_ratio(h in 1usize..6000, w in 1usize..6000) {
        let b = Budget::IMAGE_DEFAULT;
        let g = geometry(&b, h, w).unwrap();
        let (ch, cw) = g.content;
        prop_assert!(ch <= g.canvas.0 && cw <= g.canvas.1);
        prop_assert_eq!(g.content, content_size(&b, h, w, g.canvas));
        let s = (g.canvas.0 as f64 / h as f64).min(g.canvas.1 as f64 / w as f64);
        if h as f64 * s >= 1.0 && w as f64 * s >= 1.0 {
            // floor on both sides of the same scale: ch = h*s - f1, cw = w*s - f2, so
            // |ch*w - cw*h| = |f2*h - f1*w| <= max(h, w), within one pixel of the ratio. The
            // bound is reached: upstream's f64 product can land just under an exact integer and
            // floor one lower (f1 = 1): 2910 * (3052 / 4360) = 2036.9999999999998 -> 2036
            // (`content_of_a_float_product_just_under_an_integer`).
            let d = (ch * w).abs_diff(cw * h);
            prop_assert!(d <= h.max(w), "{}x{} -> {}x{}", h, w, ch, cw);
            // The filled side is within one alignment step of the canvas.
            prop_assert!(g.canvas.0 - ch < 28 || g.canvas.1 - cw < 28);
        }
    }
}

/// `max(2, round(n / 2) * 2)` with Python's half-to-even round, in integers: for odd n,
/// n/2 = k + 0.5 rounds to whichever of k, k+1 is even.
fn brute_force_frames(n: usize) -> usize {
    let k = n / 2;
    let rounded = if n % 2 == 1 && k % 2 == 1 { k + 1 } else { k };
    2usize.max(rounded * 2)
}

#[test]
fn impossible_budgets_are_errors_naming_the_option() {
    let b = Budget {
        max_tokens: 0,
        ..Budget::IMAGE_DEFAULT
    };
    let e = smart_resize(&b, 640, 480).unwrap_err().to_string();
    assert!(
        e.contains("max_pixels=0") && e.contains("max_image_tokens"),
        "{e}"
    );
    assert!(smart_resize(&Budget::IMAGE_DEFAULT, 0, 10).is_err());
    assert!(smart_resize(&Budget::IMAGE_DEFAULT, 10, 0).is_err());
}

/// Upstream's content size floors a Python float product: 3052 / 4360 is 0.7 in f64, and
/// 2910 * 0.7 = 2036.9999999999998 floors to 2036, not 2037 (what `math.floor` gives there). The
/// case proptest found against a bound that was one too strict (see `content_keeps_aspect_ratio`).
#[test]
fn content_of_a_float_product_just_under_an_integer() {
    let b = Budget::IMAGE_DEFAULT;
    let g = geometry(&b, 2910, 4360).unwrap();
    assert_eq!(g.canvas.1, 3052, "{g:?}");
    assert_eq!(g.content, (2036, 3052), "{g:?}");
    assert_eq!(content_size(&b, 2910, 4360, g.canvas), (2036, 3052));
}
