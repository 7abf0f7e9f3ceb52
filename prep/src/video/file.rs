//! Video files: what upstream's `Glm5NextVideoProcessor()(videos=["clip.mp4"])` does with a path
//! in transformers 5.23.0 (`video_utils.read_video_torchcodec`, torchcodec 0.17.0 over the system's
//! FFmpeg): the metadata torchcodec reports in exact seek mode, `sample_frames` on it, the sampled
//! frames decoded and converted to RGB24 as torchcodec converts them (`ffmpeg.rs`, `shim.c`), then
//! the pixel contract of the video processor. `plan_video` does the same without decoding a frame.
//!
//! FFmpeg comes with the `video` cargo feature; without it these functions return
//! [`PrepError::VideoSupport`].

use super::{PreparedVideo, sample_frames};
use crate::error::{PrepError, Result};
use crate::options::PrepOptions;
use crate::pixels::{NormLut, pad_to, patchify};
use crate::resize::resize_bicubic_aa;
use crate::smart_resize::{Geometry, geometry};
use image::RgbImage;
use rayon::prelude::*;
use std::path::Path;

/// A video file's metadata as torchcodec's `VideoDecoder(seek_mode="exact").metadata` reports it
/// (and as transformers copies it into its `VideoMetadata`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct VideoInfo {
    /// Frames found by scanning every packet of the stream (`num_frames`, `total_num_frames`).
    pub num_frames: usize,
    /// `num_frames / duration`, or the stream's `r_frame_rate` when the duration is 0
    /// (`average_fps`, upstream's `metadata.fps`); `None` when neither is known.
    pub average_fps: Option<f64>,
    /// `end - begin` of the packets' presentation times in seconds (`duration_seconds`).
    pub duration: f64,
    /// First presentation time in seconds.
    pub begin_seconds: f64,
    /// The stream's `r_frame_rate` (`average_fps_from_header`), 0 when unknown.
    pub fps_header: f64,
    /// Frame size after the display matrix's rotation (torchcodec rotates the frames).
    pub width: usize,
    pub height: usize,
    /// Rotation of the display matrix, rounded to 0, 90 (counter-clockwise), -90 or 180.
    pub rotation: i32,
    /// FFmpeg's names of the codec, pixel format and container.
    pub codec: String,
    pub pix_fmt: String,
    pub container: String,
    /// Bits per component of the pixel format (torchcodec gives uint8 frames for all).
    pub bits_per_component: u32,
}

impl VideoInfo {
    /// The metadata of a scan (torchcodec's `Metadata.cpp` rules for exact mode).
    #[allow(clippy::too_many_arguments)]
    pub fn from_scan(
        num_frames: usize,
        begin_seconds: f64,
        end_seconds: f64,
        fps_header: f64,
        width: usize,
        height: usize,
        rotation: i32,
        codec: String,
        pix_fmt: String,
        container: String,
        bits_per_component: u32,
    ) -> Self {
        let duration = end_seconds - begin_seconds;
        let average_fps = if duration != 0.0 {
            Some(num_frames as f64 / duration)
        } else if fps_header > 0.0 {
            Some(fps_header)
        } else {
            None
        };
        VideoInfo {
            num_frames,
            average_fps,
            duration,
            begin_seconds,
            fps_header,
            width,
            height,
            rotation,
            codec,
            pix_fmt,
            container,
            bits_per_component,
        }
    }
}

/// What a video file will cost, from its metadata alone (no frame decoded).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct VideoPlan {
    pub input: String,
    pub info: VideoInfo,
    /// Upstream's `sample_frames` indices (the last repeated when their count is odd).
    pub frame_indices: Vec<usize>,
    /// `index / average_fps` per sampled frame (`metadata.timestamps`).
    pub timestamps: Vec<f64>,
    pub canvas_height: usize,
    pub canvas_width: usize,
    pub content_height: usize,
    pub content_width: usize,
    /// `video_grid_thw`.
    pub grid_thw: [usize; 3],
    /// Rows of `pixel_values_videos`.
    pub patches: usize,
    /// `<|image|>` placeholders over all frame pairs.
    pub tokens: usize,
}

/// The sampled indices, timestamps and geometry of a clip with metadata `info`; refuses a clip
/// whose sampled frames exceed the decode budget.
fn schedule(
    input: &str,
    info: &VideoInfo,
    opts: &PrepOptions,
) -> Result<(Vec<usize>, Vec<f64>, Geometry)> {
    let v = &opts.video;
    v.pixels.validate("video options")?;
    if info.num_frames == 0 {
        return Err(PrepError::Video(format!(
            "{input}: the video stream has no frames"
        )));
    }
    if info.width == 0 || info.height == 0 {
        return Err(PrepError::Video(format!(
            "{input}: the video stream has zero width or height ({}x{})",
            info.width, info.height
        )));
    }
    let fps = info.average_fps.ok_or_else(|| {
        PrepError::Video(format!(
            "{input}: the video has no frame rate (neither a duration nor r_frame_rate), which upstream's \
             sample_frames needs"
        ))
    })?;
    let indices = if v.do_sample_frames {
        sample_frames(
            info.num_frames,
            fps,
            Some(info.duration),
            v.fps,
            v.max_frames,
            v.max_duration,
        )
        .map_err(|e| PrepError::Video(format!("{input}: {e}")))?
    } else {
        (0..info.num_frames).collect()
    };
    if indices.is_empty() {
        return Err(PrepError::Video(format!(
            "{input}: sampling {} frames ({:.3} s) at {} fps keeps no frame (the clip is shorter than one \
             sampling interval)",
            info.num_frames, info.duration, v.fps
        )));
    }
    let mut unique = indices.clone();
    unique.dedup();
    let bytes = (unique.len() as u128) * (info.width as u128) * (info.height as u128) * 3;
    if bytes > v.decode_budget_bytes as u128 {
        return Err(PrepError::VideoDecodeBudget {
            input: input.into(),
            frames: unique.len(),
            width: info.width as u64,
            height: info.height as u64,
            bytes: bytes.min(u64::MAX as u128) as u64,
            budget: v.decode_budget_bytes,
        });
    }
    let g = geometry(&v.pixels.budget(indices.len()), info.height, info.width)
        .map_err(|e| PrepError::Video(format!("{input}: {e}")))?;
    let timestamps = indices.iter().map(|&i| i as f64 / fps).collect();
    Ok((indices, timestamps, g))
}

fn plan_of(input: String, info: VideoInfo, opts: &PrepOptions) -> Result<VideoPlan> {
    let (frame_indices, timestamps, g) = schedule(&input, &info, opts)?;
    let p = &opts.video.pixels;
    let gt = frame_indices.len().div_ceil(p.temporal_patch_size);
    let (gh, gw) = (g.canvas.0 / p.patch_size, g.canvas.1 / p.patch_size);
    Ok(VideoPlan {
        input,
        info,
        frame_indices,
        timestamps,
        canvas_height: g.canvas.0,
        canvas_width: g.canvas.1,
        content_height: g.content.0,
        content_width: g.content.1,
        grid_thw: [gt, gh, gw],
        patches: gt * gh * gw,
        tokens: gt * gh * gw / (p.merge_size * p.merge_size),
    })
}

/// Runs the video processor's pixel steps on decoded frames (one per sampled index, in order).
fn pixels_of(
    frames: &mut dyn FnMut(usize) -> Result<RgbImage>,
    indices: Vec<usize>,
    timestamps: Vec<f64>,
    g: Geometry,
    (h, w): (usize, usize),
    opts: &PrepOptions,
) -> Result<PreparedVideo> {
    let p = &opts.video.pixels;
    let mut unique = indices.clone();
    unique.dedup();
    // Decoded a few frames at a time (in order, one decoder), each batch resized and padded in
    // parallel: memory holds the canvases and one batch of decoded frames, never the clip.
    let batch = 2 * rayon::current_num_threads().max(1);
    let mut canvases: Vec<RgbImage> = Vec::with_capacity(unique.len());
    for part in unique.chunks(batch) {
        let decoded: Vec<RgbImage> = part.iter().map(|&i| frames(i)).collect::<Result<_>>()?;
        let mut done: Vec<RgbImage> = decoded
            .par_iter()
            .map(|f| {
                if g.content == (h, w) {
                    pad_to(f, g.canvas)
                } else {
                    pad_to(&resize_bicubic_aa(f, g.content)?, g.canvas)
                }
            })
            .collect::<Result<_>>()?;
        canvases.append(&mut done);
    }
    // indices are non-decreasing: a repeat uses the canvas of the frame before it
    let mut slot: Vec<usize> = Vec::with_capacity(indices.len());
    let mut k = 0;
    for (n, &i) in indices.iter().enumerate() {
        if n > 0 && indices[n - 1] != i {
            k += 1;
        }
        slot.push(k);
    }
    let mut refs: Vec<&RgbImage> = slot.iter().map(|&s| &canvases[s]).collect();
    while !refs.len().is_multiple_of(p.temporal_patch_size) {
        refs.push(refs[refs.len() - 1]);
    }
    let lut = NormLut::new(p);
    let (pixel_values, grid_thw) = patchify(&refs, p, &lut)?;
    Ok(PreparedVideo {
        pixel_values,
        grid_thw,
        frame_indices: indices,
        timestamps,
        canvas: g.canvas,
        content: g.content,
    })
}

/// The metadata of the video file at `path`, as torchcodec reports it (packets scanned, no frame
/// decoded).
pub fn probe_video(path: &Path) -> Result<VideoInfo> {
    imp::open(path).map(|d| d.info().clone())
}

/// Plans a video file from its metadata: sampled frames, timestamps, canvas, grid and tokens,
/// without decoding a frame (the decode budget is checked too).
pub fn plan_video(path: &Path, opts: &PrepOptions) -> Result<VideoPlan> {
    let info = probe_video(path)?;
    plan_of(path.display().to_string(), info, opts)
}

/// Decodes, samples and preprocesses the video file at `path` as upstream's
/// `Glm5NextVideoProcessor()(videos=[path])` does (torchcodec, fps 2): `pixel_values_videos`,
/// `video_grid_thw`, the sampled frame indices and their timestamps (for the prompt, see
/// [`crate::prompt::video_replacement`]). The budget is checked before any frame is decoded.
pub fn prep_video_file(path: &Path, opts: &PrepOptions) -> Result<PreparedVideo> {
    let input = path.display().to_string();
    let mut dec = imp::open(path)?;
    let info = dec.info().clone();
    let (indices, timestamps, g) = schedule(&input, &info, opts)?;
    if let Some(&i) = indices.iter().find(|&&i| i >= info.num_frames) {
        return Err(PrepError::Video(format!(
            "{input}: sampled frame {i} is past the last frame"
        )));
    }
    pixels_of(
        &mut |i| dec.frame(i),
        indices,
        timestamps,
        g,
        (info.height, info.width),
        opts,
    )
}

/// The frames `indices` (non-decreasing, in presentation order) of the video file at `path`,
/// decoded and converted to RGB24 as torchcodec's `get_frames_at` returns them (rotated by the
/// display matrix). For checks against upstream's decoder; [`prep_video_file`] streams instead.
pub fn decode_video_frames(path: &Path, indices: &[usize]) -> Result<Vec<RgbImage>> {
    let mut dec = imp::open(path)?;
    let n = dec.info().num_frames;
    if let Some(w) = indices.windows(2).find(|w| w[1] < w[0]) {
        return Err(PrepError::Video(format!(
            "{}: frame indices must not decrease ({} after {})",
            path.display(),
            w[1],
            w[0]
        )));
    }
    if let Some(&i) = indices.iter().find(|&&i| i >= n) {
        return Err(PrepError::Video(format!(
            "{}: frame {i} is past the last frame ({n} frames)",
            path.display()
        )));
    }
    let mut out: Vec<RgbImage> = Vec::with_capacity(indices.len());
    for (k, &i) in indices.iter().enumerate() {
        if k > 0 && indices[k - 1] == i {
            let again = out[k - 1].clone();
            out.push(again);
        } else {
            out.push(dec.frame(i)?);
        }
    }
    Ok(out)
}

/// Whether this build reads video files (the `video` feature).
pub const VIDEO_FILES: bool = cfg!(feature = "video");

#[cfg(feature = "video")]
mod imp {
    use super::super::ffmpeg::Decoder;
    use super::VideoInfo;
    use crate::error::Result;
    use image::RgbImage;
    use std::path::Path;

    pub struct Open(Decoder);

    pub fn open(path: &Path) -> Result<Open> {
        if let Err(source) = std::fs::metadata(path) {
            return Err(crate::error::PrepError::Io {
                path: path.to_path_buf(),
                source,
            });
        }
        Decoder::open(path, &path.display().to_string()).map(Open)
    }

    impl Open {
        pub fn info(&self) -> &VideoInfo {
            &self.0.info
        }
        pub fn frame(&mut self, i: usize) -> Result<RgbImage> {
            self.0.frame(i)
        }
    }
}

#[cfg(not(feature = "video"))]
mod imp {
    use super::VideoInfo;
    use crate::error::{PrepError, Result};
    use image::RgbImage;
    use std::path::Path;

    pub enum Open {}

    pub fn open(path: &Path) -> Result<Open> {
        Err(PrepError::VideoSupport {
            input: path.display().to_string(),
        })
    }

    impl Open {
        pub fn info(&self) -> &VideoInfo {
            match *self {}
        }
        pub fn frame(&mut self, _: usize) -> Result<RgbImage> {
            match *self {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(num_frames: usize, end: f64, w: usize, h: usize) -> VideoInfo {
        VideoInfo::from_scan(
            num_frames,
            0.0,
            end,
            25.0,
            w,
            h,
            0,
            "h264".into(),
            "yuv420p".into(),
            "mp4".into(),
            8,
        )
    }

    #[test]
    fn average_fps_is_frames_over_duration_else_the_header() {
        assert_eq!(info(50, 2.0, 8, 8).average_fps, Some(25.0));
        assert_eq!(info(1, 0.0, 8, 8).average_fps, Some(25.0));
        let none = VideoInfo::from_scan(
            1,
            0.0,
            0.0,
            0.0,
            8,
            8,
            0,
            String::new(),
            String::new(),
            String::new(),
            8,
        );
        assert_eq!(none.average_fps, None);
    }

    #[test]
    fn budget_is_checked_on_the_sampled_frames() {
        let mut o = PrepOptions::default();
        // 10 s at 25 fps, sampled at 2 fps: 20 frames of 640x480x3 = 18,432,000 bytes
        let i = info(250, 10.0, 640, 480);
        let (idx, _, _) = schedule("x", &i, &o).unwrap();
        assert_eq!(idx.len(), 20);
        o.video.decode_budget_bytes = 18_432_000;
        assert!(schedule("x", &i, &o).is_ok());
        o.video.decode_budget_bytes = 18_431_999;
        match schedule("x", &i, &o) {
            Err(PrepError::VideoDecodeBudget { frames, bytes, .. }) => {
                assert_eq!((frames, bytes), (20, 18_432_000))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_clip_shorter_than_one_interval_keeps_no_frame() {
        // 1 frame, 0.4 s: int(0.4 * 2) = 0 frames to extract
        let e = schedule("x", &info(1, 0.4, 8, 8), &PrepOptions::default()).unwrap_err();
        assert!(e.to_string().contains("keeps no frame"), "{e}");
    }
}
