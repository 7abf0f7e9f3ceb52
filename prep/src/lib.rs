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
pub use decode::{
    AlphaMode, DecodeOptions, ImageHeader, ImageSource, decoder_panic_is_caught, jpeg_simd,
    load_image, probe,
};
pub use error::{PrepError, Result};
pub use options::{PixelOptions, PrepOptions, VideoOptions};
pub use video::{
    PreparedVideo, VIDEO_FILES, VideoInfo, VideoPlan, decode_video_frames, plan_video,
    prep_video_file, prep_video_frames, prep_video_sources, probe_video, sample_frames,
};

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
///
/// What `glm5v plan` prints: the canvas the processor will pad to, the content size it
/// resizes to, the grid and the number of `<|image|>` tokens, known before any decoding (an
/// image over PIL's pixel limit is refused here, from its header).
///
/// ```
/// use glm5v_prep::{ImageSource, PrepOptions, plan_image};
///
/// let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/prep/images/large_3264x2448.jpg");
/// let plan = plan_image(&ImageSource::from_arg(path), &PrepOptions::default())?;
///
/// assert_eq!((plan.width, plan.height), (3264, 2448));
/// // scaled down to fit the budget of 8000 merged tokens, then padded to whole 28-pixel blocks
/// assert_eq!((plan.content_width, plan.content_height), (2874, 2156));
/// assert_eq!((plan.canvas_width, plan.canvas_height), (2884, 2156));
/// assert_eq!(plan.grid_thw, [1, 154, 206]); // in 14-pixel patches
/// assert_eq!(plan.tokens, 154 * 206 / 4); // 7931 <|image|> placeholders
/// # Ok::<(), glm5v_prep::PrepError>(())
/// ```
pub fn plan_image(src: &ImageSource, opts: &PrepOptions) -> Result<Plan> {
    let hdr = probe(src, &opts.decode)?;
    plan_dims(src.name(), hdr.height as usize, hdr.width as usize, opts)
}

/// Decodes and preprocesses `srcs` in parallel and concatenates them in order, as upstream's
/// processor does for a list of images: `pixel_values` rows of image 0, then image 1, ...;
/// one `image_grid_thw` entry per image. The first failing input's error is returned.
///
/// The result equals [`load_image`] and [`preprocess_rgb`] image by image followed by
/// [`batch_of_images`], but no padded canvas is built: every image's rows are written straight
/// into the batch's single buffer (`pixels::write_image_rows`), each value once; a JPEG is
/// resized horizontally as it is decoded, and a PNG used at its own size is normalised band by
/// band while the rest of it is inflated (`decode::decode_for_prep`).
///
/// ```
/// use glm5v_prep::{ImageSource, PrepOptions, prep_images, read_prep_safetensors};
///
/// let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/prep");
/// // An EXIF-rotated JPEG and a 1x600 sliver (scaled up to the token minimum), in one batch.
/// let batch = prep_images(
///     &[
///         ImageSource::from_arg(&format!("{fixtures}/images/jpeg_exif_6.jpg")),
///         ImageSource::from_arg(&format!("{fixtures}/images/sliver_1x600.png")),
///     ],
///     &PrepOptions::default(),
/// )?;
/// assert_eq!(batch.patch_dim, 1176);
/// assert_eq!(batch.image_grid_thw.len(), 2);
///
/// // The same values, bit for bit, as upstream's `Glm5NextImageProcessor` returned for each
/// // (committed in the fixtures).
/// let mut rows = 0;
/// for (i, name) in ["jpeg_exif_6", "sliver_1x600"].iter().enumerate() {
///     let upstream = read_prep_safetensors(format!("{fixtures}/expected/{name}.safetensors"))?;
///     assert_eq!(upstream.image_grid_thw, [batch.image_grid_thw[i]]);
///     let n = upstream.pixel_values.len();
///     let ours = &batch.pixel_values[rows..rows + n];
///     assert!(ours.iter().zip(&upstream.pixel_values).all(|(a, b)| a.to_bits() == b.to_bits()));
///     rows += n;
/// }
/// assert_eq!(rows, batch.pixel_values.len());
/// # Ok::<(), glm5v_prep::PrepError>(())
/// ```
pub fn prep_images(srcs: &[ImageSource], opts: &PrepOptions) -> Result<PixelBatch> {
    let p = &opts.image;
    p.validate("image options")?;
    let budget = p.budget(p.temporal_patch_size);
    // Headers first: they give every image's place in the batch's buffer.
    let opened: Vec<(decode::Opened<'_>, smart_resize::Geometry)> = srcs
        .par_iter()
        .map(|s| {
            let o = decode::open_for_prep(s, &opts.decode)?;
            let g = smart_resize::geometry(&budget, o.height, o.width)?;
            Ok((o, g))
        })
        .collect::<Result<_>>()?;
    let dim = p.patch_dim();
    let sizes: Vec<usize> = opened
        .iter()
        .map(|(_, g)| (g.canvas.0 / p.patch_size) * (g.canvas.1 / p.patch_size) * dim)
        .collect();
    let total = sizes.iter().try_fold(0usize, |a, &n| a.checked_add(n));
    let total = total.ok_or_else(|| {
        PrepError::InvalidOption("the batch's pixel_values do not fit in memory".into())
    })?;
    let mut values: Vec<f32> = Vec::with_capacity(total);
    pixels::advise_huge_pages(&mut values);
    let lut = pixels::NormLut::new(p);
    let mut slices = Vec::with_capacity(sizes.len());
    let mut rest = &mut values.spare_capacity_mut()[..total];
    for &n in &sizes {
        let (mine, tail) = rest.split_at_mut(n);
        slices.push(mine);
        rest = tail;
    }
    let grids: Vec<[usize; 3]> = opened
        .par_iter()
        .zip(srcs)
        .zip(slices)
        .map(
            |(((o, g), s), out)| match decode::decode_for_prep(s, o, &opts.decode, g.content)? {
                decode::ForPrep::Raster(r) => {
                    pixels::write_image_rows(&r, g.content, g.canvas, p, &lut, out)
                }
                decode::ForPrep::Rows(rows) => {
                    match pixels::split_image_rows(&rows, g.content, g.canvas, p, &lut, out) {
                        Some(grid) => Ok(grid),
                        None => pixels::stream_image_rows(*rows, g.content, g.canvas, p, &lut, out),
                    }
                }
                decode::ForPrep::Jpeg(rows) => {
                    pixels::stream_jpeg_rows(&rows, g.content, g.canvas, p, &lut, out)
                }
            },
        )
        .collect::<Result<_>>()?;
    // SAFETY: the first `total` values were split into one slice per image, and every image's
    // writer filled its slice (each writes every value of its slice, or returns an error, and
    // an error returned above).
    unsafe { values.set_len(total) };
    let mut b = PixelBatch::new(dim);
    b.pixel_values = values;
    b.image_grid_thw = grids.iter().map(|g| g.map(|d| d as i64)).collect();
    Ok(b)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// How many values of `a` and `b` (side by side) differ in their bits.
    fn bits_differ(a: &[f32], b: &[f32]) -> usize {
        a.iter()
            .zip(b)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count()
    }

    /// A noisy RGB image encoded as PNG, or as JPEG (RGB, or gray when `seed` is odd).
    fn image_of(h: u32, w: u32, seed: u32, jpeg: bool) -> ImageSource {
        let mut s = seed;
        let img = RgbImage::from_fn(w, h, |x, y| {
            s = s.wrapping_mul(1_103_515_245).wrapping_add(12345);
            image::Rgb([
                (s >> 24) as u8,
                (x * 7 + y) as u8,
                (y * 3) as u8 ^ (s >> 16) as u8,
            ])
        });
        let mut bytes = Vec::new();
        let mut out = std::io::Cursor::new(&mut bytes);
        if !jpeg {
            img.write_to(&mut out, image::ImageFormat::Png).unwrap();
        } else if seed.is_multiple_of(2) {
            image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 85)
                .encode_image(&img)
                .unwrap();
        } else {
            let gray = image::DynamicImage::ImageRgb8(img).into_luma8();
            image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 85)
                .encode_image(&gray)
                .unwrap();
        }
        ImageSource::Bytes {
            name: format!("{h}x{w}.{}", if jpeg { "jpg" } else { "png" }),
            bytes,
        }
    }

    /// `prep_images` (rows written straight into the batch; JPEGs resized horizontally while
    /// decoding) equals `load_image` + `preprocess_rgb` (resize, pad, patchify) image by image,
    /// for every mix of resized / unchanged axes, with padding, for RGB and gray JPEGs large
    /// enough to be decoded in stripes, and for other patch geometries.
    #[test]
    fn prep_images_equals_preprocess_rgb() {
        let sizes = [
            (61, 47),
            (112, 112),
            (300, 200),
            (480, 640),
            (56, 700),
            (700, 56),
            (1, 600),
            (3, 5),
            (923, 1201),
            (3000, 1),
            (1500, 1100),
            (60, 9000),
        ];
        let mut o_small = PrepOptions::default();
        o_small.image.max_tokens = 64;
        let mut o_geom = PrepOptions::default();
        o_geom.image.patch_size = 16;
        o_geom.image.temporal_patch_size = 3;
        o_geom.image.merge_size = 3;
        let mut kinds = std::collections::HashSet::new();
        let options = [PrepOptions::default(), o_small, o_geom];
        for (oi, (o, jpeg)) in options
            .iter()
            .flat_map(|o| [(o, false), (o, true)])
            .enumerate()
        {
            let srcs: Vec<ImageSource> = sizes
                .iter()
                .enumerate()
                .map(|(i, &(h, w))| image_of(h, w, (oi * 100 + i) as u32, jpeg))
                .collect();
            let got = prep_images(&srcs, o).unwrap();
            let want: Vec<PreparedImage> = srcs
                .iter()
                .map(|s| preprocess_rgb(&load_image(s, &o.decode).unwrap(), o).unwrap())
                .collect();
            for (p, &(h, w)) in want.iter().zip(&sizes) {
                let (ch, cw) = p.content;
                let (ph, pw) = (p.canvas.height() as usize, p.canvas.width() as usize);
                kinds.insert((ch != h as usize, cw != w as usize, (ch, cw) != (ph, pw)));
            }
            let want = batch_of_images(want, o.image.patch_dim());
            assert_eq!(got.image_grid_thw, want.image_grid_thw, "options {oi}");
            assert_eq!(
                got.pixel_values.len(),
                want.pixel_values.len(),
                "options {oi}"
            );
            let differ = bits_differ(&got.pixel_values, &want.pixel_values);
            assert_eq!(differ, 0, "options {oi}: values differ");
        }
        // Both axes resized, one of them, neither; with and without padding.
        for k in [
            (true, true, false),
            (true, false, true),
            (false, true, true),
            (false, false, true),
            (true, true, true),
        ] {
            assert!(
                kinds.contains(&k),
                "no case of (resize h, resize w, pad) = {k:?}: {kinds:?}"
            );
        }
    }

    /// A photo-like RGB PNG (gradients and noise) compressed as zlib level 6 does, in blocks a
    /// second thread can find (the `image` crate's default encoder writes one block).
    fn zlib_png(h: usize, w: usize, seed: u32) -> ImageSource {
        let px = decode::test_photo(w, h, seed as u64 | 1 << 40);
        let bytes = decode::test_png(&px, w, h, png::Filter::Adaptive, 6);
        ImageSource::Bytes {
            name: format!("{h}x{w}.png"),
            bytes,
        }
    }

    /// PNGs large enough for the two-thread inflate ([`pixels::split_image_rows`]: no resize,
    /// image data past 128 KiB) give the same values as `load_image` + `preprocess_rgb`, with
    /// and without padding, in other patch geometries, and in a one-thread pool (no split).
    #[test]
    fn split_png_equals_preprocess_rgb() {
        use std::sync::atomic::Ordering;
        let sizes = [(480, 640), (476, 644), (300, 1000), (1000, 301)];
        let mut o_geom = PrepOptions::default();
        o_geom.image.patch_size = 16;
        o_geom.image.temporal_patch_size = 3;
        o_geom.image.merge_size = 3;
        let pool1 = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let pool2 = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        // the second part always runs (else a slow thread leaves everything to the first)
        crate::decode::inflate_wait_for_second(true);
        for (oi, o) in [PrepOptions::default(), o_geom].iter().enumerate() {
            for (i, &(h, w)) in sizes.iter().enumerate() {
                let src = zlib_png(h, w, (oi * 10 + i) as u32);
                let want = preprocess_rgb(&load_image(&src, &o.decode).unwrap(), o).unwrap();
                assert_eq!(want.content, (h, w), "{h}x{w} is not resized");
                for (threads, pool) in [(1, &pool1), (2, &pool2)] {
                    let before = pixels::SPLITS.load(Ordering::Relaxed);
                    let got = pool
                        .install(|| prep_images(std::slice::from_ref(&src), o))
                        .unwrap();
                    // (other tests may split at the same time: only "it did" is certain)
                    if threads == 2 {
                        let split = pixels::SPLITS.load(Ordering::Relaxed) > before;
                        assert!(split, "{h}x{w}, options {oi}: not split");
                    }
                    assert_eq!(got.image_grid_thw[0], want.grid_thw.map(|d| d as i64));
                    let differ = bits_differ(&got.pixel_values, &want.pixel_values);
                    assert_eq!(got.pixel_values.len(), want.pixel_values.len());
                    assert_eq!(differ, 0, "{h}x{w}, options {oi}, {threads} threads");
                }
            }
        }
        crate::decode::inflate_wait_for_second(false);
    }

    /// A file cut short fails in `prep_images` as in `load_image`, on every decoding path (a PNG
    /// read row by row, a JPEG resized while decoded, in stripes or not).
    #[test]
    fn truncated_inputs_fail_as_in_load_image() {
        let mut o = PrepOptions::default();
        o.image.max_tokens = 64;
        for (h, w, jpeg, opts) in [
            (480, 640, false, PrepOptions::default()),
            (480, 640, false, o.clone()),
            (1500, 1100, true, o.clone()),
            (300, 200, true, o.clone()),
        ] {
            let ImageSource::Bytes { name, bytes } = image_of(h, w, 2, jpeg) else {
                unreachable!()
            };
            for cut in [bytes.len() / 2, bytes.len() - 20] {
                let src = ImageSource::Bytes {
                    name: name.clone(),
                    bytes: bytes[..cut].to_vec(),
                };
                let want = load_image(&src, &opts.decode).unwrap_err().to_string();
                let got = prep_images(std::slice::from_ref(&src), &opts)
                    .unwrap_err()
                    .to_string();
                assert_eq!(got, want, "{name} cut at {cut}");
            }
        }
    }
}
