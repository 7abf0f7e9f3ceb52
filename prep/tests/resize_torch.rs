//! The resize against torchvision itself: `tests/data/resize_cases.json` holds
//! `tvF.resize(uint8, BICUBIC, antialias=True)` outputs made by `gen_resize_cases.py`.

use base64::Engine;
use glm5v_prep::resize::resize_bicubic_aa;
use image::RgbImage;
use serde_json::Value;

/// The xorshift32 byte stream `gen_resize_cases.py` documents.
fn pixels(seed: u32, n: usize) -> Vec<u8> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s >> 24) as u8
        })
        .collect()
}

#[test]
fn matches_torchvision_bytes() {
    let doc: Value = serde_json::from_str(include_str!("data/resize_cases.json")).unwrap();
    let cases = doc["cases"].as_array().unwrap();
    assert!(cases.len() >= 12);
    for c in cases {
        let u = |k: &str, i: usize| c[k][i].as_u64().unwrap() as usize;
        let (h, w, oh, ow) = (u("in", 0), u("in", 1), u("out", 0), u("out", 1));
        let img = RgbImage::from_raw(
            w as u32,
            h as u32,
            pixels(c["seed"].as_u64().unwrap() as u32, h * w * 3),
        )
        .unwrap();
        let want = base64::engine::general_purpose::STANDARD
            .decode(c["expected_b64"].as_str().unwrap())
            .unwrap();
        let got = resize_bicubic_aa(&img, (oh, ow)).unwrap();
        assert_eq!((got.height() as usize, got.width() as usize), (oh, ow));
        let diff = got
            .as_raw()
            .iter()
            .zip(&want)
            .filter(|(a, b)| a != b)
            .count();
        assert_eq!(
            diff,
            0,
            "{h}x{w} -> {oh}x{ow}: {diff} of {} bytes differ",
            want.len()
        );
        assert_eq!(got.as_raw().len(), want.len());
    }
}

#[test]
fn odd_widths_hit_the_scalar_tails() {
    // Widths that are not multiples of 16 bytes run both the vector and the scalar paths; both
    // must agree with a straightforward per-pixel evaluation of the same taps.
    use glm5v_prep::resize::axis_coeffs;
    let (h, w, oh, ow) = (23usize, 37usize, 11usize, 29usize);
    let src = pixels(7, h * w * 3);
    let img = RgbImage::from_raw(w as u32, h as u32, src.clone()).unwrap();
    let got = resize_bicubic_aa(&img, (oh, ow)).unwrap();
    let (kx, ky) = (axis_coeffs(w, ow), axis_coeffs(h, oh));
    let apply = |k: &glm5v_prep::resize::AxisCoeffs, i: usize, get: &dyn Fn(usize) -> u8| {
        let mut acc = 1i32 << (k.precision - 1);
        for j in 0..k.xsize[i] {
            acc += get(k.xmin[i] + j) as i32 * k.weights[i * k.ksize + j] as i32;
        }
        (acc >> k.precision).clamp(0, 255) as u8
    };
    let mut tmp = vec![0u8; h * ow * 3];
    for y in 0..h {
        for x in 0..ow {
            for c in 0..3 {
                tmp[(y * ow + x) * 3 + c] = apply(&kx, x, &|xi| src[(y * w + xi) * 3 + c]);
            }
        }
    }
    for y in 0..oh {
        for x in 0..ow {
            for c in 0..3 {
                let v = apply(&ky, y, &|yi| tmp[(yi * ow + x) * 3 + c]);
                assert_eq!(got.as_raw()[(y * ow + x) * 3 + c], v, "y={y} x={x} c={c}");
            }
        }
    }
}
