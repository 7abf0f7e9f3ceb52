//! Preprocessing options: upstream's processor defaults, overridable from a model directory's
//! `preprocessor_config.json` / `video_preprocessor_config.json` (UPSTREAM.md item 10).

use crate::decode::DecodeOptions;
use crate::error::{PrepError, Result};
use crate::smart_resize::Budget;
use serde_json::Value;
use std::path::Path;

/// `OPENAI_CLIP_MEAN` (transformers `image_utils`).
pub const OPENAI_CLIP_MEAN: [f64; 3] = [0.48145466, 0.4578275, 0.40821073];
/// `OPENAI_CLIP_STD` (transformers `image_utils`).
pub const OPENAI_CLIP_STD: [f64; 3] = [0.26862954, 0.26130258, 0.27577711];

/// The pixel rules one processor applies (the image and the video processor each have a set).
#[derive(Debug, Clone, PartialEq)]
pub struct PixelOptions {
    /// Minimum merged tokens per image / per video (`min_image_tokens`).
    pub min_tokens: usize,
    /// Maximum merged tokens per image / per video (`max_image_tokens`).
    pub max_tokens: usize,
    /// Spatial patch side (14).
    pub patch_size: usize,
    /// Frames per temporal patch (2).
    pub temporal_patch_size: usize,
    /// Side of a spatial merge block in patches (2).
    pub merge_size: usize,
    /// Extra alignment multiplier of the canvas (1).
    pub patch_expand_factor: usize,
    /// Per-channel mean, as given (double); rounded to f32 where upstream's tensor is built.
    pub image_mean: [f64; 3],
    /// Per-channel std, as given (double).
    pub image_std: [f64; 3],
    pub do_rescale: bool,
    pub rescale_factor: f64,
    pub do_normalize: bool,
}

impl PixelOptions {
    fn upstream(max_tokens: usize) -> Self {
        PixelOptions {
            min_tokens: 16,
            max_tokens,
            patch_size: 14,
            temporal_patch_size: 2,
            merge_size: 2,
            patch_expand_factor: 1,
            image_mean: OPENAI_CLIP_MEAN,
            image_std: OPENAI_CLIP_STD,
            do_rescale: true,
            rescale_factor: 1.0 / 255.0,
            do_normalize: true,
        }
    }

    /// Alignment factor of the canvas: `patch_size * merge_size * patch_expand_factor`.
    pub fn factor(&self) -> usize {
        self.patch_size * self.merge_size * self.patch_expand_factor
    }

    /// Values per row of `pixel_values`: `3 * temporal_patch_size * patch_size^2` (1176).
    pub fn patch_dim(&self) -> usize {
        3 * self.temporal_patch_size * self.patch_size * self.patch_size
    }

    /// The smart-resize budget for a clip of `num_frames` frames.
    pub fn budget(&self, num_frames: usize) -> Budget {
        Budget {
            num_frames,
            temporal_factor: self.temporal_patch_size,
            factor: self.factor(),
            min_tokens: self.min_tokens,
            max_tokens: self.max_tokens,
        }
    }

    /// Checks what upstream would divide by or that cannot form a patch grid.
    pub fn validate(&self, what: &str) -> Result<()> {
        let bad = |m: String| Err(PrepError::InvalidOption(format!("{what}: {m}")));
        if self.patch_size == 0 || self.merge_size == 0 || self.temporal_patch_size == 0 {
            return bad(format!(
                "patch_size ({}), merge_size ({}) and temporal_patch_size ({}) must be positive",
                self.patch_size, self.merge_size, self.temporal_patch_size
            ));
        }
        if self.patch_expand_factor == 0 {
            return bad("patch_expand_factor must be positive".into());
        }
        let factor = self
            .patch_size
            .checked_mul(self.merge_size)
            .and_then(|f| f.checked_mul(self.patch_expand_factor));
        let patch_dim = self
            .patch_size
            .checked_mul(self.patch_size)
            .and_then(|p| p.checked_mul(self.temporal_patch_size))
            .and_then(|p| p.checked_mul(3));
        // A canvas side is a multiple of the factor: keep it (squared, times frames) far from
        // overflow. Real values are 28 and 1176.
        const LIMIT: usize = 1 << 16;
        if factor.is_none_or(|f| f > LIMIT) || patch_dim.is_none_or(|p| p > LIMIT * LIMIT) {
            return bad(format!(
                "patch_size ({}), merge_size ({}), temporal_patch_size ({}) and \
                 patch_expand_factor ({}) are too large (the alignment factor must be at most {LIMIT})",
                self.patch_size,
                self.merge_size,
                self.temporal_patch_size,
                self.patch_expand_factor
            ));
        }
        if self.do_normalize && self.image_std.iter().any(|&s| s == 0.0 || !s.is_finite()) {
            return bad(format!(
                "image_std {:?} has a zero or non-finite value",
                self.image_std
            ));
        }
        if self.do_rescale && !(self.rescale_factor.is_finite() && self.rescale_factor != 0.0) {
            return bad(format!(
                "rescale_factor {} must be finite and non-zero",
                self.rescale_factor
            ));
        }
        Ok(())
    }
}

/// Video-only options (`Glm5NextVideoProcessor`).
#[derive(Debug, Clone, PartialEq)]
pub struct VideoOptions {
    /// Pixel rules of the video processor (max tokens 240000 by default).
    pub pixels: PixelOptions,
    /// Sample frames from a decoded clip (`do_sample_frames`, default true).
    pub do_sample_frames: bool,
    /// Target sampling rate in frames per second (`fps`, default 2).
    pub fps: f64,
    /// Cap on sampled frames (`max_frames`, default 2048).
    pub max_frames: usize,
    /// Cap on the sampled duration in seconds; 0 = none (class attribute `max_duration`, not
    /// settable from the config upstream).
    pub max_duration: f64,
    /// A video file whose sampled frames would decode to more RGB24 bytes than this (frames x
    /// width x height x 3, from the container's metadata) is refused before decoding (glm5v's
    /// guard; upstream has none). Default [`DEFAULT_VIDEO_DECODE_BUDGET`].
    pub decode_budget_bytes: u64,
}

/// 8 GiB of RGB24: e.g. 1350 sampled 1080p frames (11 minutes at 2 fps).
pub const DEFAULT_VIDEO_DECODE_BUDGET: u64 = 8 << 30;

impl Default for VideoOptions {
    fn default() -> Self {
        VideoOptions {
            pixels: PixelOptions::upstream(240_000),
            do_sample_frames: true,
            fps: 2.0,
            max_frames: 2048,
            max_duration: 0.0,
            decode_budget_bytes: DEFAULT_VIDEO_DECODE_BUDGET,
        }
    }
}

/// Everything the `prep` crate needs to turn image bytes into `pixel_values`.
#[derive(Debug, Clone, PartialEq)]
pub struct PrepOptions {
    /// Pixel rules of the image processor: min/max image tokens (16/8000), patch 14,
    /// temporal patch 2, merge 2, OpenAI CLIP mean/std, fused rescale + normalize.
    pub image: PixelOptions,
    /// How files are decoded (alpha handling, decode budget).
    pub decode: DecodeOptions,
    /// The video processor's options.
    pub video: VideoOptions,
}

impl Default for PrepOptions {
    fn default() -> Self {
        PrepOptions {
            image: PixelOptions::upstream(8000),
            decode: DecodeOptions::default(),
            video: VideoOptions::default(),
        }
    }
}

impl PrepOptions {
    /// Upstream's defaults, then `dir/preprocessor_config.json` and
    /// `dir/video_preprocessor_config.json` applied when present. Keys upstream honours:
    /// `min_image_tokens`, `max_image_tokens`, `patch_size`, `temporal_patch_size`, `merge_size`,
    /// `patch_expand_factor`, `image_mean`, `image_std`, `do_rescale`, `rescale_factor`,
    /// `do_normalize` (both files), and `fps`, `max_frames`, `do_sample_frames` (video file).
    /// `null` keeps the default, as upstream's `_set_attributes` does. `do_resize: false` and a
    /// `resample` other than 3 (bicubic) are refused (not implemented); `size` is ignored, as
    /// upstream ignores it; keys upstream does not read are ignored.
    pub fn with_model_dir(dir: impl AsRef<Path>) -> Result<Self> {
        let mut o = PrepOptions::default();
        let dir = dir.as_ref();
        let img = dir.join("preprocessor_config.json");
        if img.exists() {
            let v = read_json(&img)?;
            apply_pixels(&mut o.image, &v, &img)?;
            o.image.validate(&img.display().to_string())?;
        }
        let vid = dir.join("video_preprocessor_config.json");
        if vid.exists() {
            let v = read_json(&vid)?;
            apply_pixels(&mut o.video.pixels, &v, &vid)?;
            apply_video(&mut o.video, &v, &vid)?;
            o.video.pixels.validate(&vid.display().to_string())?;
        }
        Ok(o)
    }

    /// Checks both processors' options.
    pub fn validate(&self) -> Result<()> {
        self.image.validate("image options")?;
        self.video.pixels.validate("video options")?;
        if !(self.video.fps.is_finite() && self.video.fps > 0.0) {
            return Err(PrepError::InvalidOption(format!(
                "video fps {} must be positive",
                self.video.fps
            )));
        }
        Ok(())
    }
}

fn read_json(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).map_err(|source| PrepError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let v: Value = serde_json::from_str(&text).map_err(|e| PrepError::PreprocessorConfig {
        path: path.to_path_buf(),
        detail: format!("not valid JSON: {e}"),
    })?;
    if !v.is_object() {
        return Err(PrepError::PreprocessorConfig {
            path: path.to_path_buf(),
            detail: "the top level is not a JSON object".into(),
        });
    }
    Ok(v)
}

fn cfg_err(path: &Path, key: &str, detail: String) -> PrepError {
    PrepError::PreprocessorConfig {
        path: path.to_path_buf(),
        detail: format!("key `{key}`: {detail}"),
    }
}

/// The value of `key` unless absent or null.
fn get<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    v.get(key).filter(|x| !x.is_null())
}

fn get_usize(v: &Value, key: &str, path: &Path) -> Result<Option<usize>> {
    get(v, key)
        .map(|x| {
            x.as_u64().map(|n| n as usize).ok_or_else(|| {
                cfg_err(
                    path,
                    key,
                    format!("expected a non-negative integer, found {x}"),
                )
            })
        })
        .transpose()
}

fn get_f64(v: &Value, key: &str, path: &Path) -> Result<Option<f64>> {
    get(v, key)
        .map(|x| {
            x.as_f64()
                .ok_or_else(|| cfg_err(path, key, format!("expected a number, found {x}")))
        })
        .transpose()
}

fn get_bool(v: &Value, key: &str, path: &Path) -> Result<Option<bool>> {
    get(v, key)
        .map(|x| {
            x.as_bool()
                .ok_or_else(|| cfg_err(path, key, format!("expected true or false, found {x}")))
        })
        .transpose()
}

/// A mean/std: a list of 3 numbers, or one number broadcast (upstream accepts `float | list`).
fn get_triple(v: &Value, key: &str, path: &Path) -> Result<Option<[f64; 3]>> {
    let Some(x) = get(v, key) else {
        return Ok(None);
    };
    if let Some(n) = x.as_f64() {
        return Ok(Some([n; 3]));
    }
    let arr = x
        .as_array()
        .ok_or_else(|| cfg_err(path, key, format!("expected 3 numbers, found {x}")))?;
    if arr.len() != 3 {
        return Err(cfg_err(
            path,
            key,
            format!("expected 3 numbers (RGB), found {}", arr.len()),
        ));
    }
    let mut out = [0f64; 3];
    for (o, a) in out.iter_mut().zip(arr) {
        *o = a
            .as_f64()
            .ok_or_else(|| cfg_err(path, key, format!("expected a number, found {a}")))?;
    }
    Ok(Some(out))
}

fn apply_pixels(p: &mut PixelOptions, v: &Value, path: &Path) -> Result<()> {
    if let Some(x) = get_usize(v, "min_image_tokens", path)? {
        p.min_tokens = x;
    }
    if let Some(x) = get_usize(v, "max_image_tokens", path)? {
        p.max_tokens = x;
    }
    if let Some(x) = get_usize(v, "patch_size", path)? {
        p.patch_size = x;
    }
    if let Some(x) = get_usize(v, "temporal_patch_size", path)? {
        p.temporal_patch_size = x;
    }
    if let Some(x) = get_usize(v, "merge_size", path)? {
        p.merge_size = x;
    }
    if let Some(x) = get_usize(v, "patch_expand_factor", path)? {
        p.patch_expand_factor = x;
    }
    if let Some(x) = get_triple(v, "image_mean", path)? {
        p.image_mean = x;
    }
    if let Some(x) = get_triple(v, "image_std", path)? {
        p.image_std = x;
    }
    if let Some(x) = get_bool(v, "do_rescale", path)? {
        p.do_rescale = x;
    }
    if let Some(x) = get_f64(v, "rescale_factor", path)? {
        p.rescale_factor = x;
    }
    if let Some(x) = get_bool(v, "do_normalize", path)? {
        p.do_normalize = x;
    }
    if get_bool(v, "do_resize", path)? == Some(false) {
        return Err(cfg_err(
            path,
            "do_resize",
            "false is not supported (the model needs aligned canvases)".into(),
        ));
    }
    if let Some(r) = get(v, "resample")
        && r.as_u64() != Some(3)
    {
        return Err(cfg_err(
            path,
            "resample",
            format!("only 3 (bicubic) is supported, found {r}"),
        ));
    }
    Ok(())
}

fn apply_video(o: &mut VideoOptions, v: &Value, path: &Path) -> Result<()> {
    if let Some(x) = get_f64(v, "fps", path)? {
        if !(x.is_finite() && x > 0.0) {
            return Err(cfg_err(path, "fps", format!("must be positive, found {x}")));
        }
        o.fps = x;
    }
    if let Some(x) = get_usize(v, "max_frames", path)? {
        o.max_frames = x;
    }
    if let Some(x) = get_bool(v, "do_sample_frames", path)? {
        o.do_sample_frames = x;
    }
    Ok(())
}
