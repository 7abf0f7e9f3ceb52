//! The writers of one decoded image's `pixel_values` rows straight into the output, without
//! building its padded canvas: from rows already decoded, from rows read on demand (streamed),
//! from a PNG inflated on two threads (split) and from a JPEG decoded in stripes, each one
//! band of canvas rows at a time.

use super::band::{band_rows, canvas_band, fill_band};
use super::{NormLut, grid_of};
use crate::decode::{JpegRows, PrepRaster, StreamRows};
use crate::error::{PrepError, Result};
use crate::options::PixelOptions;
use crate::resize;
use rayon::prelude::*;
use std::mem::MaybeUninit;

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

/// The rows of one decoded image (`grid_t == 1`) written straight into `out`, without building
/// the padded canvas: what [`crate::resize::resize_bicubic_aa`] to `content`, [`pad_to`](super::pad_to) `canvas` and
/// [`patchify`](super::patchify) with the frame repeated `temporal_patch_size` times give, value for value.
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
