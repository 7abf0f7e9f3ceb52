//! PNG: raw samples from the `png` crate (no transformations), then PIL's `PngImagePlugin` modes:
//! 1-bit gray is "1", 2/4-bit gray scales by 0x55/0x11 ("L;2"/"L;4"), 16-bit gray is "I;16",
//! 16-bit colour keeps the high byte of each sample ("RGB;16B", "RGBA;16B", "LA;16B"), and
//! palette images keep their indices with a palette whose alpha comes from tRNS.

use super::Fail;
use super::modes::{Pixels, Raster, Transparency, blank_palette};
use png::{BitDepth, ColorType, Transformations};

pub(crate) fn decode(data: &[u8], max_bytes: usize) -> Result<Raster, Fail> {
    let mut dec =
        png::Decoder::new_with_limits(std::io::Cursor::new(data), png::Limits { bytes: max_bytes });
    dec.set_transformations(Transformations::IDENTITY);
    // PIL verifies no checksum of IDAT or later chunks (header chunks are checked in `header`).
    dec.ignore_checksums(true);
    let mut reader = dec.read_info().map_err(map_err)?;
    let (w, h, depth, color, palette, trns) = {
        let info = reader.info();
        (
            info.width,
            info.height,
            info.bit_depth,
            info.color_type,
            info.palette.as_ref().map(|p| p.to_vec()),
            info.trns.as_ref().map(|t| t.to_vec()),
        )
    };
    let size = reader
        .output_buffer_size()
        .ok_or_else(|| Fail::Corrupt("the image is too large for this platform".into()))?;
    let mut buf = vec![0u8; size];
    let out = reader.next_frame(&mut buf).map_err(map_err)?;
    let stride = out.line_size;
    let (wu, hu) = (w as usize, h as usize);
    let n = wu * hu;
    let row = |y: usize| &buf[y * stride..(y + 1) * stride];
    // Unpacks `bits`-bit samples (msb first) of one row into indices.
    let unpack = |bits: usize| -> Vec<u8> {
        let mut v = Vec::with_capacity(n);
        let per = 8 / bits;
        let mask = (1u8 << bits) - 1;
        for y in 0..hu {
            let r = row(y);
            for x in 0..wu {
                let byte = r[x / per];
                let shift = 8 - bits * (x % per + 1);
                v.push((byte >> shift) & mask);
            }
        }
        v
    };
    let be16 = |r: &[u8], i: usize| u16::from_be_bytes([r[2 * i], r[2 * i + 1]]);
    // The png crate keeps a key's low byte only below 16 bits; PIL compares keys by their low
    // byte (`rgbT2a`), so the two agree.
    let sixteen = depth == BitDepth::Sixteen;
    let key = |t: &[u8], i: usize| {
        if sixteen {
            u16::from_be_bytes([t[2 * i], t[2 * i + 1]])
        } else {
            t[i] as u16
        }
    };
    let gray_key = || {
        trns.as_ref()
            .filter(|t| t.len() >= if sixteen { 2 } else { 1 })
            .map(|t| key(t, 0))
    };
    let mut transparency = Transparency::None;
    let pixels = match (color, depth) {
        (ColorType::Grayscale, BitDepth::One) => {
            if let Some(k) = gray_key() {
                transparency = Transparency::Gray(if k != 0 { 255 } else { 0 });
            }
            Pixels::Bilevel(unpack(1).into_iter().map(|b| b * 255).collect())
        }
        (ColorType::Grayscale, BitDepth::Two | BitDepth::Four) => {
            if let Some(k) = gray_key() {
                transparency = Transparency::Gray(k);
            }
            let (bits, scale) = if depth == BitDepth::Two {
                (2, 0x55)
            } else {
                (4, 0x11)
            };
            Pixels::L(unpack(bits).into_iter().map(|b| b * scale).collect())
        }
        (ColorType::Grayscale, BitDepth::Eight) => {
            if let Some(k) = gray_key() {
                transparency = Transparency::Gray(k);
            }
            Pixels::L((0..hu).flat_map(|y| row(y)[..wu].to_vec()).collect())
        }
        (ColorType::Grayscale, BitDepth::Sixteen) => {
            if let Some(k) = gray_key() {
                transparency = Transparency::Gray(k);
            }
            Pixels::I16(
                (0..hu)
                    .flat_map(|y| (0..wu).map(move |x| (y, x)))
                    .map(|(y, x)| be16(row(y), x))
                    .collect(),
            )
        }
        (ColorType::Rgb, BitDepth::Eight | BitDepth::Sixteen) => {
            if let Some(t) = trns
                .as_ref()
                .filter(|t| t.len() >= if sixteen { 6 } else { 3 })
            {
                transparency = Transparency::Rgb(key(t, 0), key(t, 1), key(t, 2));
            }
            Pixels::Rgb(high_bytes(buf, stride, hu, wu * 3, sixteen))
        }
        (ColorType::Rgba, BitDepth::Eight | BitDepth::Sixteen) => {
            Pixels::Rgba(high_bytes(buf, stride, hu, wu * 4, sixteen))
        }
        (ColorType::GrayscaleAlpha, BitDepth::Eight) => {
            Pixels::La(high_bytes(buf, stride, hu, wu * 2, false))
        }
        (ColorType::GrayscaleAlpha, BitDepth::Sixteen) => {
            // "LA;16B" unpacks to RGBA.
            let la = high_bytes(buf, stride, hu, wu * 2, true);
            Pixels::Rgba(
                la.chunks_exact(2)
                    .flat_map(|p| [p[0], p[0], p[0], p[1]])
                    .collect(),
            )
        }
        (ColorType::Indexed, _) => {
            let bits = match depth {
                BitDepth::One => 1,
                BitDepth::Two => 2,
                BitDepth::Four => 4,
                BitDepth::Eight => 8,
                BitDepth::Sixteen => return Err(Fail::Corrupt("16-bit palette PNG".into())),
            };
            let idx = if bits == 8 {
                (0..hu).flat_map(|y| row(y)[..wu].to_vec()).collect()
            } else {
                unpack(bits)
            };
            let mut pal = blank_palette();
            let plte = palette
                .ok_or_else(|| Fail::Corrupt("palette image without a PLTE chunk".into()))?;
            for (i, c) in plte.chunks_exact(3).take(256).enumerate() {
                pal[i] = [c[0], c[1], c[2], 255];
            }
            if let Some(t) = &trns {
                // PIL keeps a tRNS of only 0xff bytes and exactly one 0x00 as an index (an int
                // `info["transparency"]`), anything else as bytes. Both give the same palette
                // alphas, but only the index survives `convert("RGB")` as a colour key.
                let zeros = t.iter().filter(|&&a| a == 0).count();
                let simple = zeros == 1 && t.iter().all(|&a| a == 0 || a == 255);
                transparency = match t.iter().position(|&a| a == 0) {
                    Some(i) if simple => Transparency::PaletteIndex(i as u8),
                    _ => Transparency::Palette,
                };
                for (i, &a) in t.iter().take(256).enumerate() {
                    pal[i][3] = a;
                }
            }
            Pixels::P(idx, pal)
        }
        (c, d) => {
            return Err(Fail::Corrupt(format!(
                "invalid colour type {c:?} with bit depth {d:?}"
            )));
        }
    };
    Ok(Raster {
        width: w,
        height: h,
        pixels,
        transparency,
    })
}

/// Row-by-row reading of a PNG whose rows are already what `load_image` gives: 8-bit RGB, not
/// interlaced, no tRNS colour key, not animated. [`decode`] reads the same rows with the same
/// reader settings.
pub(crate) struct RgbRows<'a> {
    reader: png::Reader<std::io::Cursor<&'a [u8]>>,
    pub width: usize,
    pub height: usize,
}

impl<'a> RgbRows<'a> {
    /// `None` when the image is not such a PNG (then use [`decode`]).
    pub(crate) fn open(data: &'a [u8], max_bytes: usize) -> Result<Option<RgbRows<'a>>, Fail> {
        let mut dec = png::Decoder::new_with_limits(
            std::io::Cursor::new(data),
            png::Limits { bytes: max_bytes },
        );
        dec.set_transformations(Transformations::IDENTITY);
        dec.ignore_checksums(true);
        let reader = dec.read_info().map_err(map_err)?;
        let info = reader.info();
        let plain = info.color_type == ColorType::Rgb
            && info.bit_depth == BitDepth::Eight
            && !info.interlaced
            && info.trns.is_none()
            && info.animation_control.is_none();
        let (width, height) = (info.width as usize, info.height as usize);
        Ok(plain.then_some(RgbRows {
            reader,
            width,
            height,
        }))
    }

    /// Decodes the next `rows.len() / (width * 3)` rows into `rows`.
    pub(crate) fn read(&mut self, rows: &mut [u8]) -> Result<(), Fail> {
        for row in rows.chunks_exact_mut(self.width * 3) {
            if self.reader.read_row(row).map_err(map_err)?.is_none() {
                return Err(Fail::Corrupt("the image data ends early".into()));
            }
        }
        Ok(())
    }

    /// After the last row: reads past the image data, as [`decode`] does.
    pub(crate) fn finish(mut self) -> Result<(), Fail> {
        let mut scratch = vec![0u8; self.width * 3];
        match self.reader.read_row(&mut scratch).map_err(map_err)? {
            None => Ok(()),
            Some(_) => Err(Fail::Corrupt(
                "the image has more rows than its header says".into(),
            )),
        }
    }
}

/// Copies `len` bytes per row, or for 16-bit samples the high (first) byte of each of `len` samples.
/// Rows of 8-bit samples already packed back to back are kept in place.
fn high_bytes(mut buf: Vec<u8>, stride: usize, h: usize, len: usize, sixteen: bool) -> Vec<u8> {
    if !sixteen && stride == len && buf.len() >= h * len {
        buf.truncate(h * len);
        return buf;
    }
    let mut out = Vec::with_capacity(h * len);
    for y in 0..h {
        let r = &buf[y * stride..(y + 1) * stride];
        if sixteen {
            out.extend(r[..2 * len].chunks_exact(2).map(|p| p[0]));
        } else {
            out.extend_from_slice(&r[..len]);
        }
    }
    out
}

fn map_err(e: png::DecodingError) -> Fail {
    match e {
        png::DecodingError::LimitsExceeded => Fail::Limits,
        png::DecodingError::IoError(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            Fail::Corrupt("the file ends before the image data does (truncated)".into())
        }
        other => Fail::Corrupt(other.to_string()),
    }
}
