//! The GLM-5.3-Flash vision pixel contract (`../shared/UPSTREAM.md`, "The pixel contract"):
//! image bytes in, `pixel_values` + `image_grid_thw` out, identical to upstream's
//! `Glm5NextImageProcessor` (torchvision backend) and `Glm5NextVideoProcessor`.
//!
//! Pipeline per image: [`load_image`] (decode, PIL semantics) -> [`smart_resize::geometry`]
//! (canvas and content size) -> [`resize::resize_bicubic_aa`] (torch's uint8 antialiased bicubic,
//! bit for bit) -> [`pixels::pad_to`] (zero pad right/bottom) -> [`pixels::patchify`]
//! (fused rescale + normalize, block-major rows of `(c, t, ph, pw)`).
pub mod batch;
pub mod decode;
pub mod error;
pub mod options;
pub mod pixels;
pub mod prompt;
pub mod resize;
pub mod smart_resize;
pub mod video;

pub use batch::{PixelBatch, read_prep_safetensors, write_prep_safetensors};
pub use decode::{AlphaMode, DecodeOptions, ImageHeader, ImageSource, load_image, probe};
pub use error::{PrepError, Result};
pub use options::{PixelOptions, PrepOptions, VideoOptions};
pub use video::{PreparedVideo, prep_video_frames, prep_video_sources, sample_frames};

use image::RgbImage;
use rayon::prelude::*;

/// One image after the image processor.
#[derive(Debug, Clone)]
pub struct PreparedImage {
    /// `[grid_h*grid_w, patch_dim]` row-major (`pixel_values` of this image).
    pub pixel_values: Vec<f32>,
    /// `[1, grid_h, grid_w]` in patches (`image_grid_thw` of this image).
    pub grid_thw: [usize; 3],
    /// The padded uint8 canvas the rows were cut from.
    pub canvas: RgbImage,
    /// The resized content `(h, w)` at the canvas's top-left; the rest is zero.
    pub content: (usize, usize),
}

/// Runs the image processor on an RGB image: geometry with `num_frames = temporal_patch_size`,
/// resize (only when the content size differs), zero padding, normalisation, patchify with the
/// frame duplicated over t.
pub fn preprocess_rgb(img: &RgbImage, opts: &PrepOptions) -> Result<PreparedImage> {
    let p = &opts.image;
    p.validate("image options")?;
    let (h, w) = (img.height() as usize, img.width() as usize);
    let g = smart_resize::geometry(&p.budget(p.temporal_patch_size), h, w)?;
    let canvas = if g.content == (h, w) {
        pixels::pad_to(img, g.canvas)?
    } else {
        pixels::pad_to(&resize::resize_bicubic_aa(img, g.content)?, g.canvas)?
    };
    let lut = pixels::NormLut::new(p);
    let frames = vec![&canvas; p.temporal_patch_size];
    let (pixel_values, grid_thw) = pixels::patchify(&frames, p, &lut)?;
    Ok(PreparedImage {
        pixel_values,
        grid_thw,
        canvas,
        content: g.content,
    })
}

/// What an image will cost, from its header alone (one JSON line per image in the CLI).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Plan {
    /// The input's name ([`ImageSource::name`]).
    pub input: String,
    /// Width and height after EXIF orientation.
    pub width: usize,
    pub height: usize,
    /// Padded canvas in pixels.
    pub canvas_height: usize,
    pub canvas_width: usize,
    /// Resized content in pixels.
    pub content_height: usize,
    pub content_width: usize,
    /// `[1, grid_h, grid_w]` in patches.
    pub grid_thw: [usize; 3],
    /// Rows of `pixel_values` (`grid_h * grid_w`).
    pub patches: usize,
    /// Merged tokens (`grid_h * grid_w / merge_size^2`), the `<|image|>` count.
    pub tokens: usize,
}

/// The [`Plan`] of an image of `height x width` (after orientation).
pub fn plan_dims(input: String, height: usize, width: usize, opts: &PrepOptions) -> Result<Plan> {
    let p = &opts.image;
    p.validate("image options")?;
    let g = smart_resize::geometry(&p.budget(p.temporal_patch_size), height, width)?;
    let (gh, gw) = (g.canvas.0 / p.patch_size, g.canvas.1 / p.patch_size);
    Ok(Plan {
        input,
        width,
        height,
        canvas_height: g.canvas.0,
        canvas_width: g.canvas.1,
        content_height: g.content.0,
        content_width: g.content.1,
        grid_thw: [1, gh, gw],
        patches: gh * gw,
        tokens: gh * gw / (p.merge_size * p.merge_size),
    })
}

/// Plans an image from its header only ([`probe`]); no pixels are decoded.
pub fn plan_image(src: &ImageSource, opts: &PrepOptions) -> Result<Plan> {
    let hdr = probe(src, &opts.decode)?;
    plan_dims(src.name(), hdr.height as usize, hdr.width as usize, opts)
}

/// Decodes and preprocesses `srcs` in parallel and concatenates them in order, as upstream's
/// processor does for a list of images: `pixel_values` rows of image 0, then image 1, ...;
/// one `image_grid_thw` entry per image. The first failing input's error is returned.
pub fn prep_images(srcs: &[ImageSource], opts: &PrepOptions) -> Result<PixelBatch> {
    let prepared: Vec<PreparedImage> = srcs
        .par_iter()
        .map(|s| load_image(s, &opts.decode).and_then(|img| preprocess_rgb(&img, opts)))
        .collect::<Result<_>>()?;
    Ok(batch_of_images(prepared, opts.image.patch_dim()))
}

/// Concatenates prepared images into a batch (no videos).
pub fn batch_of_images(images: Vec<PreparedImage>, patch_dim: usize) -> PixelBatch {
    let mut b = PixelBatch::new(patch_dim);
    let total: usize = images.iter().map(|i| i.pixel_values.len()).sum();
    let mut images = images.into_iter();
    // The first image's rows become the batch's buffer (a large image's pixel_values are
    // ~150 MB: moving them instead of copying saves a pass over memory).
    if let Some(first) = images.next() {
        b.pixel_values = first.pixel_values;
        b.pixel_values.reserve(total - b.pixel_values.len());
        b.image_grid_thw.push(first.grid_thw.map(|d| d as i64));
    }
    for im in images {
        b.pixel_values.extend_from_slice(&im.pixel_values);
        b.image_grid_thw.push(im.grid_thw.map(|d| d as i64));
    }
    b
}

/// Appends a prepared video to a batch's video part.
pub fn push_video(batch: &mut PixelBatch, video: &PreparedVideo) {
    batch
        .pixel_values_videos
        .extend_from_slice(&video.pixel_values);
    batch.video_grid_thw.push(video.grid_thw.map(|d| d as i64));
}
