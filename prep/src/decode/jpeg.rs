//! JPEG through libjpeg-turbo's decoder (the `mozjpeg-sys` build of it, C paths), configured as
//! Pillow's `JpegDecode.c` leaves it: ISLOW IDCT, fancy upsampling, block smoothing on; the
//! colour space libjpeg infers from the markers; output L, RGB or CMYK by component count.
//! Four-component images are read as PIL's "CMYK;I" (Adobe-inverted) and converted by `cmyk2rgb`.
//! libjpeg's errors come back as `Fail::Corrupt`; running out of data (libjpeg's "premature end
//! of JPEG file" warning, where PIL raises "image file is truncated") is an error too.

use super::Fail;
use super::modes::{Pixels, Raster, Transparency};
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
struct Geometry {
    width: usize,
    height: usize,
    comps: usize,
    /// Rows per iMCU row: stripes start on these boundaries.
    imcu_rows: usize,
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
    let g = with_decompressor(data, max_bytes, |c| unsafe { geometry(c) })?;
    let (w, h, comps) = (g.width, g.height, g.comps);
    let stride = w * comps;
    let mut buf = vec![0u8; stride * h];
    let stripes = if w * h < PARALLEL_MIN_PIXELS {
        1
    } else {
        stripes.max(1)
    };
    // Band height: a whole number of iMCU rows.
    let band = h.div_ceil(stripes).div_ceil(g.imcu_rows).max(1) * g.imcu_rows;
    if stripes == 1 || band >= h {
        with_decompressor(data, max_bytes, |c| unsafe {
            read_rows(c, 0, &mut buf, stride, true)
        })?;
    } else {
        use rayon::prelude::*;
        let bands: Vec<(usize, &mut [u8])> = buf.chunks_mut(band * stride).enumerate().collect();
        let last = bands.len() - 1;
        bands.into_par_iter().try_for_each(|(i, out)| {
            with_decompressor(data, max_bytes, |c| unsafe {
                read_rows(c, i * band, out, stride, i == last)
            })
        })?;
    }
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
    })
}

/// Decodes rows `first..first + out.len() / stride` into `out`; with `finish`, also reads the
/// rest of the file (`jpeg_finish_decompress`).
unsafe fn read_rows(
    c: &mut j::jpeg_decompress_struct,
    first: usize,
    out: &mut [u8],
    stride: usize,
    finish: bool,
) -> Result<(), Fail> {
    unsafe { j::jpeg_start_decompress(c) };
    let h = c.output_height as usize;
    if stride != c.output_width as usize * c.output_components as usize {
        return Err(Fail::Corrupt(
            "libjpeg's output size differs from the header's".into(),
        ));
    }
    let n = out.len() / stride.max(1);
    if first > 0 {
        let skipped = unsafe { j::jpeg_skip_scanlines(c, first as u32) } as usize;
        if skipped != first {
            return Err(Fail::Corrupt("libjpeg could not skip to the band".into()));
        }
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
    if finish {
        unsafe { j::jpeg_finish_decompress(c) };
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
    fn striped_decode_reports_truncation() {
        let data = sample(1100, 517, 7);
        for cut in [data.len() / 3, data.len() * 9 / 10, data.len() - 3] {
            let r = decode_striped(&data[..cut], 1 << 30, 3);
            assert!(matches!(r, Err(Fail::Corrupt(_))), "cut at {cut}: {r:?}");
        }
    }
}
