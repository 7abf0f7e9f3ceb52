//! Videos: upstream's `Glm5NextVideoProcessor` (frame sampling, one geometry for the whole clip,
//! frame pairs as temporal patches, `video_grid_thw`, timestamps).

use crate::decode::{ImageSource, load_image};
use crate::error::{PrepError, Result};
use crate::options::PrepOptions;
use crate::pixels::{NormLut, pad_to, patchify};
use crate::resize::resize_bicubic_aa;
use crate::smart_resize::geometry;
use image::RgbImage;
use rayon::prelude::*;

#[cfg(feature = "video")]
mod ffmpeg;
mod file;

pub use file::{
    VIDEO_FILES, VideoInfo, VideoPlan, decode_video_frames, plan_video, prep_video_file,
    probe_video,
};

/// `np.linspace(start, stop, num, dtype=int)`: `i * step + start` in double (`step = (stop -
/// start) / (num - 1)`), the last value set to `stop`, floored.
pub fn linspace_int(start: f64, stop: f64, num: usize) -> Vec<i64> {
    if num == 0 {
        return Vec::new();
    }
    if num == 1 {
        return vec![start.floor() as i64];
    }
    let div = (num - 1) as f64;
    let delta = stop - start;
    let step = delta / div;
    let mut y: Vec<f64> = (0..num)
        .map(|i| {
            if step == 0.0 {
                i as f64 / div * delta + start
            } else {
                i as f64 * step + start
            }
        })
        .collect();
    y[num - 1] = stop;
    y.into_iter().map(|v| v.floor() as i64).collect()
}

/// Upstream's `Glm5NextVideoProcessor.sample_frames`: indices of the frames to keep from a clip
/// of `total_frames` frames at `source_fps`, sampled at `target_fps` (at most `max_frames`,
/// duration capped by `max_duration` when positive), duplicates removed, the last index repeated
/// when the count is odd. `duration` is the container's (upstream's `metadata.duration`); `None`
/// or 0 means `round((total_frames - 1) / source_fps) + 1`. Like upstream, the result is empty
/// when `duration * target_fps` is below one frame.
pub fn sample_frames(
    total_frames: usize,
    source_fps: f64,
    duration: Option<f64>,
    target_fps: f64,
    max_frames: usize,
    max_duration: f64,
) -> Result<Vec<usize>> {
    if total_frames == 0 {
        return Err(PrepError::Video("the clip has no frames".into()));
    }
    let positive = |f: f64| f.is_finite() && f > 0.0;
    if !positive(source_fps) || !positive(target_fps) {
        return Err(PrepError::Video(format!(
            "frame rates must be positive (source {source_fps}, target {target_fps})"
        )));
    }
    let max_idx = total_frames - 1;
    let mut duration = match duration {
        Some(d) if d != 0.0 => d,
        _ => (max_idx as f64 / source_fps).round_ties_even() + 1.0,
    };
    let max_seconds = duration.trunc();
    if max_duration > 0.0 {
        duration = duration.min(max_duration);
    }
    let extract_t = ((duration * target_fps).trunc().max(0.0) as usize).min(max_frames);
    let per_frame = 1.0 / source_fps;

    let mut idx: Vec<i64> = if total_frames < extract_t {
        linspace_int(0.0, max_idx as f64, extract_t)
    } else {
        let mut v = Vec::new();
        let mut current = 0.0f64;
        let inv = 1.0 / target_fps;
        for i in 0..total_frames {
            if i as f64 * per_frame >= current {
                current += inv;
                v.push(i as i64);
                if current >= max_seconds {
                    break;
                }
            }
        }
        v
    };
    if idx.len() < extract_t {
        let (s, e) = match (idx.first(), idx.last()) {
            (Some(&s), Some(&e)) => (s, e),
            _ => (0, max_idx as i64),
        };
        idx = linspace_int(s as f64, e as f64, extract_t);
    } else if idx.len() > extract_t {
        idx = linspace_int(0.0, max_idx as f64, extract_t);
    }
    let mut uniq: Vec<usize> = Vec::with_capacity(idx.len() + 1);
    for i in idx {
        let i = i as usize;
        if !uniq.contains(&i) {
            uniq.push(i);
        }
    }
    if uniq.len() % 2 == 1 {
        uniq.push(*uniq.last().expect("non-empty"));
    }
    Ok(uniq)
}

/// One video after the video processor.
#[derive(Debug, Clone)]
pub struct PreparedVideo {
    /// `[grid_t*grid_h*grid_w, patch_dim]` row-major.
    pub pixel_values: Vec<f32>,
    /// `[grid_t, grid_h, grid_w]` (`video_grid_thw`).
    pub grid_thw: [usize; 3],
    /// Indices (into the frames given) of the frames processed, in order.
    pub frame_indices: Vec<usize>,
    /// `index / fps` of every processed frame (upstream's `metadata.timestamps`).
    pub timestamps: Vec<f64>,
    /// Padded canvas `(h, w)`.
    pub canvas: (usize, usize),
    /// Resized content `(h, w)`.
    pub content: (usize, usize),
}

/// Runs the video processor on a decoded clip: `frames` are all frames at `fps`. With
/// `opts.video.do_sample_frames` they are sampled first ([`sample_frames`], container duration
/// unknown); all kept frames must share one size. The canvas comes from `smart_resize` with
/// `num_frames` = kept frames; an odd count repeats the last frame to fill the last pair.
pub fn prep_video_frames(
    frames: &[RgbImage],
    fps: f64,
    opts: &PrepOptions,
) -> Result<PreparedVideo> {
    let v = &opts.video;
    v.pixels.validate("video options")?;
    if frames.is_empty() {
        return Err(PrepError::Video("no frames".into()));
    }
    if !(fps.is_finite() && fps > 0.0) {
        return Err(PrepError::Video(format!("fps {fps} must be positive")));
    }
    let indices = if v.do_sample_frames {
        sample_frames(frames.len(), fps, None, v.fps, v.max_frames, v.max_duration)?
    } else {
        (0..frames.len()).collect()
    };
    if indices.is_empty() {
        return Err(PrepError::Video(format!(
            "sampling {} frames at {fps} fps down to {} fps keeps no frame (the clip is shorter than one \
             sampling interval)",
            frames.len(),
            v.fps
        )));
    }
    let (w, h) = frames[indices[0]].dimensions();
    if let Some(&i) = indices.iter().find(|&&i| frames[i].dimensions() != (w, h)) {
        return Err(PrepError::Video(format!(
            "frame {i} is {}x{}, frame {} is {}x{} (a clip needs one size)",
            frames[i].height(),
            frames[i].width(),
            indices[0],
            h,
            w
        )));
    }
    let p = &v.pixels;
    let g = geometry(&p.budget(indices.len()), h as usize, w as usize)?;
    let canvases: Vec<RgbImage> = indices
        .par_iter()
        .map(|&i| {
            let f = &frames[i];
            if g.content == (h as usize, w as usize) {
                pad_to(f, g.canvas)
            } else {
                pad_to(&resize_bicubic_aa(f, g.content)?, g.canvas)
            }
        })
        .collect::<Result<_>>()?;
    let mut refs: Vec<&RgbImage> = canvases.iter().collect();
    while !refs.len().is_multiple_of(p.temporal_patch_size) {
        refs.push(refs[refs.len() - 1]);
    }
    let lut = NormLut::new(p);
    let (pixel_values, grid_thw) = patchify(&refs, p, &lut)?;
    let timestamps = indices.iter().map(|&i| i as f64 / fps).collect();
    Ok(PreparedVideo {
        pixel_values,
        grid_thw,
        frame_indices: indices,
        timestamps,
        canvas: g.canvas,
        content: g.content,
    })
}

/// A video given as a list of frame files (upstream's list-of-images video input): every frame
/// is decoded and used, without sampling (upstream refuses to sample such a list); `fps` only
/// sets the timestamps.
pub fn prep_video_sources(
    srcs: &[ImageSource],
    fps: f64,
    opts: &PrepOptions,
) -> Result<PreparedVideo> {
    let frames: Vec<RgbImage> = srcs
        .par_iter()
        .map(|s| load_image(s, &opts.decode))
        .collect::<Result<_>>()?;
    let mut o = opts.clone();
    o.video.do_sample_frames = false;
    prep_video_frames(&frames, fps, &o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linspace_matches_numpy_examples() {
        // np.linspace(0, 9, 4, dtype=int) -> [0, 3, 6, 9]; np.linspace(0, 10, 4, dtype=int) -> [0, 3, 6, 10]
        assert_eq!(linspace_int(0.0, 9.0, 4), vec![0, 3, 6, 9]);
        assert_eq!(linspace_int(0.0, 10.0, 4), vec![0, 3, 6, 10]);
        assert_eq!(linspace_int(5.0, 5.0, 3), vec![5, 5, 5]);
    }
}
