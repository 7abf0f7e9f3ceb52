//! The inputs of `embed` (and `prep`): image files or data URIs, video frames, or a prepared
//! pixel batch (the preprocessed-inputs layout, README "File formats").

use anyhow::{Context, Result, bail};
use glm5v_prep::{
    AlphaMode, ImageSource, PixelBatch, PrepOptions, prep_images, prep_video_file,
    prep_video_sources, push_video, read_prep_safetensors,
};
use glm5v_reference::Grid;
use ndarray::Array2;
use std::path::{Path, PathBuf};

/// Token budget and alpha options shared by `plan`, `prep` and `embed`.
#[derive(clap::Args, Clone, Debug)]
pub struct TokenArgs {
    /// Fewest merged tokens per image (default 16, or the model's preprocessor_config.json).
    #[arg(long, value_name = "N")]
    pub min_image_tokens: Option<u64>,
    /// Most merged tokens per image (default 8000, or the model's preprocessor_config.json).
    #[arg(long, value_name = "N")]
    pub max_image_tokens: Option<u64>,
}

/// What `embed` reads.
#[derive(clap::Args, Clone, Debug)]
pub struct InputArgs {
    /// Images: paths, directories (searched recursively by image extension), @LIST (a file of
    /// paths, one a line; @- reads standard input) or data URIs (data:image/png;base64,...), in order.
    #[arg(value_name = "IMAGE", conflicts_with = "pixels")]
    pub images: Vec<String>,
    /// Video files (MP4, MKV, WebM, AVI, ...; decoded, sampled at 2 fps and paired as upstream's
    /// video processor does with torchcodec; needs a build with --features video), one video
    /// each, after the images; or, with --fps, the frames (image files, in order) of one video.
    #[arg(long, value_name = "FILE|FRAME", num_args = 1.., conflicts_with = "pixels")]
    pub video: Vec<String>,
    /// Frame rate of the --video frames (makes the --video arguments frames of one video).
    #[arg(long, value_name = "F")]
    pub fps: Option<f64>,
    /// A prepared batch (`glm5v prep` output, or upstream's processor output saved as safetensors).
    #[arg(long, value_name = "FILE")]
    pub pixels: Option<PathBuf>,
    /// Transparency: `drop` (what transformers' load_image does, the default) or `white` (composite
    /// over white, what the processor does for PIL images that keep their alpha).
    #[arg(long, default_value = "drop", value_parser = ["drop", "white"])]
    pub alpha: String,
    #[command(flatten)]
    pub tokens: TokenArgs,
}

/// A packed batch: images first, then videos (the tower treats every grid row alike).
pub struct Batch {
    /// `[N, patch_dim]`
    pub pixel_values: Array2<f32>,
    pub grids: Vec<Grid>,
    pub images: usize,
    /// One name per grid row, for messages and output metadata.
    pub names: Vec<String>,
}

impl Batch {
    pub fn image_grids(&self) -> impl Iterator<Item = Grid> + '_ {
        self.grids[..self.images].iter().copied()
    }
    pub fn video_grids(&self) -> impl Iterator<Item = Grid> + '_ {
        self.grids[self.images..].iter().copied()
    }
}

impl TokenArgs {
    /// Upstream's defaults, then `model`'s preprocessor configs, then these flags; `alpha` as given.
    pub fn prep_options(&self, model: Option<&Path>, alpha: &str) -> Result<PrepOptions> {
        let mut o = match model {
            Some(dir) => PrepOptions::with_model_dir(dir)?,
            None => PrepOptions::default(),
        };
        if let Some(n) = self.min_image_tokens {
            o.image.min_tokens = usize::try_from(n).context("--min-image-tokens is too large")?;
        }
        if let Some(n) = self.max_image_tokens {
            o.image.max_tokens = usize::try_from(n).context("--max-image-tokens is too large")?;
        }
        o.decode.alpha = match alpha {
            "white" => AlphaMode::White,
            _ => AlphaMode::Drop,
        };
        o.validate()?;
        Ok(o)
    }
}

/// Preprocesses images (in order), then the `video` arguments: with `fps`, the frames of one
/// video; without, video files, one video each, in order.
pub fn prep_batch(
    images: &[String],
    video: &[String],
    fps: Option<f64>,
    opts: &PrepOptions,
) -> Result<PixelBatch> {
    if images.is_empty() && video.is_empty() {
        bail!(
            "no input: give IMAGE paths or data URIs, --video FILE..., or --video FRAME... --fps F"
        );
    }
    if fps.is_some() && video.is_empty() {
        bail!("--fps is the frame rate of --video FRAME...: give the frames");
    }
    let srcs: Vec<ImageSource> = images.iter().map(|a| ImageSource::from_arg(a)).collect();
    let mut batch = if srcs.is_empty() {
        PixelBatch::new(opts.image.patch_dim())
    } else {
        prep_images(&srcs, opts)?
    };
    match fps {
        Some(fps) if !video.is_empty() => {
            let frames: Vec<ImageSource> = video.iter().map(|a| ImageSource::from_arg(a)).collect();
            let v = prep_video_sources(&frames, fps, opts)?;
            push_video(&mut batch, &v);
        }
        _ => {
            for file in video {
                let v = prep_video_file(Path::new(file), opts)?;
                push_video(&mut batch, &v);
            }
        }
    }
    Ok(batch)
}

impl InputArgs {
    /// Loads the batch; `model` supplies a preprocessor_config.json when it has one.
    pub fn load(&self, model: Option<&Path>) -> Result<Batch> {
        if let Some(p) = &self.pixels {
            let b = read_prep_safetensors(p)?;
            let name = p.display().to_string();
            return Ok(Batch::from_pixels(b, |kind, i| {
                format!("{name} {kind} {i}")
            }));
        }
        let opts = self.tokens.prep_options(model, &self.alpha)?;
        let b = prep_batch(&self.images, &self.video, self.fps, &opts)?;
        let mut names: Vec<String> = self.images.iter().map(|a| short_arg(a)).collect();
        if self.fps.is_some() && !self.video.is_empty() {
            names.push(format!(
                "video of {} frames from {}",
                self.video.len(),
                short_arg(&self.video[0])
            ));
        } else {
            names.extend(self.video.iter().map(|v| format!("video {v}")));
        }
        let mut batch = Batch::from_pixels(b, |_, _| String::new());
        batch.names = names;
        Ok(batch)
    }
}

impl Batch {
    /// Packs a prep batch for the tower: image rows, then video rows.
    pub fn from_pixels(b: PixelBatch, name: impl Fn(&str, usize) -> String) -> Self {
        let to_grid = |g: &[i64; 3]| g.map(|v| v as usize);
        let images = b.image_grid_thw.len();
        let videos = b.video_grid_thw.len();
        let mut grids: Vec<Grid> = b.image_grid_thw.iter().map(to_grid).collect();
        grids.extend(b.video_grid_thw.iter().map(to_grid));
        let rows = b.image_rows() + b.video_rows();
        let mut data = b.pixel_values;
        data.extend_from_slice(&b.pixel_values_videos);
        let pixel_values =
            Array2::from_shape_vec((rows, b.patch_dim), data).expect("a validated batch");
        let names = (0..images)
            .map(|i| name("image", i))
            .chain((0..videos).map(|i| name("video", i)))
            .collect();
        Batch {
            pixel_values,
            grids,
            images,
            names,
        }
    }
}

/// An input argument for messages: a data URI is shortened.
pub fn short_arg(a: &str) -> String {
    if a.starts_with("data:") && a.len() > 40 {
        format!("{}... ({} bytes)", &a[..30], a.len())
    } else {
        a.to_string()
    }
}
