//! Canvas and content sizes: upstream's `smart_resize` (both `image_processing_glm5_next.py` and
//! `video_processing_glm5_next.py` carry the same function) and the content-size rule of their
//! `resize` methods, with Python's integer and float arithmetic reproduced step by step.

use crate::error::{PrepError, Result};

/// Inputs of [`smart_resize`], named as upstream names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Frames of the clip: 2 (`temporal_patch_size`) for an image, the sampled count for a video.
    pub num_frames: usize,
    /// `temporal_patch_size` (2).
    pub temporal_factor: usize,
    /// `patch_size * merge_size * patch_expand_factor` (28).
    pub factor: usize,
    /// Minimum merged tokens (`min_image_tokens`, 16).
    pub min_tokens: usize,
    /// Maximum merged tokens (`max_image_tokens`, 8000 for images, 240000 for videos).
    pub max_tokens: usize,
}

impl Budget {
    /// The image budget with upstream's defaults (2 frames, factor 28, 16..=8000 tokens).
    pub const IMAGE_DEFAULT: Budget = Budget {
        num_frames: 2,
        temporal_factor: 2,
        factor: 28,
        min_tokens: 16,
        max_tokens: 8000,
    };

    /// `temporal_factor * factor**2`: pixels (over all frames) per merged token.
    pub fn pixels_per_token(&self) -> u128 {
        self.temporal_factor as u128 * (self.factor as u128).pow(2)
    }
}

/// Products of dimensions must stay exact in `f64`, as Python's int/int true division is exact
/// rounding of the rational; past 2^53 pixels we refuse instead of guessing.
const EXACT_F64: u128 = 1 << 53;

/// Python's `math.ceil(value / factor) * factor` for non-negative integers.
fn align(value: u128, factor: u128) -> u128 {
    // `value / factor` is a true division in double; both operands are below 2^53 here, so the
    // double quotient is the correctly rounded one, exactly as in Python.
    ((value as f64) / (factor as f64)).ceil() as u128 * factor
}

fn check(b: &Budget, height: usize, width: usize) -> Result<()> {
    if height == 0 || width == 0 {
        return Err(PrepError::InvalidOption(format!(
            "smart_resize: the image has zero height or width ({height}x{width})"
        )));
    }
    if b.factor == 0 || b.temporal_factor == 0 {
        return Err(PrepError::InvalidOption(format!(
            "smart_resize: factor ({}) and temporal factor ({}) must be positive",
            b.factor, b.temporal_factor
        )));
    }
    if b.num_frames == 0 {
        return Err(PrepError::InvalidOption("smart_resize: zero frames".into()));
    }
    let px = b.num_frames as u128 * height as u128 * width as u128;
    if px >= EXACT_F64 || (b.max_tokens as u128) * b.pixels_per_token() >= EXACT_F64 {
        return Err(PrepError::InvalidOption(format!(
            "smart_resize: {} frames of {height}x{width} (or a budget of {} tokens) is beyond 2^53 pixels",
            b.num_frames, b.max_tokens
        )));
    }
    Ok(())
}

/// Upstream's `smart_resize(num_frames, height, width, temporal_factor, factor, min_pixels,
/// max_pixels)`: the padded canvas `(height, width)`, both multiples of `factor`.
///
/// Budgets are in merged tokens; `pixels_per_token = temporal_factor * factor^2`. The dimensions are
/// ceil-aligned to `factor`; under the minimum they are scaled by
/// `sqrt(min_pixels / (num_frames*h*w))` first; over the maximum the content height is
/// binary-searched (`fit_within_budget`). Errors where upstream raises (a maximum below one
/// aligned patch) and for inputs upstream would divide by zero on.
pub fn smart_resize(b: &Budget, height: usize, width: usize) -> Result<(usize, usize)> {
    check(b, height, width)?;
    let ppt = b.pixels_per_token();
    let min_pixels = b.min_tokens as u128 * ppt;
    let max_pixels = b.max_tokens as u128 * ppt;
    let factor = b.factor as u128;
    let (h, w) = (height as u128, width as u128);

    // `max(temporal_factor, round(num_frames / temporal_factor) * temporal_factor)`, with Python's
    // round-half-to-even of the float quotient.
    let q = (b.num_frames as f64 / b.temporal_factor as f64).round_ties_even() as u128;
    let aligned_frames = (q * b.temporal_factor as u128).max(b.temporal_factor as u128);

    let mut ah = align(h, factor);
    let mut aw = align(w, factor);
    let mut budget = aligned_frames * ah * aw;

    if budget < min_pixels {
        // math.sqrt(min_pixels / (num_frames * height * width)): int/int true division (exact
        // operands below 2^53, so one correctly rounded f64 division), then sqrt.
        let scale = (min_pixels as f64 / (b.num_frames as u128 * h * w) as f64).sqrt();
        ah = align(((h as f64) * scale).ceil().max(1.0) as u128, factor);
        aw = align(((w as f64) * scale).ceil().max(1.0) as u128, factor);
        budget = aligned_frames * ah * aw;
    }

    if budget > max_pixels {
        let (fh, fw) = fit_within_budget(aligned_frames, h, w, factor, max_pixels)?;
        ah = fh;
        aw = fw;
    }
    Ok((ah as usize, aw as usize))
}

/// Upstream's `fit_within_budget`: binary search over content heights `1..=height` for the largest
/// one whose aligned canvas (`align(ch)`, `align(max(1, floor(width*ch/height)))`) times
/// `aligned_frames` fits `max_pixels`. Returns `(factor, factor)` when no height fits (e.g. a
/// 1-pixel-tall sliver far wider than the budget), as upstream does.
fn fit_within_budget(
    aligned_frames: u128,
    height: u128,
    width: u128,
    factor: u128,
    max_pixels: u128,
) -> Result<(u128, u128)> {
    let minimum_pixels = aligned_frames * factor * factor;
    if max_pixels < minimum_pixels {
        return Err(PrepError::InvalidOption(format!(
            "max_pixels={max_pixels} is too small. At least {minimum_pixels} pixels are required for \
             one aligned patch (raise max_image_tokens)"
        )));
    }
    Ok(
        match largest_fitting(aligned_frames, height, width, factor, max_pixels) {
            Some(ch) => (
                align(ch, factor),
                align(content_width_for(width, ch, height), factor),
            ),
            None => (factor, factor),
        },
    )
}

/// The bisection of `fit_within_budget`: the last (= largest, the fit being monotonic) content
/// height in `1..=height` that fits, or `None`.
fn largest_fitting(
    frames: u128,
    height: u128,
    width: u128,
    factor: u128,
    max_pixels: u128,
) -> Option<u128> {
    let (mut low, mut high) = (1u128, height);
    let mut best = None;
    while low <= high {
        let ch = (low + high) / 2;
        let cw = content_width_for(width, ch, height);
        if frames * align(ch, factor) * align(cw, factor) <= max_pixels {
            best = Some(ch);
            low = ch + 1;
        } else {
            high = ch - 1;
        }
    }
    best
}

/// `max(1, math.floor(width * content_height / height))` with Python's true division.
fn content_width_for(width: u128, content_height: u128, height: u128) -> u128 {
    (((width * content_height) as f64 / height as f64).floor() as u128).max(1)
}

/// The largest content height `fit_within_budget` accepts (`None` when none fits), exposed so
/// tests can compare it against a brute-force search.
pub fn fitted_content_height(b: &Budget, height: usize, width: usize) -> Result<Option<usize>> {
    check(b, height, width)?;
    let factor = b.factor as u128;
    let q = (b.num_frames as f64 / b.temporal_factor as f64).round_ties_even() as u128;
    let frames = (q * b.temporal_factor as u128).max(b.temporal_factor as u128);
    let max_pixels = b.max_tokens as u128 * b.pixels_per_token();
    let (h, w) = (height as u128, width as u128);
    Ok(largest_fitting(frames, h, w, factor, max_pixels).map(|ch| ch as usize))
}

/// The size the image is resized to before zero padding, upstream's rule in `resize`:
/// `scale = min(th/h, tw/w)`, capped at 1.0 unless `num_frames*h*w < pixels_per_token*min_tokens`;
/// content = `clamp(floor(h*scale), 1, th) x clamp(floor(w*scale), 1, tw)`. Returns `(h, w)`.
pub fn content_size(
    b: &Budget,
    height: usize,
    width: usize,
    target: (usize, usize),
) -> (usize, usize) {
    let (th, tw) = target;
    let mut scale = (th as f64 / height as f64).min(tw as f64 / width as f64);
    let frames_px = b.num_frames as u128 * height as u128 * width as u128;
    if frames_px >= b.pixels_per_token() * b.min_tokens as u128 {
        scale = scale.min(1.0);
    }
    let ch = ((height as f64 * scale).floor() as usize).clamp(1, th.max(1));
    let cw = ((width as f64 * scale).floor() as usize).clamp(1, tw.max(1));
    (ch, cw)
}

/// Everything the image processor decides about one image's geometry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Geometry {
    /// Padded canvas (height, width), multiples of the factor.
    pub canvas: (usize, usize),
    /// Resized content (height, width), at the top-left of the canvas.
    pub content: (usize, usize),
}

/// [`smart_resize`] then [`content_size`].
pub fn geometry(b: &Budget, height: usize, width: usize) -> Result<Geometry> {
    let canvas = smart_resize(b, height, width)?;
    Ok(Geometry {
        canvas,
        content: content_size(b, height, width, canvas),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_square() {
        // 1000x1000 image: aligned 1008x1008, 2*1008*1008 > 8000*1568, so the search runs.
        let (h, w) = smart_resize(&Budget::IMAGE_DEFAULT, 1000, 1000).unwrap();
        assert_eq!(h % 28, 0);
        assert_eq!(w % 28, 0);
        assert!(2 * h * w <= 8000 * 1568);
    }

    #[test]
    fn impossible_budget_errors() {
        let b = Budget {
            max_tokens: 0,
            ..Budget::IMAGE_DEFAULT
        };
        assert!(matches!(
            smart_resize(&b, 500, 500),
            Err(PrepError::InvalidOption(_))
        ));
        assert!(smart_resize(&Budget::IMAGE_DEFAULT, 0, 5).is_err());
    }
}
