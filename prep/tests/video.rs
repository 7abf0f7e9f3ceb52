//! Frame sampling against upstream's `sample_frames` (`tests/data/sample_frames_cases.json`,
//! made by `gen_sample_frames_cases.py`), temporal pairing and the video prompt.

use glm5v_prep::prompt::{self, PromptPiece};
use glm5v_prep::{PrepOptions, prep_video_frames, sample_frames};
use image::RgbImage;
use serde_json::Value;

#[test]
fn sampling_matches_upstream() {
    let doc: Value = serde_json::from_str(include_str!("data/sample_frames_cases.json")).unwrap();
    let max_frames = doc["max_frames"].as_u64().unwrap() as usize;
    let cases = doc["cases"].as_array().unwrap();
    assert!(cases.len() >= 100);
    for c in cases {
        let got = sample_frames(
            c["total_frames"].as_u64().unwrap() as usize,
            c["fps"].as_f64().unwrap(),
            c["duration"].as_f64(),
            c["target_fps"].as_f64().unwrap(),
            max_frames,
            0.0,
        );
        match c.get("indices") {
            Some(want) => {
                let want: Vec<usize> = want
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_u64().unwrap() as usize)
                    .collect();
                assert_eq!(got.unwrap_or_else(|e| panic!("{c}: {e}")), want, "{c}");
            }
            None => assert!(got.is_err(), "{c}"),
        }
    }
}

#[test]
fn odd_frame_counts_repeat_the_last_frame() {
    // Three distinct frames without sampling: the pair (2, 2) closes the clip.
    let frames: Vec<RgbImage> = (0..3)
        .map(|i| RgbImage::from_pixel(56, 56, image::Rgb([i * 50, 0, 0])))
        .collect();
    let mut o = PrepOptions::default();
    o.video.do_sample_frames = false;
    let v = prep_video_frames(&frames, 2.0, &o).unwrap();
    assert_eq!(v.frame_indices, vec![0, 1, 2]);
    assert_eq!(v.grid_thw[0], 2);
    let rows_per_t = v.grid_thw[1] * v.grid_thw[2];
    // Row layout (c, t, ph, pw): in the second temporal slice both t copies are frame 2.
    let row = &v.pixel_values[rows_per_t * 1176..(rows_per_t + 1) * 1176];
    assert_eq!(row[0], row[196]);
    let first = &v.pixel_values[..1176];
    assert_ne!(first[0], first[196], "frames 0 and 1 differ in red");
    assert!(prep_video_frames(&frames[..0], 2.0, &o).is_err());
    let mixed = vec![frames[0].clone(), RgbImage::new(28, 56)];
    assert!(
        prep_video_frames(&mixed, 2.0, &o)
            .unwrap_err()
            .to_string()
            .contains("one size")
    );
}

#[test]
fn video_prompt_pieces_use_image_ids_and_pair_seconds() {
    let grid = [2, 4, 6];
    let pieces = prompt::video_replacement_pieces(grid, 2, &[0.0, 0.5, 1.0, 1.5]);
    let mut block = vec![prompt::BEGIN_OF_IMAGE_ID];
    block.extend(std::iter::repeat_n(prompt::IMAGE_TOKEN_ID, 6));
    block.push(prompt::END_OF_IMAGE_ID);
    assert_eq!(
        pieces,
        vec![
            PromptPiece::Tokens(block.clone()),
            PromptPiece::Text("0.0 seconds".into()),
            PromptPiece::Tokens(block),
            PromptPiece::Text("1.0 seconds".into()),
        ]
    );
    assert_eq!(prompt::image_block_ids([1, 4, 6], 2).len(), 8);
    assert_eq!(
        prompt::frame_pair_seconds(3, &[0.25]),
        vec![0.25, 0.25, 0.25]
    );
    assert_eq!(prompt::frame_pair_seconds(1, &[]), vec![0.0]);
}
