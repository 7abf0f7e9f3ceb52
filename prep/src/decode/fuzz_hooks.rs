//! Entry points for the differential fuzz targets of `fuzz/` (issue 26), which must reach code
//! that production calls only under conditions a fuzzer rarely meets (a large zlib stream, a
//! large JPEG). Not part of the library's API (hidden from its docs); nothing else calls them.

use super::{inflate, jpeg};
use crate::resize::HorizontalPass;

/// The two-thread inflate of the PNG decode on the zlib stream `z`, whose output must be exactly
/// `out_len` bytes, splitting streams of `min_bytes` or more (production: 128 KiB); with `wait`,
/// the first part waits for the second part's search instead of racing it (then the second part
/// runs whenever the search finds a start). Call it inside a rayon pool of at least two threads.
///
/// `Some((bytes, second_ran))` when the inflate accepted the stream; `None` when it refused it
/// (production then inflates with the `png` crate).
pub fn split_inflate(
    z: &[u8],
    out_len: usize,
    wait: bool,
    min_bytes: usize,
) -> Option<(Vec<u8>, bool)> {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, Ordering};
    let out = Mutex::new(vec![0u8; out_len]);
    let second_ran = AtomicBool::new(false);
    let put = |at: usize, b: &[u8]| -> Option<()> {
        let mut o = out.lock().unwrap_or_else(|e| e.into_inner());
        o.get_mut(at..at.checked_add(b.len())?)?.copy_from_slice(b);
        Some(())
    };
    let policy = if wait {
        inflate::Policy::Wait
    } else {
        inflate::Policy::Race
    };
    inflate::split_with(
        policy,
        z,
        out_len,
        min_bytes,
        |part| put(0, part).map(|()| ((), ())),
        |_, _| {},
        |_, o0, rest| {
            second_ran.store(true, Ordering::Relaxed);
            put(o0, rest)
        },
    )?;
    let out = out.into_inner().unwrap_or_else(|e| e.into_inner());
    Some((out, second_ran.into_inner()))
}

/// A JPEG's decoded samples: width, height, components, rows of `width * components` bytes
/// (before PIL's mode conversions), or libjpeg's error message.
pub type JpegSamples = Result<(usize, usize, usize, Vec<u8>), String>;

/// The JPEG decode of `load_image` with `stripes` row bands, each on its own decompressor, at
/// any image size (production stripes only images of 512k pixels or more; 1: one pass).
pub fn jpeg_striped(data: &[u8], max_bytes: usize, stripes: usize) -> JpegSamples {
    let r = jpeg::decode_forced_stripes(data, max_bytes, stripes).map_err(fail_text)?;
    let (w, h) = (r.width as usize, r.height as usize);
    let (comps, px) = match r.pixels {
        super::modes::Pixels::L(v) => (1, v),
        super::modes::Pixels::Rgb(v) => (3, v),
        super::modes::Pixels::Cmyk(v) => (4, v),
        _ => return Err("the JPEG decode gave a mode other than L, RGB or CMYK".into()),
    };
    Ok((w, h, comps, px))
}

/// The RGB rows of a 3-component JPEG resized horizontally to `out_w` pixels, as `prep_images`
/// reads them: decoded in the row bands a `stripes`-stripe decode would use (each band on its
/// own decompressor, starting at its iMCU row; the last one reads to the end of the file),
/// concatenated. `Ok(None)` for a JPEG that is not 3-component.
pub fn jpeg_rows_hresized(
    data: &[u8],
    max_bytes: usize,
    stripes: usize,
    out_w: usize,
) -> Result<Option<Vec<u8>>, String> {
    let Some(g) = jpeg::rgb_geometry(data, max_bytes).map_err(fail_text)? else {
        return Ok(None);
    };
    let (w, h) = (g.width, g.height);
    let bounds = jpeg::forced_stripe_bounds(&g, stripes);
    let pass = HorizontalPass::new(w, out_w);
    let mut out = vec![0u8; h * out_w * 3];
    let mut next = 0usize;
    let mut bad = None;
    for pair in bounds.windows(2) {
        let last = pair[1] == h;
        jpeg::decode_rows_hresized(
            data,
            max_bytes,
            &g,
            pair[0],
            pair[1],
            last,
            &pass,
            &mut |y, rows| {
                if y != next || (y + rows.len() / (out_w * 3)) > h {
                    bad = Some(format!("rows at {y}, expected {next}"));
                    return;
                }
                out[y * out_w * 3..y * out_w * 3 + rows.len()].copy_from_slice(rows);
                next = y + rows.len() / (out_w * 3);
            },
        )
        .map_err(fail_text)?;
    }
    if let Some(b) = bad {
        return Err(format!("the banded decode handed rows out of order: {b}"));
    }
    if next != h {
        return Err(format!("the banded decode gave {next} of {h} rows"));
    }
    Ok(Some(out))
}

/// RGB rows (`in_w * 3` bytes each) resized horizontally to `out_w`, as the banded JPEG decode
/// resizes them (the reference side of [`jpeg_rows_hresized`]).
pub fn hresize_rows(rows: &[u8], in_w: usize, out_w: usize) -> Vec<u8> {
    let pass = HorizontalPass::new(in_w, out_w);
    let mut tile = pass.tile();
    let n = rows.len() / (in_w * 3);
    let mut out = vec![0u8; n * out_w * 3];
    for (src, dst) in rows
        .chunks(HorizontalPass::ROWS * in_w * 3)
        .zip(out.chunks_mut(HorizontalPass::ROWS * out_w * 3))
    {
        pass.rows(&mut tile, src, dst);
    }
    out
}

fn fail_text(f: super::Fail) -> String {
    match f {
        super::Fail::Corrupt(s) => format!("corrupt: {s}"),
        super::Fail::Unsupported(s) => format!("unsupported: {s}"),
        super::Fail::Limits => "limits".into(),
    }
}
