//! From padded uint8 canvases to `pixel_values` rows, and back.
//!
//! Normalisation follows `TorchvisionBackend.rescale_and_normalize` (UPSTREAM.md item 7): with
//! rescale and normalize both on they are fused, `m = f32(mean) * f32(1/rescale_factor)` and
//! `s = f32(std) * f32(1/rescale_factor)` (each product rounded to f32), then `(x - m) / s` in
//! f32. Every uint8 value has one result per channel, so a 256-entry table holds them all.
//!
//! Patchify is upstream's `patchify`: rows in spatial-merge block-major order
//! `(t, block_row, block_col, in_row, in_col)`, each row `(c, t, ph, pw)`.

use crate::decode::{JpegRows, PrepRaster, StreamRows};
use crate::error::{PrepError, Result};
use crate::options::PixelOptions;
use crate::resize;
use image::RgbImage;
use rayon::prelude::*;
use std::mem::MaybeUninit;

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

/// [`grid_of`] for a writer of one image's rows, also checking that `out_len` values are exactly
/// the canvas's `grid_h * grid_w * patch_dim`.
fn out_grid(out_len: usize, h: usize, w: usize, p: &PixelOptions) -> Result<(usize, usize)> {
    let (gh, gw) = grid_of(h, w, p)?;
    let need = gh * gw * p.patch_dim();
    if out_len != need {
        return Err(PrepError::InvalidOption(format!(
            "image rows: {out_len} values given, the {h}x{w} canvas needs {need}"
        )));
    }
    Ok((gh, gw))
}

/// For a writer that resizes an `input` image (height, width) to `content` inside `canvas`: all
/// non-empty, the content inside the canvas.
fn check_content(
    (in_h, in_w): (usize, usize),
    (ch, cw): (usize, usize),
    (h, w): (usize, usize),
) -> Result<()> {
    if in_h == 0 || in_w == 0 || ch == 0 || cw == 0 || ch > h || cw > w {
        return Err(PrepError::InvalidOption(format!(
            "image {in_h}x{in_w}: content {ch}x{cw} must be non-empty and fit the {h}x{w} canvas"
        )));
    }
    Ok(())
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

/// The rows of one decoded image (`grid_t == 1`) written straight into `out`, without building
/// the padded canvas: what [`crate::resize::resize_bicubic_aa`] to `content`, [`pad_to`] `canvas` and
/// [`patchify`] with the frame repeated `temporal_patch_size` times give, value for value.
///
/// The canvas is made one band of `patch_size * merge_size` rows at a time (a band's rows are
/// one contiguous run of `pixel_values` rows in block-major order), in a small buffer that stays
/// in cache: the vertical resize pass writes into it, the padding is zeroed in it, and the band is
/// normalised into its rows at once; bands run in parallel. Every element of `out` is written
/// exactly once; `out` must hold `grid_h * grid_w * patch_dim` values. Returns `[1, grid_h, grid_w]`.
pub(crate) fn write_image_rows(
    img: &PrepRaster,
    content: (usize, usize),
    canvas: (usize, usize),
    p: &PixelOptions,
    lut: &NormLut,
    out: &mut [MaybeUninit<f32>],
) -> Result<[usize; 3]> {
    let (in_h, in_w, row_w) = (img.height, img.width, img.row_width);
    let ((ch, cw), (h, w)) = (content, canvas);
    check_content((in_h, in_w), content, canvas)?;
    if !(row_w == in_w || row_w == cw) || img.rows.len() != in_h * row_w * 3 {
        return Err(PrepError::InvalidOption(format!(
            "image {in_h}x{in_w}: {} bytes of rows {row_w} wide, content {ch}x{cw}",
            img.rows.len()
        )));
    }
    let (gh, gw) = out_grid(out.len(), h, w, p)?;
    let (ps, ms, tp) = (p.patch_size, p.merge_size, p.temporal_patch_size);
    let dim = p.patch_dim();
    // Horizontal pass over the whole image (it runs on 16-row tiles), vertical pass per band.
    // (Skipped when the decoder already did it: `row_w == cw`.)
    let horiz = (cw != row_w).then(|| resize::horizontal::<3>(&img.rows, row_w, in_h, cw));
    let src: &[u8] = horiz.as_deref().unwrap_or(&img.rows);
    let vk = (ch != in_h).then(|| resize::axis_coeffs(in_h, ch));
    let unit = ps * ms;
    let (row_in, row_out) = (cw * 3, w * 3);
    out.par_chunks_mut(gw * ms * dim).enumerate().for_each_init(
        || vec![0u8; unit * row_out],
        |band, (bi, dst)| {
            canvas_band(band, bi, unit, ch, row_in, vk.as_ref(), src, 0);
            band_rows(band, w, ps, ms, tp, lut, dst);
        },
    );
    Ok([1, gh, gw])
}

/// Hand-overs of bands per image in [`stream_image_rows`].
const STREAM_HANDOVERS: usize = 6;

/// [`write_image_rows`] for an image whose rows are read on demand, top to bottom: the reading
/// thread decodes the rows that the next few bands need and hands those bands (horizontal and
/// vertical passes, padding, normalisation into their rows) to another thread while it goes on
/// decoding. (Neighbouring groups of bands resize the few input rows they share each.)
pub(crate) fn stream_image_rows(
    mut rows: StreamRows<'_>,
    content: (usize, usize),
    canvas: (usize, usize),
    p: &PixelOptions,
    lut: &NormLut,
    out: &mut [MaybeUninit<f32>],
) -> Result<[usize; 3]> {
    let (in_h, in_w) = (rows.height(), rows.width());
    let ((ch, cw), (h, w)) = (content, canvas);
    check_content((in_h, in_w), content, canvas)?;
    let (gh, gw) = out_grid(out.len(), h, w, p)?;
    let (ps, ms, tp) = (p.patch_size, p.merge_size, p.temporal_patch_size);
    let dim = p.patch_dim();
    let unit = ps * ms;
    let n_bands = gh / ms;
    let band_vals = gw * ms * dim;
    let (raw_row, row_in, row_out) = (in_w * 3, cw * 3, w * 3);
    let vk = (ch != in_h).then(|| resize::axis_coeffs(in_h, ch));
    let vk = vk.as_ref();
    let pass = (cw != in_w).then(|| resize::HorizontalPass::new(in_w, cw));
    let pass = pass.as_ref();
    let need = |b: usize| band_input_rows(b, unit, ch, in_h, vk);
    let mut img = vec![0u8; in_h * raw_row];
    let mut read = Ok(());
    // Bands go to the other threads a few at a time: each hand-over may wake a sleeping thread,
    // which costs the decoding thread more than a band's work.
    let group = n_bands.div_ceil(STREAM_HANDOVERS).max(1);
    let all: &mut [u8] = &mut img;
    rayon::scope(|s| {
        let mut rest = all;
        let mut next = 0;
        // rows already decoded, as (first row, rows) runs in order
        let mut done: Vec<(usize, &[u8])> = Vec::new();
        for (gi, dst) in out.chunks_mut(group * band_vals).enumerate() {
            let (b0, b1) = (gi * group, ((gi + 1) * group).min(n_bands));
            let used: Vec<(usize, usize)> = (b0..b1).map(need).filter(|(lo, hi)| lo < hi).collect();
            let glo = used.iter().map(|r| r.0).min().unwrap_or(0);
            let ghi = used.iter().map(|r| r.1).max().unwrap_or(0);
            if let Err(e) = fill_rows(&mut rows, &mut rest, &mut next, ghi, raw_row, &mut done) {
                read = Err(e);
                return;
            }
            let done = done.clone();
            s.spawn(move |_| {
                let mut window = Vec::new();
                let raw = rows_in(&done, glo, ghi, raw_row, &mut window);
                // the group's input rows after the horizontal pass
                let resized = pass.map(|pass| pass.resize_rows(raw));
                let src = resized.as_deref().unwrap_or(raw);
                let mut band = vec![0u8; unit * row_out];
                for (b, dst) in (b0..b1).zip(dst.chunks_mut(band_vals)) {
                    canvas_band(&mut band, b, unit, ch, row_in, vk, src, glo);
                    band_rows(&band, w, ps, ms, tp, lut, dst);
                }
            });
        }
        // rows no band reads are decoded all the same: load_image fails where they are corrupt
        if let Err(e) = fill_rows(&mut rows, &mut rest, &mut next, in_h, raw_row, &mut done) {
            read = Err(e);
        }
    });
    read?;
    rows.finish()?;
    Ok([1, gh, gw])
}

/// PNG files larger than this are read by [`stream_image_rows`], which overlaps the inflate
/// with the bands better for them (the first touch of a `pixel_values` past 32 MiB, mapped
/// afresh by glibc at every call, then falls on the thread that writes the bands). Preps of
/// photo-like PNGs in loops (medians, split against streamed): 640x480 (0.7 MB) 1.58 against
/// 1.87 ms, 1280x720 (2.1 MB) 4.36 against 5.79 ms; 1500x1000 (3.5 MB) 12.1 against 9.5-9.7 ms,
/// 1920x1080 (4.8 MB) 12.6-20.5 against 13.1-22.1 ms, 2400x2000 (11 MB) 35.7-50.5 against 30.2-31.2 ms.
const SPLIT_MAX_FILE_BYTES: usize = 5 << 19;

/// Images [`split_image_rows`] wrote (tests check that it runs).
#[cfg(test)]
pub(crate) static SPLITS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// [`stream_image_rows`] for an unresized PNG whose image data is inflated on two threads
/// ([`StreamRows::split`]): each thread unfilters the rows it inflated and writes the bands they
/// hold, the bands that straddle the two parts on the second thread (given the first part's
/// rows they need). `None` when the image data does not split, or a check fails after some
/// bands were written (the caller writes all of `out` again).
pub(crate) fn split_image_rows(
    rows: &StreamRows<'_>,
    content: (usize, usize),
    canvas: (usize, usize),
    p: &PixelOptions,
    lut: &NormLut,
    out: &mut [MaybeUninit<f32>],
) -> Option<[usize; 3]> {
    let (in_h, in_w) = (rows.height(), rows.width());
    let ((ch, cw), (h, w)) = (content, canvas);
    // A resized image is left to the streamed path, which resizes on one thread while the
    // other inflates.
    if content != (in_h, in_w) || rows.file_len() > SPLIT_MAX_FILE_BYTES {
        return None;
    }
    check_content((in_h, in_w), content, canvas).ok()?;
    let (gh, gw) = out_grid(out.len(), h, w, p).ok()?;
    let (ps, ms, tp) = (p.patch_size, p.merge_size, p.temporal_patch_size);
    let unit = ps * ms;
    let n_bands = gh / ms;
    let band_vals = gw * ms * p.patch_dim();
    let (row_in, row_out) = (cw * 3, w * 3);
    // Bands `b0..` into `dst` from the content rows `row(y)`, on both threads when they are free.
    let bands = |b0: usize, dst: &mut [MaybeUninit<f32>], row: &RowOf<'_>| {
        dst.par_chunks_mut(band_vals).enumerate().for_each_init(
            || vec![0u8; unit * row_out],
            |band, (i, dst)| {
                fill_band(band, b0 + i, unit, ch, row_in, |y, left| {
                    left.copy_from_slice(row(y))
                });
                band_rows(band, w, ps, ms, tp, lut, dst);
            },
        )
    };
    rows.split(
        // rows 0..k are in: bands whose rows all are here stay on this thread; the rest of
        // `out`, and the rows here that the first of them needs, go to the other
        |a: &[u8], k: usize| {
            let n = (k / unit).min(n_bands);
            let n = if k == in_h { n_bands } else { n };
            let (head, tail) = out.split_at_mut(n * band_vals);
            let carry = a[(n * unit).min(k) * row_in..].to_vec();
            ((tail, carry, n), (head, n))
        },
        |(head, _), a: &[u8]| bands(0, head, &|y| &a[y * row_in..][..row_in]),
        |(tail, carry, n), k, b: &[u8]| {
            let c0 = n * unit;
            bands(n, tail, &|y| match y.checked_sub(k) {
                Some(i) => &b[i * row_in..][..row_in],
                None => &carry[(y - c0) * row_in..][..row_in],
            });
            #[cfg(test)]
            SPLITS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        },
    )?;
    Some([1, gh, gw])
}

/// Content row `y` of an image, wherever it is.
type RowOf<'a> = dyn Fn(usize) -> &'a [u8] + Sync + 'a;

/// Reads rows `next..upto` into the front of `rest`, which moves past them; the run goes to
/// `done`.
fn fill_rows<'a>(
    rows: &mut StreamRows<'_>,
    rest: &mut &'a mut [u8],
    next: &mut usize,
    upto: usize,
    row_len: usize,
    done: &mut Vec<(usize, &'a [u8])>,
) -> Result<()> {
    if upto <= *next {
        return Ok(());
    }
    let (run, tail) = std::mem::take(rest).split_at_mut((upto - *next) * row_len);
    rows.read(run)?;
    done.push((*next, run));
    *rest = tail;
    *next = upto;
    Ok(())
}

/// Rows `lo..hi` (of `row_len` bytes) from the decoded runs: borrowed when one run holds them,
/// else gathered into `window`.
fn rows_in<'a>(
    done: &[(usize, &'a [u8])],
    lo: usize,
    hi: usize,
    row_len: usize,
    window: &'a mut Vec<u8>,
) -> &'a [u8] {
    if lo >= hi {
        return &[];
    }
    if let Some((first, run)) = done
        .iter()
        .find(|(first, run)| *first <= lo && first + run.len() / row_len >= hi)
    {
        return &run[(lo - first) * row_len..(hi - first) * row_len];
    }
    window.clear();
    for (first, run) in done {
        let last = first + run.len() / row_len;
        let (a, b) = (lo.max(*first), hi.min(last));
        if a < b {
            window.extend_from_slice(&run[(a - first) * row_len..(b - first) * row_len]);
        }
    }
    window
}

/// [`write_image_rows`] for an RGB JPEG decoded here ([`JpegRows`]): each stripe of the image is
/// decoded on its own thread, its rows resized horizontally as they come out of the decoder and
/// kept only while the vertical pass still needs them; every band of canvas rows is made as soon
/// as its input rows are in, and normalised into its `pixel_values` rows. No full-size buffer is
/// written. A stripe owns the bands whose first input row lies in it and decodes from that row
/// to the last its bands need (neighbouring stripes decode a few rows twice).
pub(crate) fn stream_jpeg_rows(
    src: &JpegRows<'_>,
    content: (usize, usize),
    canvas: (usize, usize),
    p: &PixelOptions,
    lut: &NormLut,
    out: &mut [MaybeUninit<f32>],
) -> Result<[usize; 3]> {
    let (in_h, in_w) = (src.height(), src.width());
    let ((ch, cw), (h, w)) = (content, canvas);
    check_content((in_h, in_w), content, canvas)?;
    let (gh, gw) = out_grid(out.len(), h, w, p)?;
    let (ps, ms) = (p.patch_size, p.merge_size);
    let dim = p.patch_dim();
    let unit = ps * ms;
    let n_bands = gh / ms;
    let band_vals = gw * ms * dim;
    let vk = (ch != in_h).then(|| resize::axis_coeffs(in_h, ch));
    let need = |b: usize| band_input_rows(b, unit, ch, in_h, vk.as_ref());
    // Stripe s owns bands bb[s]..bb[s + 1]: those whose first input row is in its rows.
    let starts = src.stripe_starts(rayon::current_num_threads().min(4));
    let mut bb = vec![0usize];
    for &a in &starts[1..starts.len() - 1] {
        let b = (0..n_bands).find(|&b| need(b).0 >= a).unwrap_or(n_bands);
        if b > *bb.last().expect("non-empty") && b < n_bands {
            bb.push(b);
        }
    }
    bb.push(n_bands);
    let mut parts: Vec<(usize, usize, &mut [MaybeUninit<f32>])> = Vec::new();
    let mut rest = out;
    for pair in bb.windows(2) {
        let (mine, tail) = rest.split_at_mut((pair[1] - pair[0]) * band_vals);
        parts.push((pair[0], pair[1], mine));
        rest = tail;
    }
    let last = parts.len() - 1;
    let pass = resize::HorizontalPass::new(in_w, cw);
    let geom = BandGeometry {
        unit,
        ch,
        cw,
        w,
        ps,
        ms,
        tp: p.temporal_patch_size,
        band_vals,
        in_h,
    };
    let stripe = |(i, (b0, b1, dst)): (usize, (usize, usize, &mut [MaybeUninit<f32>]))| {
        let from = need(b0).0.min(in_h);
        let to = if i == last { in_h } else { need(b1 - 1).1 };
        let mut wr = BandWriter {
            g: &geom,
            vk: vk.as_ref(),
            lut,
            win: Vec::new(),
            wlo: from,
            next: b0,
            end: b1,
            band: vec![0u8; unit * w * 3],
            dst,
        };
        let mut sink = |first: usize, rows: &[u8]| wr.feed(first, rows);
        src.decode(from, to, i == last, &pass, &mut sink)?;
        wr.flush()
    };
    if parts.len() == 1 {
        stripe((0, parts.pop().expect("one part")))?;
    } else {
        parts.into_par_iter().enumerate().try_for_each(stripe)?;
    }
    Ok([1, gh, gw])
}

/// Input rows `[lo, hi)` that band `b` (canvas rows `b * unit..`) reads: none past the content.
fn band_input_rows(
    b: usize,
    unit: usize,
    ch: usize,
    in_h: usize,
    vk: Option<&resize::AxisCoeffs>,
) -> (usize, usize) {
    let (y0, y1) = (b * unit, ((b + 1) * unit).min(ch));
    if y0 >= ch {
        return (in_h, in_h);
    }
    match vk {
        Some(k) => (
            k.xmin[y0],
            (y0..y1).map(|y| k.xmin[y] + k.xsize[y]).max().unwrap_or(0),
        ),
        None => (y0, y1),
    }
}

/// Sizes shared by the stripes of [`stream_jpeg_rows`].
struct BandGeometry {
    unit: usize,
    ch: usize,
    cw: usize,
    w: usize,
    ps: usize,
    ms: usize,
    tp: usize,
    band_vals: usize,
    in_h: usize,
}

/// One stripe's bands: a window of horizontally resized rows `wlo..` and the bands still to
/// write, `next..end`, into `dst` (band `next` first).
struct BandWriter<'a, 'o> {
    g: &'a BandGeometry,
    vk: Option<&'a resize::AxisCoeffs>,
    lut: &'a NormLut,
    win: Vec<u8>,
    wlo: usize,
    next: usize,
    end: usize,
    band: Vec<u8>,
    dst: &'o mut [MaybeUninit<f32>],
}

impl BandWriter<'_, '_> {
    fn need(&self, b: usize) -> (usize, usize) {
        band_input_rows(b, self.g.unit, self.g.ch, self.g.in_h, self.vk)
    }

    /// Rows `first..` (in order, right after the window) come in: drop what no band still
    /// needs, keep these, write every band whose rows are all in.
    fn feed(&mut self, first: usize, rows: &[u8]) {
        let row_len = self.g.cw * 3;
        debug_assert_eq!(first, self.wlo + self.win.len() / row_len);
        let keep = self.need(self.next).0.min(first);
        if keep > self.wlo {
            self.win.drain(..(keep - self.wlo) * row_len);
            self.wlo = keep;
        }
        self.win.extend_from_slice(rows);
        let whi = self.wlo + self.win.len() / row_len;
        while self.next < self.end && self.need(self.next).1 <= whi {
            self.write_band();
        }
    }

    /// After the last row: the remaining bands, which must need no row that did not come.
    fn flush(&mut self) -> Result<()> {
        let whi = self.wlo + self.win.len() / (self.g.cw * 3);
        while self.next < self.end {
            let (lo, hi) = self.need(self.next);
            if hi > whi && lo < hi {
                return Err(PrepError::InvalidOption(format!(
                    "band {} needs rows {lo}..{hi}, only ..{whi} were decoded",
                    self.next
                )));
            }
            self.write_band();
        }
        Ok(())
    }

    /// Band `next` from the window (its rows are in), normalised into its rows of `dst`.
    fn write_band(&mut self) {
        let g = self.g;
        let row_in = g.cw * 3;
        let b = self.next;
        canvas_band(
            &mut self.band,
            b,
            g.unit,
            g.ch,
            row_in,
            self.vk,
            &self.win,
            self.wlo,
        );
        let i = (b - (self.end - self.dst.len() / g.band_vals)) * g.band_vals;
        band_rows(
            &self.band,
            g.w,
            g.ps,
            g.ms,
            g.tp,
            self.lut,
            &mut self.dst[i..i + g.band_vals],
        );
        self.next += 1;
    }
}

/// The canvas rows of band `b` (`unit` rows of `band.len() / unit` bytes, from canvas row
/// `b * unit`): content rows (`row_in` bytes each, `ch` of them) made from `src`, input rows
/// already resized horizontally of which the first is input row `base`, by the vertical pass
/// `vk` (or copied when there is none), zero to the right of and below the content.
#[allow(clippy::too_many_arguments)]
fn canvas_band(
    band: &mut [u8],
    b: usize,
    unit: usize,
    ch: usize,
    row_in: usize,
    vk: Option<&resize::AxisCoeffs>,
    src: &[u8],
    base: usize,
) {
    match vk {
        Some(k) => fill_band(band, b, unit, ch, row_in, |y, left| {
            resize::vertical_row_dispatch(k, src, row_in, y, base, left)
        }),
        None => fill_band(band, b, unit, ch, row_in, |y, left| {
            left.copy_from_slice(&src[(y - base) * row_in..][..row_in])
        }),
    }
}

/// The canvas rows of band `b` (`unit` rows of `band.len() / unit` bytes, from canvas row
/// `b * unit`): `content(y, left)` writes the `row_in` bytes of content row `y` (`ch` of them),
/// zero to the right of and below the content.
fn fill_band(
    band: &mut [u8],
    b: usize,
    unit: usize,
    ch: usize,
    row_in: usize,
    mut content: impl FnMut(usize, &mut [u8]),
) {
    let row_out = band.len() / unit;
    for (r, row) in band.chunks_exact_mut(row_out).enumerate() {
        let y = b * unit + r;
        if y >= ch {
            row.fill(0);
            continue;
        }
        let (left, pad) = row.split_at_mut(row_in);
        content(y, left);
        pad.fill(0);
    }
}

/// The `pixel_values` rows of one band (`ps * ms` canvas rows of `w` pixels): merge blocks left
/// to right, patches row-major within a block, each row `(c, t, ph, pw)` with the `tp` temporal
/// copies identical.
fn band_rows(
    band: &[u8],
    w: usize,
    ps: usize,
    ms: usize,
    tp: usize,
    lut: &NormLut,
    dst: &mut [MaybeUninit<f32>],
) {
    #[cfg(target_arch = "x86_64")]
    if ps <= 16 && band_rows_x86::available() {
        // SAFETY: the CPU has the features `band_rows_avx512` is compiled for (checked just above).
        unsafe { band_rows_x86::band_rows_avx512(band, w, ps, ms, tp, lut, dst) };
        return;
    }
    band_rows_scalar(band, w, ps, ms, tp, lut, dst)
}

/// [`band_rows`] one value at a time: the definition the AVX-512 build is tested against.
fn band_rows_scalar(
    band: &[u8],
    w: usize,
    ps: usize,
    ms: usize,
    tp: usize,
    lut: &NormLut,
    dst: &mut [MaybeUninit<f32>],
) {
    let plane = ps * ps;
    let stride = w * 3;
    for (base, row) in patch_rows(w, ps, ms, tp, dst) {
        for c in 0..3 {
            let first = c * tp * plane;
            let lut_c = &lut.0[c];
            for py in 0..ps {
                let line = &band[base + py * stride + c..];
                let o = &mut row[first + py * ps..first + (py + 1) * ps];
                for (px, v) in o.iter_mut().enumerate() {
                    v.write(lut_c[line[px * 3] as usize]);
                }
            }
            for tt in 1..tp {
                row.copy_within(first..first + plane, first + tt * plane);
            }
        }
    }
}

/// The `pixel_values` rows one band fills, in order, each with the offset in the band (`ps * ms`
/// canvas rows of `w` RGB pixels) of its patch's top-left byte: merge blocks left to right,
/// patches row-major within a block. Both builds of [`band_rows`] walk a band this way.
fn patch_rows(
    w: usize,
    ps: usize,
    ms: usize,
    tp: usize,
    dst: &mut [MaybeUninit<f32>],
) -> impl Iterator<Item = (usize, &mut [MaybeUninit<f32>])> {
    let stride = w * 3;
    let mut rows = dst.chunks_exact_mut(3 * tp * ps * ps);
    (0..w / (ps * ms))
        .flat_map(move |bc| {
            (0..ms).flat_map(move |ir| {
                (0..ms).map(move |ic| ir * ps * stride + (bc * ms + ic) * ps * 3)
            })
        })
        .map(move |base| (base, rows.next().expect("a band holds gw * ms rows")))
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

/// [`band_rows`] on AVX-512: a patch row's `ps` pixels (`3 * ps` bytes, one masked load) are split
/// into their three channels by one byte permutation each, and each channel's `ps` levels are
/// looked up in the table by one gather; the rows of later frames (`tp > 1`) are stored from the
/// same register. The same table, so the same values, as the scalar loop.
#[cfg(target_arch = "x86_64")]
mod band_rows_x86 {
    use super::NormLut;
    use std::arch::x86_64::*;
    use std::mem::MaybeUninit;

    /// (std caches what the CPU has: each call is a few loads.)
    pub(super) fn available() -> bool {
        is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vbmi")
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
    pub(super) fn band_rows_avx512(
        band: &[u8],
        w: usize,
        ps: usize,
        ms: usize,
        tp: usize,
        lut: &NormLut,
        dst: &mut [MaybeUninit<f32>],
    ) {
        assert!(
            ps <= 16,
            "one register holds a patch row of at most 16 pixels"
        );
        let plane = ps * ps;
        let stride = w * 3;
        let n_bytes = ps * 3;
        let load_mask: __mmask64 = (1u64 << n_bytes) - 1;
        let lane_mask: __mmask16 = ((1u32 << ps) - 1) as __mmask16;
        // byte i of channel c's register: byte 3 i + c of the patch row (lanes past ps unused)
        let perm: [__m512i; 3] = std::array::from_fn(|c| {
            let mut idx = [0u8; 64];
            for (i, v) in idx.iter_mut().take(16).enumerate() {
                *v = (3 * i + c) as u8;
            }
            // SAFETY: `idx` is 64 readable bytes.
            unsafe { _mm512_loadu_si512(idx.as_ptr().cast()) }
        });
        for (base, row) in super::patch_rows(w, ps, ms, tp, dst) {
            for py in 0..ps {
                let line = &band[base + py * stride..base + py * stride + n_bytes];
                // SAFETY: the mask covers the `n_bytes` bytes of `line` and no others.
                let px = unsafe { _mm512_maskz_loadu_epi8(load_mask, line.as_ptr().cast()) };
                for (c, perm_c) in perm.iter().enumerate() {
                    let bytes = _mm512_permutexvar_epi8(*perm_c, px);
                    let idx = _mm512_cvtepu8_epi32(_mm512_castsi512_si128(bytes));
                    // SAFETY: every index is a byte (< 256) and the table holds 256
                    // values; lanes past `ps` are masked off.
                    let v = unsafe {
                        _mm512_mask_i32gather_ps::<4>(
                            _mm512_setzero_ps(),
                            lane_mask,
                            idx,
                            lut.0[c].as_ptr().cast(),
                        )
                    };
                    for tt in 0..tp {
                        let at = c * tp * plane + tt * plane + py * ps;
                        let out = &mut row[at..at + ps];
                        // SAFETY: the mask covers the `ps` values of `out` and no others.
                        unsafe { _mm512_mask_storeu_ps(out.as_mut_ptr().cast(), lane_mask, v) };
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The AVX-512 build writes the same values as the scalar loop, for several patch, merge and
    /// frame counts, widths and tables, on random levels.
    #[test]
    fn band_rows_avx512_equals_scalar() {
        #[cfg(target_arch = "x86_64")]
        {
            if !band_rows_x86::available() {
                eprintln!("no AVX-512 VBMI on this CPU: only the scalar loop runs here");
                return;
            }
            let mut seed = 0x9e37_79b9_7f4a_7c15u64;
            let mut next = || {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed
            };
            let base = crate::PrepOptions::default().image;
            let mut custom = base.clone();
            custom.image_mean = [0.1, 0.7, 0.33];
            custom.image_std = [0.2, -0.9, 1.7];
            let mut plain = base.clone();
            plain.do_normalize = false;
            for p in [&base, &custom, &plain] {
                let lut = NormLut::new(p);
                for (ps, ms, tp, gw) in [
                    (14, 2, 2, 3),
                    (14, 2, 1, 1),
                    (16, 1, 3, 2),
                    (5, 3, 2, 2),
                    (1, 1, 1, 4),
                ] {
                    let (w, unit) = (gw * ps * ms, ps * ms);
                    let band: Vec<u8> = (0..unit * w * 3).map(|_| next() as u8).collect();
                    let n = gw * ms * ms * 3 * tp * ps * ps;
                    let mut a = vec![MaybeUninit::new(f32::NAN); n];
                    band_rows_scalar(&band, w, ps, ms, tp, &lut, &mut a);
                    // SAFETY: both were filled with initialised values.
                    let bits = |v: &[MaybeUninit<f32>]| -> Vec<u32> {
                        v.iter()
                            .map(|x| unsafe { x.assume_init() }.to_bits())
                            .collect()
                    };
                    let a = bits(&a);
                    assert!(
                        a.iter().all(|&v| !f32::from_bits(v).is_nan()),
                        "every value written"
                    );
                    // at every offset from a 64-byte line, nothing written around the rows
                    for off in 0..16usize {
                        let mut buf = vec![MaybeUninit::new(f32::NAN); n + 32];
                        let at = off + buf.as_ptr().align_offset(64);
                        let b = &mut buf[at..at + n];
                        // SAFETY: available() was checked above.
                        unsafe { band_rows_x86::band_rows_avx512(&band, w, ps, ms, tp, &lut, b) };
                        assert_eq!(a, bits(b), "ps {ps} ms {ms} tp {tp} gw {gw} at {off}");
                        let around = bits(&buf[..at]).into_iter().chain(bits(&buf[at + n..]));
                        assert!(
                            around.into_iter().all(|v| f32::from_bits(v).is_nan()),
                            "nothing written outside the rows (at {off})"
                        );
                    }
                }
            }
        }
    }
}
