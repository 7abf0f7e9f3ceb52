//! From padded uint8 canvases to `pixel_values` rows, and back.
//!
//! Normalisation follows `TorchvisionBackend.rescale_and_normalize` (UPSTREAM.md item 7): with
//! rescale and normalize both on they are fused, `m = f32(mean) * f32(1/rescale_factor)` and
//! `s = f32(std) * f32(1/rescale_factor)` (each product rounded to f32), then `(x - m) / s` in
//! f32. Every uint8 value has one result per channel, so a 256-entry table holds them all.
//!
//! Patchify is upstream's `patchify`: rows in spatial-merge block-major order
//! `(t, block_row, block_col, in_row, in_col)`, each row `(c, t, ph, pw)`.
//!
//! The writers that make one decoded image's rows without building its canvas are in
//! `pixels/writers.rs`; the band they work in, canvas rows to `pixel_values` rows (scalar and
//! AVX-512), in `pixels/band.rs`.

use crate::error::{PrepError, Result};
use crate::options::PixelOptions;
use image::RgbImage;
use rayon::prelude::*;

mod band;
mod writers;

#[cfg(test)]
pub(crate) use writers::SPLITS;
pub(crate) use writers::{split_image_rows, stream_image_rows, stream_jpeg_rows, write_image_rows};

/// The f32 value of every uint8 level per channel: `lut[c][x]`.
#[derive(Debug, Clone, PartialEq)]
pub struct NormLut(pub [[f32; 256]; 3]);

impl NormLut {
    /// The table upstream's `rescale_and_normalize` implies for these options.
    pub fn new(p: &PixelOptions) -> Self {
        let mut lut = [[0f32; 256]; 3];
        for (c, row) in lut.iter_mut().enumerate() {
            let (mean, std) = (p.image_mean[c] as f32, p.image_std[c] as f32);
            let (m, s) = if p.do_rescale && p.do_normalize {
                // torch.tensor(mean) * (1.0 / rescale_factor): an f32 tensor times a Python
                // float, computed in f32.
                let inv = (1.0 / p.rescale_factor) as f32;
                (mean * inv, std * inv)
            } else {
                (mean, std)
            };
            for (x, v) in row.iter_mut().enumerate() {
                let xf = x as f32;
                *v = if p.do_normalize {
                    (xf - m) / s
                } else if p.do_rescale {
                    xf * p.rescale_factor as f32
                } else {
                    xf
                };
            }
        }
        NormLut(lut)
    }

    /// The uint8 level whose value is exactly `v` in channel `c`, if any.
    pub fn invert(&self, c: usize, v: f32) -> Option<u8> {
        let row = &self.0[c];
        // The table is monotonic (increasing or decreasing with the sign of std): bisect on the
        // ordering, then demand bit equality.
        let increasing = row[255] >= row[0];
        let (mut lo, mut hi) = (0usize, 255usize);
        while lo < hi {
            let mid = (lo + hi) / 2;
            let below = if increasing {
                row[mid] < v
            } else {
                row[mid] > v
            };
            if below {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        (row[lo].to_bits() == v.to_bits()).then_some(lo as u8)
    }
}

/// Checks a canvas can be cut into merge blocks of patches; returns `(gh, gw)` in patches.
fn grid_of(h: usize, w: usize, p: &PixelOptions) -> Result<(usize, usize)> {
    let unit = p.patch_size * p.merge_size;
    if h == 0 || w == 0 || !h.is_multiple_of(unit) || !w.is_multiple_of(unit) {
        return Err(PrepError::InvalidOption(format!(
            "canvas {h}x{w} is not a non-empty multiple of patch_size*merge_size = {unit}"
        )));
    }
    Ok((h / p.patch_size, w / p.patch_size))
}

/// Patchifies `frames` (equal-size canvases; their count a multiple of `temporal_patch_size`)
/// into normalised rows. Returns `(pixel_values, [grid_t, grid_h, grid_w])`, `pixel_values`
/// being `[grid_t*grid_h*grid_w, patch_dim]` row-major.
pub fn patchify(
    frames: &[&RgbImage],
    p: &PixelOptions,
    lut: &NormLut,
) -> Result<(Vec<f32>, [usize; 3])> {
    let tp = p.temporal_patch_size;
    if frames.is_empty() || !frames.len().is_multiple_of(tp) {
        return Err(PrepError::InvalidOption(format!(
            "patchify: {} frames is not a positive multiple of temporal_patch_size {tp}",
            frames.len()
        )));
    }
    let (w, h) = frames[0].dimensions();
    if let Some(f) = frames.iter().find(|f| f.dimensions() != (w, h)) {
        return Err(PrepError::InvalidOption(format!(
            "patchify: frames differ in size ({}x{} and {}x{})",
            h,
            w,
            f.height(),
            f.width()
        )));
    }
    let (h, w) = (h as usize, w as usize);
    let (gh, gw) = grid_of(h, w, p)?;
    let gt = frames.len() / tp;
    let (ps, ms) = (p.patch_size, p.merge_size);
    let dim = p.patch_dim();
    let per_t = gh * gw;
    let mut out = vec![0f32; gt * per_t * dim];
    out.par_chunks_mut(dim).enumerate().for_each(|(row, dst)| {
        let t = row / per_t;
        let (y0, x0) = patch_origin(row % per_t, gw, ms, ps);
        let mut i = 0;
        for c in 0..3 {
            for tt in 0..tp {
                let raw = frames[t * tp + tt].as_raw();
                for py in 0..ps {
                    let base = ((y0 + py) * w + x0) * 3 + c;
                    for px in 0..ps {
                        dst[i] = lut.0[c][raw[base + px * 3] as usize];
                        i += 1;
                    }
                }
            }
        }
    });
    Ok((out, [gt, gh, gw]))
}

/// Top-left pixel `(y, x)` of the patch at block-major index `idx` within one temporal slice.
fn patch_origin(idx: usize, gw: usize, ms: usize, ps: usize) -> (usize, usize) {
    let per_block = ms * ms;
    let blocks_w = gw / ms;
    let (block, inner) = (idx / per_block, idx % per_block);
    let (br, bc) = (block / blocks_w, block % blocks_w);
    let (ir, ic) = (inner / ms, inner % ms);
    ((br * ms + ir) * ps, (bc * ms + ic) * ps)
}

/// The inverse of [`patchify`]: rebuilds the `grid_t * temporal_patch_size` uint8 canvases from
/// `pixel_values` of one image or video. Every value must be exactly one of the table's values.
pub fn unpatchify(
    pixel_values: &[f32],
    grid: [usize; 3],
    p: &PixelOptions,
    lut: &NormLut,
) -> Result<Vec<RgbImage>> {
    let [gt, gh, gw] = grid;
    let (ps, ms, tp) = (p.patch_size, p.merge_size, p.temporal_patch_size);
    let dim = p.patch_dim();
    if gt == 0 || gh == 0 || gw == 0 || gh % ms != 0 || gw % ms != 0 {
        return Err(PrepError::InvalidOption(format!(
            "unpatchify: grid {grid:?} is empty or not a multiple of merge_size {ms}"
        )));
    }
    let rows = gt * gh * gw;
    if pixel_values.len() != rows * dim {
        return Err(PrepError::InvalidOption(format!(
            "unpatchify: {} values, grid {grid:?} needs {rows} rows of {dim} = {}",
            pixel_values.len(),
            rows * dim
        )));
    }
    let (h, w) = (gh * ps, gw * ps);
    let mut frames = vec![vec![0u8; h * w * 3]; gt * tp];
    for (row, src) in pixel_values.chunks_exact(dim).enumerate() {
        let t = row / (gh * gw);
        let (y0, x0) = patch_origin(row % (gh * gw), gw, ms, ps);
        let mut i = 0;
        for c in 0..3 {
            for tt in 0..tp {
                let f = &mut frames[t * tp + tt];
                for py in 0..ps {
                    for px in 0..ps {
                        let v = src[i];
                        let level = lut.invert(c, v).ok_or_else(|| {
                            PrepError::InvalidOption(format!(
                                "unpatchify: row {row} value {i} ({v}) is no normalised uint8 level of channel {c}"
                            ))
                        })?;
                        f[((y0 + py) * w + x0 + px) * 3 + c] = level;
                        i += 1;
                    }
                }
            }
        }
    }
    Ok(frames
        .into_iter()
        .map(|f| RgbImage::from_raw(w as u32, h as u32, f).expect("buffer sized for the canvas"))
        .collect())
}

/// [`unpatchify`] for an image (`grid_t == 1`): checks every temporal copy is identical (as
/// upstream duplicates the frame) and returns the canvas.
pub fn unpatchify_image(
    pixel_values: &[f32],
    grid: [usize; 3],
    p: &PixelOptions,
    lut: &NormLut,
) -> Result<RgbImage> {
    if grid[0] != 1 {
        return Err(PrepError::InvalidOption(format!(
            "unpatchify_image: grid {grid:?} has t != 1"
        )));
    }
    let mut frames = unpatchify(pixel_values, grid, p, lut)?;
    if frames.iter().any(|f| f != &frames[0]) {
        return Err(PrepError::InvalidOption(
            "unpatchify_image: the temporal copies of the image differ".into(),
        ));
    }
    Ok(frames.swap_remove(0))
}

/// Zero-pads `img` right and bottom to `(height, width)` (`tvF.pad(..., fill=0)`).
pub fn pad_to(img: &RgbImage, (height, width): (usize, usize)) -> Result<RgbImage> {
    let (w, h) = (img.width() as usize, img.height() as usize);
    if w > width || h > height {
        return Err(PrepError::InvalidOption(format!(
            "pad: {h}x{w} does not fit the {height}x{width} canvas"
        )));
    }
    if (w, h) == (width, height) {
        return Ok(img.clone());
    }
    let mut out = vec![0u8; height * width * 3];
    for (y, row) in img.as_raw().chunks_exact(w * 3).enumerate() {
        out[y * width * 3..y * width * 3 + w * 3].copy_from_slice(row);
    }
    Ok(RgbImage::from_raw(width as u32, height as u32, out).expect("buffer sized for the canvas"))
}

/// Buffers at least this large are backed by transparent huge pages where the kernel allows it.
const HUGE_PAGE_MIN_BYTES: usize = 4 << 20;

/// Asks the kernel (Linux, `madvise(MADV_HUGEPAGE)`) to back the spare capacity of `v` with 2 MiB
/// pages. A large `pixel_values` buffer is written once, right after it is allocated: with 4 KiB
/// pages that first write takes one page fault per 1024 values, which costs as much as the rest of
/// the work. Only advice: the contents are unchanged and a refusal changes nothing.
pub(crate) fn advise_huge_pages<T>(v: &mut Vec<T>) {
    let bytes = v.capacity() * std::mem::size_of::<T>();
    if bytes < HUGE_PAGE_MIN_BYTES {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        const PAGE: usize = 4096;
        const MADV_HUGEPAGE: std::ffi::c_int = 14;
        unsafe extern "C" {
            fn madvise(
                addr: *mut std::ffi::c_void,
                len: usize,
                advice: std::ffi::c_int,
            ) -> std::ffi::c_int;
        }
        let start = v.as_mut_ptr() as usize;
        let (lo, hi) = (start.next_multiple_of(PAGE), (start + bytes) & !(PAGE - 1));
        if hi > lo {
            // SAFETY: [lo, hi) lies inside the allocation `v` owns; MADV_HUGEPAGE changes no
            // contents and no permissions. The result is ignored: the advice is optional.
            unsafe { madvise(lo as *mut std::ffi::c_void, hi - lo, MADV_HUGEPAGE) };
        }
    }
}
