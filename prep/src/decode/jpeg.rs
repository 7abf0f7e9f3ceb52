//! JPEG through libjpeg-turbo's decoder (the `mozjpeg-sys` build of it; SIMD where the build
//! found nasm, see [`simd`]), configured as
//! Pillow's `JpegDecode.c` leaves it: ISLOW IDCT, fancy upsampling, block smoothing on; the
//! colour space libjpeg infers from the markers; output L, RGB or CMYK by component count.
//! Four-component images are read as PIL's "CMYK;I" (Adobe-inverted) and converted by `cmyk2rgb`.
//! libjpeg's errors come back as `Fail::Corrupt`; running out of data (libjpeg's "premature end
//! of JPEG file" warning, where PIL raises "image file is truncated") is an error too.
//! Corrupt entropy-coded data (bad Huffman codes, a marker inside a segment) is decoded as PIL
//! decodes it: libjpeg-turbo 3.2.0 (Pillow 13.0.0's wheel) recovers from it with the same code as
//! this build (jdhuff.c, jdmarker.c's resync, jdcoefct.c), whether fed at once or in PIL's 64 KiB
//! blocks. What such data can make differ is the IDCT: its garbage coefficients push outputs out
//! of range, which libjpeg-turbo's SIMD IDCT saturates (as PIL's does) and its C IDCT wraps
//! (`& RANGE_MASK`). So a build without the SIMD paths ([`simd`]) refuses such files instead.

use super::Fail;
use super::modes::{Pixels, Raster, Transparency};
use crate::resize::HorizontalPass;
use mozjpeg_sys as j;
use std::ffi::{c_int, c_long, c_ulong};
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

/// The payload libjpeg's callbacks unwind with.
struct Abort(String);

fn message(cinfo: &mut j::jpeg_common_struct) -> String {
    // libjpeg writes up to JMSG_LENGTH_MAX (200) bytes; the binding's type says 80.
    let mut buf = [0u8; 256];
    // SAFETY: `err` is the error manager installed by `decode`; the buffer is larger than any
    // message libjpeg formats.
    unsafe {
        let err = &*cinfo.err;
        if let Some(f) = err.format_message {
            f(cinfo, &*(buf.as_mut_ptr() as *const [u8; 80]));
        }
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

unsafe extern "C-unwind" fn error_exit(cinfo: &mut j::jpeg_common_struct) {
    let msg = message(cinfo);
    resume_unwind(Box::new(Abort(msg)));
}

unsafe extern "C-unwind" fn emit_message(cinfo: &mut j::jpeg_common_struct, level: c_int) {
    // SAFETY: `err` is valid for the decoder's lifetime.
    let code = unsafe { (*cinfo.err).msg_code };
    if level < 0 && code == j::JWRN_JPEG_EOF as c_int {
        resume_unwind(Box::new(Abort(
            "the file ends before the image data does (truncated)".into(),
        )));
    }
    // Corrupt entropy-coded data: libjpeg decodes on through the damaged bits to the next marker
    // and leaves the rest of that restart interval zero, exactly as PIL's libjpeg-turbo does.
    // The garbage coefficients can give IDCT outputs out of range, which only the SIMD IDCT
    // limits as PIL's does (the C one wraps them: the Pillow corpus's `hopper_bad_exif.jpg`
    // differs in 251 blocks), so a C-only build refuses such data.
    if code == j::JWRN_HIT_MARKER as c_int && ACCEPT_HIT_MARKER.with(|a| a.get()) {
        return;
    }
    if level < 0
        && [
            j::JWRN_HIT_MARKER,
            j::JWRN_HUFF_BAD_CODE,
            j::JWRN_MUST_RESYNC,
        ]
        .iter()
        .any(|&c| code == c as c_int)
        && !simd()
    {
        let msg = message(cinfo);
        resume_unwind(Box::new(Abort(format!(
            "corrupt entropy-coded data (libjpeg: {msg}); this build has libjpeg-turbo's C IDCT \
             only (no nasm when mozjpeg-sys was built), which wraps the out-of-range values such \
             data gives where PIL's SIMD IDCT saturates them, so it is refused rather than \
             decoded differently"
        ))));
    }
}

thread_local! {
    /// Set by [`decode_accepting_early_marker`] on the thread that runs libjpeg.
    static ACCEPT_HIT_MARKER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// [`decode`] on this thread, in one band, letting libjpeg fill in what a marker cut short
/// ("premature end of data segment": the rest of the scan's coefficients are zero) instead of
/// refusing the file. For a JPEG inside another format whose plugin decodes it with PIL and
/// ignores libjpeg's warnings (BLP1); the Pillow corpus's `blp1_jpeg2.blp` is exact this way.
pub(crate) fn decode_accepting_early_marker(data: &[u8], max_bytes: usize) -> Result<Raster, Fail> {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            ACCEPT_HIT_MARKER.with(|a| a.set(false));
        }
    }
    ACCEPT_HIT_MARKER.with(|a| a.set(true));
    let _reset = Reset;
    decode_striped(data, max_bytes, 1)
}

/// Owns the libjpeg objects so that they are destroyed however decoding ends.
struct Decompressor {
    cinfo: Box<j::jpeg_decompress_struct>,
    _err: Box<j::jpeg_error_mgr>,
}

impl Drop for Decompressor {
    fn drop(&mut self) {
        // SAFETY: created by `jpeg_create_decompress`; destroying after an error is allowed.
        unsafe { j::jpeg_destroy_decompress(&mut self.cinfo) }
    }
}

/// Whether libjpeg-turbo's SIMD IDCT (and with it its other SIMD decode paths) is compiled in
/// and supported by this CPU. `jsimd_can_idct_islow` is defined by both of libjpeg-turbo's
/// builds: by `jsimd.c` (SIMD: checks the CPU) and by `jsimd_none.c` (C only: 0).
pub(crate) fn simd() -> bool {
    unsafe extern "C" {
        fn jsimd_can_idct_islow() -> c_int;
    }
    // SAFETY: takes no arguments; reads the CPU's features once (libjpeg-turbo caches them).
    unsafe { jsimd_can_idct_islow() != 0 }
}

/// `ImageFile.MAXBLOCK`: PIL hands the JPEG decoder the file in blocks of this size. libjpeg's
/// arithmetic decoder cannot suspend for more input (JERR_CANT_SUSPEND), so PIL fails on
/// arithmetic-coded files longer than this; `load_image` refuses them the same way.
pub(crate) const PIL_READ_BLOCK: usize = 65536;

/// Images at least this large are decoded in horizontal stripes on several threads.
const PARALLEL_MIN_PIXELS: usize = 1 << 19;

pub(crate) fn decode(data: &[u8], max_bytes: usize) -> Result<Raster, Fail> {
    let threads = rayon::current_num_threads().min(4);
    decode_striped(data, max_bytes, threads)
}

/// Output geometry from the header alone (`jpeg_calc_output_dimensions`, no pixel decoding).
pub(crate) struct Geometry {
    pub width: usize,
    pub height: usize,
    comps: usize,
    /// Rows per iMCU row: stripes start on these boundaries.
    imcu_rows: usize,
    /// Progressive or multi-scan: `jpeg_start_decompress` entropy-decodes the whole file.
    multi_scan: bool,
}

/// Share of a row's decoding cost that a stripe pays again for each row above it: a
/// single-scan file's rows above a stripe are entropy-decoded by `jpeg_skip_scanlines` (Huffman
/// decoding cannot start mid-scan) but not reconstructed. Measured on a 4000x3000 4:2:0 photo
/// (thread CPU time per stripe): with equal halves the second stripe took ~28% longer, about
/// 0.3 of a row per skipped row; with this value the two stripes take the same time.
const SKIP_COST: f64 = 0.3;

/// Stripe boundaries `0 = b[0] < b[1] < ... = h` (interior ones on iMCU rows) that give every
/// stripe the same work: a stripe starting at row `a` with `n` rows costs `SKIP_COST * a + n`,
/// so later stripes are shorter. Multi-scan files cost every stripe the whole entropy decode
/// whatever its start (done at `jpeg_start_decompress`): equal stripes.
fn stripe_bounds(h: usize, imcu_rows: usize, stripes: usize, multi_scan: bool) -> Vec<usize> {
    let e = if multi_scan { 0.0 } else { SKIP_COST };
    let k = stripes.max(1) as i32;
    // Stripe i starts at a_i = c * (1 - (1 - e)^i) / e (a_i = c * i when e = 0), a_k = h.
    let start = |i: i32| {
        if e == 0.0 {
            h as f64 * i as f64 / k as f64
        } else {
            h as f64 * (1.0 - (1.0 - e).powi(i)) / (1.0 - (1.0 - e).powi(k))
        }
    };
    let mut b = vec![0usize];
    for i in 1..k {
        let a = ((start(i) / imcu_rows as f64).round() as usize * imcu_rows).min(h);
        if a > *b.last().expect("non-empty") && a < h {
            b.push(a);
        }
    }
    b.push(h);
    b
}

/// Decodes with up to `stripes` independent libjpeg decompressors, each producing a band of
/// rows (`jpeg_skip_scanlines` to its first row, which entropy-decodes but does not reconstruct
/// the rows above). libjpeg reconstructs a row the same way whatever was skipped before it, so the
/// result equals a single pass (checked by a test). The last band also reads to the end of the
/// file, so truncation anywhere is still reported.
pub(crate) fn decode_striped(
    data: &[u8],
    max_bytes: usize,
    stripes: usize,
) -> Result<Raster, Fail> {
    decode_in_bands(data, max_bytes, |g| stripe_starts(g, stripes))
}

/// [`decode_striped`] in `stripes` stripes whatever the image's size (small images too: the
/// fuzz hook, `super::fuzz_hooks`).
pub(crate) fn decode_forced_stripes(
    data: &[u8],
    max_bytes: usize,
    stripes: usize,
) -> Result<Raster, Fail> {
    decode_in_bands(data, max_bytes, |g| forced_stripe_bounds(g, stripes))
}

/// The bounds of [`stripe_starts`] for `stripes` stripes whatever the image's size.
pub(crate) fn forced_stripe_bounds(g: &Geometry, stripes: usize) -> Vec<usize> {
    stripe_bounds(g.height, g.imcu_rows, stripes, g.multi_scan)
}

/// Decodes in the row bands `bounds(geometry)` gives (`0 = b[0] < ... = height`).
fn decode_in_bands(
    data: &[u8],
    max_bytes: usize,
    bounds: impl FnOnce(&Geometry) -> Vec<usize>,
) -> Result<Raster, Fail> {
    let g = with_decompressor(data, max_bytes, |c| unsafe { geometry(c) })?;
    let (w, h, comps) = (g.width, g.height, g.comps);
    let mut buf = vec![0u8; w * comps * h];
    crate::pixels::advise_huge_pages(&mut buf);
    run_stripes(data, max_bytes, &g, &bounds(&g), &mut buf)?;
    let pixels = match comps {
        1 => Pixels::L(buf),
        3 => Pixels::Rgb(buf),
        _ => {
            // "CMYK;I": PIL assumes Adobe's inverted CMYK.
            buf.iter_mut().for_each(|v| *v = !*v);
            Pixels::Cmyk(buf)
        }
    };
    Ok(Raster {
        width: w as u32,
        height: h as u32,
        pixels,
        transparency: Transparency::None,
    })
}

/// An RGB JPEG's geometry for [`decode_rows_hresized`]; `None` when the image is not
/// 3-component (gray and CMYK need PIL's conversions first).
pub(crate) fn rgb_geometry(data: &[u8], max_bytes: usize) -> Result<Option<Geometry>, Fail> {
    let g = with_decompressor(data, max_bytes, |c| unsafe { geometry(c) })?;
    Ok((g.comps == 3).then_some(g))
}

/// Where the stripes of a parallel decode on `threads` threads would start, as in [`decode`]:
/// `0 = b[0] < ... < b[n] = height`.
pub(crate) fn stripe_starts(g: &Geometry, threads: usize) -> Vec<usize> {
    let stripes = if g.width * g.height < PARALLEL_MIN_PIXELS {
        1
    } else {
        threads.max(1)
    };
    stripe_bounds(g.height, g.imcu_rows, stripes, g.multi_scan)
}

/// Decodes rows `from..to` of an RGB JPEG with one decompressor, resizes them horizontally with
/// `pass`, and hands them in order, at most [`HorizontalPass::ROWS`] at a time, to
/// `sink(first_row, rows)`. Decoding starts at the iMCU row holding `from` (as the stripes of
/// [`decode`] do); with `finish`, the rest of the file is read too (truncation is reported).
/// The rows equal [`decode`]'s, resized.
#[allow(clippy::too_many_arguments)]
pub(crate) fn decode_rows_hresized(
    data: &[u8],
    max_bytes: usize,
    g: &Geometry,
    from: usize,
    to: usize,
    finish: bool,
    pass: &HorizontalPass,
    sink: &mut dyn FnMut(usize, &[u8]),
) -> Result<(), Fail> {
    let stride = g.width * 3;
    let out_stride = pass.out_w() * 3;
    let to = to.min(g.height);
    let start = from / g.imcu_rows * g.imcu_rows;
    with_decompressor(data, max_bytes, |c| unsafe {
        start_at(c, start, stride)?;
        let group = HorizontalPass::ROWS;
        let mut chunk = vec![0u8; group * stride];
        let mut out = vec![0u8; group * out_stride];
        let mut tile = pass.tile();
        // Rows above `from` in its iMCU row: decoded and dropped.
        let mut at = start;
        while at < from {
            let n = (from - at).min(group);
            read_into(c, at, &mut chunk[..n * stride], stride)?;
            at += n;
        }
        while at < to {
            let n = (to - at).min(group);
            read_into(c, at, &mut chunk[..n * stride], stride)?;
            pass.rows(&mut tile, &chunk[..n * stride], &mut out[..n * out_stride]);
            sink(at, &out[..n * out_stride]);
            at += n;
        }
        if finish {
            // Rows past `to`, then the end of the file.
            while at < g.height {
                let n = (g.height - at).min(group);
                read_into(c, at, &mut chunk[..n * stride], stride)?;
                at += n;
            }
            j::jpeg_finish_decompress(c);
        }
        Ok(())
    })
}

/// Decodes all rows into `out` (rows of `width * comps` bytes), one band per pair of `bounds`,
/// the bands in parallel.
fn run_stripes(
    data: &[u8],
    max_bytes: usize,
    g: &Geometry,
    bounds: &[usize],
    out: &mut [u8],
) -> Result<(), Fail> {
    let stride = g.width * g.comps;
    let mut bands: Vec<(usize, &mut [u8])> = Vec::with_capacity(bounds.len() - 1);
    let mut rest = out;
    for pair in bounds.windows(2) {
        let (band, tail) = rest.split_at_mut((pair[1] - pair[0]) * stride);
        bands.push((pair[0], band));
        rest = tail;
    }
    let last = bands.len() - 1;
    let one = |i: usize, first: usize, band: &mut [u8]| {
        with_decompressor(data, max_bytes, |c| unsafe {
            start_at(c, first, stride)?;
            read_into(c, first, band, stride)?;
            if i == last {
                j::jpeg_finish_decompress(c);
            }
            Ok(())
        })
    };
    if bands.len() == 1 {
        let (first, band) = bands.pop().expect("one band");
        one(0, first, band)
    } else {
        use rayon::prelude::*;
        bands
            .into_par_iter()
            .enumerate()
            .try_for_each(|(i, (first, band))| one(i, first, band))
    }
}

/// Creates a decompressor over `data`, reads the header, configures it as PIL does, runs `f`,
/// and turns libjpeg's errors (unwound from its callbacks) into `Fail`.
fn with_decompressor<T>(
    data: &[u8],
    max_bytes: usize,
    f: impl FnOnce(&mut j::jpeg_decompress_struct) -> Result<T, Fail>,
) -> Result<T, Fail> {
    // SAFETY: zeroed structs are what libjpeg's create functions expect to fill in.
    let mut err: Box<j::jpeg_error_mgr> = Box::new(unsafe { std::mem::zeroed() });
    unsafe { j::jpeg_std_error(&mut err) };
    err.error_exit = Some(error_exit);
    err.emit_message = Some(emit_message);
    let mut cinfo: Box<j::jpeg_decompress_struct> = Box::new(unsafe { std::mem::zeroed() });
    cinfo.common.err = &mut *err;
    let result = catch_unwind(AssertUnwindSafe(|| {
        unsafe { j::jpeg_create_decompress(&mut *cinfo) };
        let mut d = Decompressor { cinfo, _err: err };
        let c = &mut *d.cinfo;
        // SAFETY: the decompressor is created; `data` outlives it (dropped in this scope).
        unsafe {
            (*c.common.mem).max_memory_to_use = max_bytes.min(c_long::MAX as usize) as c_long;
            j::jpeg_mem_src(c, data.as_ptr(), data.len() as c_ulong);
            j::jpeg_read_header(c, 1);
        }
        c.out_color_space = match c.num_components {
            1 => j::JCS_GRAYSCALE,
            3 => j::JCS_RGB,
            4 => j::JCS_CMYK,
            n => {
                return Err(Fail::Unsupported(format!(
                    "{n}-component JPEG (PIL reads 1, 3 or 4)"
                )));
            }
        };
        c.dct_method = j::J_DCT_METHOD::JDCT_ISLOW;
        c.do_fancy_upsampling = 1;
        c.do_block_smoothing = 1;
        f(c)
    }));
    match result {
        Ok(r) => r,
        Err(payload) => match payload.downcast::<Abort>() {
            Ok(a) => Err(Fail::Corrupt(a.0)),
            Err(other) => resume_unwind(other),
        },
    }
}

unsafe fn geometry(c: &mut j::jpeg_decompress_struct) -> Result<Geometry, Fail> {
    unsafe { j::jpeg_calc_output_dimensions(c) };
    Ok(Geometry {
        width: c.output_width as usize,
        height: c.output_height as usize,
        comps: c.output_components as usize,
        imcu_rows: 8 * c.max_v_samp_factor.max(1) as usize,
        multi_scan: unsafe { j::jpeg_has_multiple_scans(c) } != 0,
    })
}

/// Starts decompression and skips to row `first` (`jpeg_skip_scanlines`).
unsafe fn start_at(
    c: &mut j::jpeg_decompress_struct,
    first: usize,
    stride: usize,
) -> Result<(), Fail> {
    unsafe { j::jpeg_start_decompress(c) };
    if stride != c.output_width as usize * c.output_components as usize {
        return Err(Fail::Corrupt(
            "libjpeg's output size differs from the header's".into(),
        ));
    }
    if first > 0 {
        let skipped = unsafe { j::jpeg_skip_scanlines(c, first as u32) } as usize;
        if skipped != first {
            return Err(Fail::Corrupt("libjpeg could not skip to the band".into()));
        }
    }
    Ok(())
}

/// Reads the next `out.len() / stride` rows, which start at row `first`, into `out`.
unsafe fn read_into(
    c: &mut j::jpeg_decompress_struct,
    first: usize,
    out: &mut [u8],
    stride: usize,
) -> Result<(), Fail> {
    let h = c.output_height as usize;
    let n = out.len() / stride.max(1);
    if c.output_scanline as usize != first {
        return Err(Fail::Corrupt("libjpeg is not at the expected row".into()));
    }
    let mut rows: Vec<*mut u8> = out
        .chunks_exact_mut(stride.max(1))
        .map(|r| r.as_mut_ptr())
        .collect();
    let end = (first + n).min(h);
    while (c.output_scanline as usize) < end {
        let at = c.output_scanline as usize;
        let got = unsafe {
            j::jpeg_read_scanlines(c, rows[at - first..].as_mut_ptr(), (end - at) as u32)
        };
        if got == 0 {
            return Err(Fail::Corrupt("libjpeg returned no scanlines".into()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A JPEG of smooth content and noise, 4:2:0 and 4:2:2, encoded by the `image` crate.
    fn sample(w: u32, h: u32, seed: u32) -> Vec<u8> {
        let mut s = seed;
        let img = image::RgbImage::from_fn(w, h, |x, y| {
            s = s.wrapping_mul(1_103_515_245).wrapping_add(12345);
            let n = (s >> 24) as u8 / 8;
            image::Rgb([
                (x * 3 + y) as u8 ^ n,
                ((y * 5) as u8).wrapping_add(n),
                ((x + y) * 2) as u8,
            ])
        });
        let mut out = Vec::new();
        image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 80)
            .encode_image(&img)
            .unwrap();
        out
    }

    #[test]
    fn striped_decode_equals_single_pass() {
        for (w, h) in [(1100, 517), (733, 1201)] {
            let data = sample(w, h, w);
            let one = decode_striped(&data, 1 << 30, 1).unwrap();
            for stripes in [2, 3, 4] {
                let many = decode_striped(&data, 1 << 30, stripes).unwrap();
                let (Pixels::Rgb(a), Pixels::Rgb(b)) = (&one.pixels, &many.pixels) else {
                    panic!("not RGB")
                };
                assert!(
                    a == b,
                    "{w}x{h} with {stripes} stripes differs from one pass"
                );
            }
        }
    }

    #[test]
    fn stripe_bounds_cover_the_image_on_imcu_rows() {
        for (h, imcu, k, multi) in [
            (3000, 16, 2, false),
            (3000, 16, 4, false),
            (3000, 8, 3, true),
            (517, 16, 2, false),
            (20, 16, 4, false),
            (1, 8, 2, false),
        ] {
            let b = stripe_bounds(h, imcu, k, multi);
            assert_eq!((b[0], *b.last().unwrap()), (0, h), "{b:?}");
            assert!(
                b.len() <= k + 1 && b.windows(2).all(|w| w[0] < w[1]),
                "{b:?}"
            );
            assert!(b[1..b.len() - 1].iter().all(|a| a % imcu == 0), "{b:?}");
            let lens: Vec<usize> = b.windows(2).map(|w| w[1] - w[0]).collect();
            if h >= 64 * k * imcu {
                // Stripes shrink down the image (single scan) or are equal within an iMCU row.
                assert!(
                    lens.windows(2).all(|l| if multi {
                        l[0].abs_diff(l[1]) <= imcu
                    } else {
                        l[0] > l[1]
                    }),
                    "{lens:?}"
                );
            }
        }
    }

    #[test]
    fn striped_decode_reports_truncation() {
        let data = sample(1100, 517, 7);
        for cut in [data.len() / 3, data.len() * 9 / 10, data.len() - 3] {
            let r = decode_striped(&data[..cut], 1 << 30, 3);
            assert!(matches!(r, Err(Fail::Corrupt(_))), "cut at {cut}: {r:?}");
        }
    }
}
