//! Placeholder expansion (`processing_glm5_next.py`, UPSTREAM.md item 9).
//!
//! The chat template writes `<|begin_of_image|><|image|><|end_of_image|>` for an image and
//! `<|begin_of_video|><|video|><|end_of_video|>` for a video. The processor replaces each
//! `<|image|>` with `<|image|>` x (t*h*w / merge^2), and each `<|video|>` with, per frame pair,
//! `<|begin_of_image|>` + `<|image|>` x (h*w / merge^2) + `<|end_of_image|>{seconds:.1f} seconds`
//! (frames use the image token too; the seconds are the sampled frames' `timestamps[::2]`).

use crate::error::{PrepError, Result};

pub const IMAGE_TOKEN: &str = "<|image|>";
pub const VIDEO_TOKEN: &str = "<|video|>";
pub const BEGIN_OF_IMAGE: &str = "<|begin_of_image|>";
pub const END_OF_IMAGE: &str = "<|end_of_image|>";
pub const BEGIN_OF_VIDEO: &str = "<|begin_of_video|>";
pub const END_OF_VIDEO: &str = "<|end_of_video|>";

pub const IMAGE_TOKEN_ID: u32 = 154854;
pub const VIDEO_TOKEN_ID: u32 = 154855;
pub const BEGIN_OF_IMAGE_ID: u32 = 154830;
pub const END_OF_IMAGE_ID: u32 = 154831;
pub const BEGIN_OF_VIDEO_ID: u32 = 154832;
pub const END_OF_VIDEO_ID: u32 = 154833;

/// Merged tokens of one grid: `t*h*w / merge_size^2` (upstream's `replace_image_token`).
pub fn image_token_count(grid_thw: [usize; 3], merge_size: usize) -> usize {
    grid_thw.iter().product::<usize>() / (merge_size * merge_size)
}

/// What the processor substitutes for one `<|image|>`: `<|image|>` x tokens.
pub fn image_replacement(grid_thw: [usize; 3], merge_size: usize) -> String {
    IMAGE_TOKEN.repeat(image_token_count(grid_thw, merge_size))
}

/// An image's whole block as the templated prompt carries it after expansion:
/// `<|begin_of_image|>` + `<|image|>` x tokens + `<|end_of_image|>`.
pub fn image_block_text(grid_thw: [usize; 3], merge_size: usize) -> String {
    format!(
        "{BEGIN_OF_IMAGE}{}{END_OF_IMAGE}",
        image_replacement(grid_thw, merge_size)
    )
}

/// [`image_block_text`] as token ids.
pub fn image_block_ids(grid_thw: [usize; 3], merge_size: usize) -> Vec<u32> {
    let n = image_token_count(grid_thw, merge_size);
    let mut v = Vec::with_capacity(n + 2);
    v.push(BEGIN_OF_IMAGE_ID);
    v.extend(std::iter::repeat_n(IMAGE_TOKEN_ID, n));
    v.push(END_OF_IMAGE_ID);
    v
}

/// A piece of an expanded prompt: special token ids, or plain text left to the tokenizer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptPiece {
    Tokens(Vec<u32>),
    Text(String),
}

/// The seconds written after each frame pair: `timestamps[::2]`, cut or padded (with the last
/// value, or 0) to `grid_t` entries, as `replace_video_token` does.
pub fn frame_pair_seconds(grid_t: usize, timestamps: &[f64]) -> Vec<f64> {
    let mut s: Vec<f64> = timestamps.iter().step_by(2).copied().take(grid_t).collect();
    while s.len() < grid_t {
        s.push(s.last().copied().unwrap_or(0.0));
    }
    s
}

/// What the processor substitutes for one `<|video|>`, as pieces: per frame pair the image
/// block ids, then the text `"{seconds:.1f} seconds"`.
pub fn video_replacement_pieces(
    grid_thw: [usize; 3],
    merge_size: usize,
    timestamps: &[f64],
) -> Vec<PromptPiece> {
    let t = grid_thw[0];
    let frame_grid = [1, grid_thw[1], grid_thw[2]];
    frame_pair_seconds(t, timestamps)
        .into_iter()
        .flat_map(|sec| {
            [
                PromptPiece::Tokens(image_block_ids(frame_grid, merge_size)),
                PromptPiece::Text(format!("{sec:.1} seconds")),
            ]
        })
        .collect()
}

/// [`video_replacement_pieces`] as text (upstream's `replace_video_token` return value).
pub fn video_replacement(grid_thw: [usize; 3], merge_size: usize, timestamps: &[f64]) -> String {
    let frame_grid = [1, grid_thw[1], grid_thw[2]];
    frame_pair_seconds(grid_thw[0], timestamps)
        .into_iter()
        .map(|sec| {
            format!(
                "{}{sec:.1} seconds",
                image_block_text(frame_grid, merge_size)
            )
        })
        .collect()
}

/// A video's grid and the timestamps of its processed frames.
#[derive(Debug, Clone, PartialEq)]
pub struct VideoPrompt {
    pub grid_thw: [usize; 3],
    pub timestamps: Vec<f64>,
}

/// Replaces, in order, each `<|image|>` of `text` with [`image_replacement`] of the next image
/// grid and each `<|video|>` with [`video_replacement`] of the next video. Text produced by a
/// replacement is never scanned again. The counts must match.
pub fn expand_prompt(
    text: &str,
    image_grids: &[[usize; 3]],
    videos: &[VideoPrompt],
    merge_size: usize,
) -> Result<String> {
    let mut out = String::with_capacity(text.len());
    let (mut ni, mut nv) = (0usize, 0usize);
    let mut rest = text;
    loop {
        let pi = rest.find(IMAGE_TOKEN);
        let pv = rest.find(VIDEO_TOKEN);
        let (pos, is_image) = match (pi, pv) {
            (None, None) => break,
            (Some(a), None) => (a, true),
            (None, Some(b)) => (b, false),
            (Some(a), Some(b)) => (a.min(b), a < b),
        };
        out.push_str(&rest[..pos]);
        if is_image {
            let g = image_grids.get(ni).ok_or_else(|| {
                PrepError::InvalidOption(format!(
                    "the prompt has more {IMAGE_TOKEN} than the {} images given",
                    image_grids.len()
                ))
            })?;
            out.push_str(&image_replacement(*g, merge_size));
            ni += 1;
            rest = &rest[pos + IMAGE_TOKEN.len()..];
        } else {
            let v = videos.get(nv).ok_or_else(|| {
                PrepError::InvalidOption(format!(
                    "the prompt has more {VIDEO_TOKEN} than the {} videos given",
                    videos.len()
                ))
            })?;
            out.push_str(&video_replacement(v.grid_thw, merge_size, &v.timestamps));
            nv += 1;
            rest = &rest[pos + VIDEO_TOKEN.len()..];
        }
    }
    out.push_str(rest);
    if ni != image_grids.len() || nv != videos.len() {
        return Err(PrepError::InvalidOption(format!(
            "the prompt has {ni} {IMAGE_TOKEN} and {nv} {VIDEO_TOKEN} for {} images and {} videos",
            image_grids.len(),
            videos.len()
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn video_text_matches_upstream_format() {
        // grid [2, 4, 6]: 6 tokens per frame pair; timestamps of 4 frames at 2 fps.
        let s = video_replacement([2, 4, 6], 2, &[0.0, 0.5, 1.0, 1.5]);
        let frame = format!("{BEGIN_OF_IMAGE}{}{END_OF_IMAGE}", IMAGE_TOKEN.repeat(6));
        assert_eq!(s, format!("{frame}0.0 seconds{frame}1.0 seconds"));
        // Python formats 0.25 as "0.2" (round half to even on the exact value).
        assert!(video_replacement([1, 2, 2], 2, &[0.25]).ends_with("0.2 seconds"));
    }

    #[test]
    fn expand_counts_must_match() {
        let t = format!("a{BEGIN_OF_IMAGE}{IMAGE_TOKEN}{END_OF_IMAGE}b");
        let e = expand_prompt(&t, &[[1, 2, 4]], &[], 2).unwrap();
        assert_eq!(
            e,
            format!("a{BEGIN_OF_IMAGE}{}{END_OF_IMAGE}b", IMAGE_TOKEN.repeat(2))
        );
        assert!(expand_prompt(&t, &[], &[], 2).is_err());
        assert!(expand_prompt("x", &[[1, 2, 2]], &[], 2).is_err());
    }
}
