//! Normalisation, patchify order and the whole image/video pipeline against upstream
//! (`tests/data/pixel_cases.json`, made by `gen_pixel_cases.py`).

use glm5v_prep::pixels::{NormLut, patchify, unpatchify, unpatchify_image};
use glm5v_prep::{PixelOptions, PrepOptions, prep_video_frames, preprocess_rgb};
use image::RgbImage;
use proptest::prelude::*;
use serde_json::Value;
use sha2::{Digest, Sha256};

fn cases() -> Value {
    serde_json::from_str(include_str!("data/pixel_cases.json")).unwrap()
}

/// The xorshift32 byte stream the generator scripts document.
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

fn img(seed: u32, h: usize, w: usize) -> RgbImage {
    RgbImage::from_raw(w as u32, h as u32, pixels(seed, h * w * 3)).unwrap()
}

fn sha(v: &[f32]) -> String {
    let mut h = Sha256::new();
    for x in v {
        h.update(x.to_le_bytes());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

fn raw_opts() -> PixelOptions {
    PixelOptions {
        do_rescale: false,
        do_normalize: false,
        ..PrepOptions::default().image
    }
}

#[test]
fn normalisation_is_bit_exact() {
    let doc = cases();
    let lut = NormLut::new(&PrepOptions::default().image);
    for c in 0..3 {
        for x in 0..256 {
            let want = u32::from_str_radix(doc["norm_lut"][c][x].as_str().unwrap(), 16).unwrap();
            assert_eq!(lut.0[c][x].to_bits(), want, "channel {c} level {x}");
        }
    }
}

#[test]
fn images_match_upstream_processor() {
    let doc = cases();
    for c in doc["images"].as_array().unwrap() {
        let u = |k: &str| c[k].as_u64().unwrap() as usize;
        let mut o = PrepOptions::default();
        o.image.min_tokens = u("min_tokens");
        o.image.max_tokens = u("max_tokens");
        let (h, w) = (
            c["hw"][0].as_u64().unwrap() as usize,
            c["hw"][1].as_u64().unwrap() as usize,
        );
        let p = preprocess_rgb(&img(u("seed") as u32, h, w), &o).unwrap();
        let grid: Vec<usize> = c["grid"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as usize)
            .collect();
        assert_eq!(p.grid_thw.to_vec(), grid, "{c}");
        assert_eq!(
            p.pixel_values.len(),
            c["shape"][0].as_u64().unwrap() as usize * 1176
        );
        assert_eq!(
            sha(&p.pixel_values),
            c["sha256"].as_str().unwrap(),
            "pixel_values of {c}"
        );
    }
}

#[test]
fn batch_concatenates_in_order() {
    let doc = cases();
    let b = &doc["batch"];
    let imgs = doc["images"].as_array().unwrap();
    let mut o = PrepOptions::default();
    o.image.min_tokens = b["min_tokens"].as_u64().unwrap() as usize;
    o.image.max_tokens = b["max_tokens"].as_u64().unwrap() as usize;
    let prepared: Vec<_> = b["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            let c = &imgs[i.as_u64().unwrap() as usize];
            let (h, w) = (
                c["hw"][0].as_u64().unwrap() as usize,
                c["hw"][1].as_u64().unwrap() as usize,
            );
            preprocess_rgb(&img(c["seed"].as_u64().unwrap() as u32, h, w), &o).unwrap()
        })
        .collect();
    let batch = glm5v_prep::batch_of_images(prepared, 1176);
    let want: Vec<[i64; 3]> = b["grid"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            [
                g[0].as_i64().unwrap(),
                g[1].as_i64().unwrap(),
                g[2].as_i64().unwrap(),
            ]
        })
        .collect();
    assert_eq!(batch.image_grid_thw, want);
    assert_eq!(sha(&batch.pixel_values), b["sha256"].as_str().unwrap());
}

#[test]
fn video_matches_upstream_processor() {
    let doc = cases();
    let v = &doc["video"];
    let n = v["frames"].as_u64().unwrap() as usize;
    let (h, w) = (
        v["hw"][0].as_u64().unwrap() as usize,
        v["hw"][1].as_u64().unwrap() as usize,
    );
    let seed0 = v["seeds_from"].as_u64().unwrap() as u32;
    let frames: Vec<RgbImage> = (0..n).map(|t| img(seed0 + t as u32, h, w)).collect();
    let mut o = PrepOptions::default();
    o.video.pixels.max_tokens = v["max_tokens"].as_u64().unwrap() as usize;
    let p = prep_video_frames(&frames, v["fps"].as_f64().unwrap(), &o).unwrap();
    let idx: Vec<usize> = v["indices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as usize)
        .collect();
    assert_eq!(p.frame_indices, idx);
    let ts: Vec<f64> = v["timestamps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert_eq!(p.timestamps, ts);
    let grid: Vec<usize> = v["grid"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as usize)
        .collect();
    assert_eq!(p.grid_thw.to_vec(), grid);
    assert_eq!(sha(&p.pixel_values), v["sha256"].as_str().unwrap());
}

#[test]
fn block_major_order_on_a_4x6_grid() {
    // 4x6 patches of 14 px; every pixel says which patch it is in (R), its row (G) and column
    // (B) inside the patch. Raw values (no rescale/normalize) make the rows readable.
    let p = raw_opts();
    let canvas = RgbImage::from_fn(6 * 14, 4 * 14, |x, y| {
        image::Rgb([
            ((y / 14) * 6 + x / 14) as u8,
            (y % 14) as u8,
            (x % 14) as u8,
        ])
    });
    let (rows, grid) = patchify(&[&canvas, &canvas], &p, &NormLut::new(&p)).unwrap();
    assert_eq!(grid, [1, 4, 6]);
    // 2x2 merge blocks, block-major: block (0,0), (0,1), (0,2), then the next block row.
    let want_patches: [(u8, u8); 24] = [
        (0, 0),
        (0, 1),
        (1, 0),
        (1, 1),
        (0, 2),
        (0, 3),
        (1, 2),
        (1, 3),
        (0, 4),
        (0, 5),
        (1, 4),
        (1, 5),
        (2, 0),
        (2, 1),
        (3, 0),
        (3, 1),
        (2, 2),
        (2, 3),
        (3, 2),
        (3, 3),
        (2, 4),
        (2, 5),
        (3, 4),
        (3, 5),
    ];
    for (r, &(pr, pc)) in want_patches.iter().enumerate() {
        let row = &rows[r * 1176..(r + 1) * 1176];
        for t in 0..2 {
            for ph in 0..14 {
                for pw in 0..14 {
                    // (c, t, ph, pw) layout.
                    let at = |c: usize| row[c * 392 + t * 196 + ph * 14 + pw];
                    assert_eq!(at(0), (pr * 6 + pc) as f32, "row {r} t {t} ({ph},{pw})");
                    assert_eq!(at(1), ph as f32);
                    assert_eq!(at(2), pw as f32);
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn patchify_then_unpatchify_is_identity(bh in 1usize..4, bw in 1usize..4, t in 1usize..3, seed in any::<u32>(),
                                            normalize in any::<bool>()) {
        let p = PixelOptions { do_rescale: normalize, do_normalize: normalize, ..PrepOptions::default().image };
        let lut = NormLut::new(&p);
        let (h, w) = (bh * 28, bw * 28);
        let frames: Vec<RgbImage> = (0..2 * t).map(|i| img(seed ^ (i as u32).wrapping_mul(0x9E37_79B9) | 1, h, w)).collect();
        let refs: Vec<&RgbImage> = frames.iter().collect();
        let (rows, grid) = patchify(&refs, &p, &lut).unwrap();
        prop_assert_eq!(grid, [t, bh * 2, bw * 2]);
        let back = unpatchify(&rows, grid, &p, &lut).unwrap();
        prop_assert!(back == frames);
    }
}

#[test]
fn unpatchify_image_recovers_the_canvas_and_rejects_foreign_values() {
    let o = PrepOptions::default();
    let p = preprocess_rgb(&img(5, 61, 47), &o).unwrap();
    let lut = NormLut::new(&o.image);
    let canvas = unpatchify_image(&p.pixel_values, p.grid_thw, &o.image, &lut).unwrap();
    assert!(canvas == p.canvas);
    // Outside the content the canvas is zero padding.
    let (ch, cw) = p.content;
    assert!(
        canvas
            .enumerate_pixels()
            .filter(|&(x, y, _)| x as usize >= cw || y as usize >= ch)
            .all(|(_, _, px)| px.0 == [0, 0, 0])
    );
    let mut bad = p.pixel_values.clone();
    bad[5] += 1e-3;
    assert!(unpatchify_image(&bad, p.grid_thw, &o.image, &lut).is_err());
}
