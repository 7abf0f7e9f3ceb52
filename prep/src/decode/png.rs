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

/// The RGB rows of an 8-bit RGB, non-interlaced PNG (those [`RgbRows`] reads), its image data
/// inflated on two threads ([`super::inflate::inflate_zlib_split`]) and unfiltered on each:
///
/// - `first(rows, k)` on this thread with rows `0..k` (packed, `width * 3` bytes each) as soon as
///   they are in, returning what `second` needs (`P`) and what `first_after` needs (`Q`);
/// - `first_after(q, rows)` then on this thread, while the other may still be inflating;
/// - `second(p, k, rows)` on the other thread with rows `k..height`.
///
/// When the other thread does not take part, `first` gets every row (`k == height`) and `second`
/// does not run. `Some(())` when all went through and every check passed; `None` when this does
/// not apply or does not succeed (a short or unsplittable stream, another length, a checksum or
/// filter type that is wrong, IDAT chunks not in one run): the callbacks may then have run on
/// wrong rows, and the caller must redo their work ([`RgbRows`] reads the file, and reports what
/// is wrong with it).
pub(crate) fn rgb8_split<P: Send, Q>(
    data: &[u8],
    width: usize,
    height: usize,
    first: impl FnOnce(&[u8], usize) -> (P, Q) + Send,
    first_after: impl FnOnce(Q, &[u8]) + Send,
    second: impl FnOnce(P, usize, &[u8]) + Send,
) -> Option<()> {
    let z = image_data(data)?;
    let row = width.checked_mul(3)?;
    let out_len = height.checked_mul(row + 1)?;
    super::inflate::inflate_zlib_split(
        &z,
        out_len,
        |part| {
            let k = (part.len() / (row + 1)).min(height);
            unfilter(part, row, 0..k, 3)?;
            // for the second part: the raw bytes of row k that are here, and row k - 1
            let head = part[k * (row + 1)..].to_vec();
            let above = match k {
                0 => vec![0u8; row],
                _ => part[(k - 1) * row..k * row].to_vec(),
            };
            let (p, q) = first(&part[..k * row], k);
            Some(((p, head, above, k), (q, k)))
        },
        |(q, k), part| first_after(q, &part[..k * row]),
        |(p, head, above, k), _, rest| {
            // row k - 1 in row slot 0, the raw rows k.. from slot 1 on, unfiltered in place
            let n = height - k;
            if head.len() + rest.len() != n * (row + 1) {
                return None;
            }
            let mut buf = vec![0u8; (n + 1) * (row + 1)];
            buf[..row].copy_from_slice(&above);
            buf[row + 1..row + 1 + head.len()].copy_from_slice(&head);
            buf[row + 1 + head.len()..].copy_from_slice(rest);
            unfilter(&mut buf, row, 1..n + 1, 3)?;
            second(p, k, &buf[row..(n + 1) * row]);
            Some(())
        },
    )
}

/// The zlib stream of a PNG: its IDAT chunks' contents in order (borrowed when there is one).
fn image_data(data: &[u8]) -> Option<std::borrow::Cow<'_, [u8]>> {
    if data.get(..8)? != b"\x89PNG\r\n\x1a\n" {
        return None;
    }
    let (mut at, mut parts, mut after_idat) = (8usize, Vec::new(), false);
    loop {
        let len = super::bytes::be32(data, at)? as usize;
        let body = data.get(at + 8..(at + 8).checked_add(len)?)?;
        match data.get(at + 4..at + 8)? {
            b"IDAT" if after_idat => return None,
            b"IDAT" => parts.push(body),
            b"IEND" => break,
            _ => after_idat = !parts.is_empty(),
        }
        at += 12 + len;
    }
    match parts.len() {
        0 => None,
        1 => Some(parts[0].into()),
        _ => Some(parts.concat().into()),
    }
}

/// Undoes the row filters of rows `rows` of `raw` in place (raw row `y`: its filter type byte
/// at `y * (row + 1)`, then `row` bytes of 8-bit samples, `bpp` bytes a pixel), moving each to
/// `y * row`, where the rows above must already be. `None` for a filter type other than 0-4.
fn unfilter(raw: &mut [u8], row: usize, rows: std::ops::Range<usize>, bpp: usize) -> Option<()> {
    for y in rows {
        let src = y * (row + 1);
        let filter = raw[src];
        raw.copy_within(src + 1..src + 1 + row, y * row);
        let (done, cur) = raw.split_at_mut(y * row);
        let cur = &mut cur[..row];
        // the row above (none above the first: zeros)
        let up = |i: usize| if y > 0 { done[(y - 1) * row + i] } else { 0 };
        match filter {
            0 => {}
            1 if bpp == 3 => {
                let mut left = [0u8; 3];
                for px in cur.chunks_exact_mut(3) {
                    for c in 0..3 {
                        left[c] = px[c].wrapping_add(left[c]);
                        px[c] = left[c];
                    }
                }
            }
            1 => {
                for i in bpp..row {
                    cur[i] = cur[i].wrapping_add(cur[i - bpp]);
                }
            }
            2 if y > 0 => {
                for (c, &p) in cur.iter_mut().zip(&done[(y - 1) * row..]) {
                    *c = c.wrapping_add(p);
                }
            }
            2 => {}
            3 => {
                for i in 0..row {
                    let left = if i >= bpp { cur[i - bpp] } else { 0 };
                    cur[i] = cur[i].wrapping_add(((left as u16 + up(i) as u16) >> 1) as u8);
                }
            }
            4 => {
                for i in 0..row {
                    let (a, c) = if i >= bpp {
                        (cur[i - bpp], up(i - bpp))
                    } else {
                        (0, 0)
                    };
                    cur[i] = cur[i].wrapping_add(paeth(a, up(i), c));
                }
            }
            _ => return None,
        }
    }
    Some(())
}

/// The PNG Paeth predictor: of left, up and upper left, the one nearest to left + up - upper left
/// (ties in that order).
fn paeth(a: u8, b: u8, c: u8) -> u8 {
    let (a, b, c) = (a as i16, b as i16, c as i16);
    let p = a + b - c;
    let (pa, pb, pc) = ((p - a).abs(), (p - b).abs(), (p - c).abs());
    (if pa <= pb && pa <= pc {
        a
    } else if pb <= pc {
        b
    } else {
        c
    }) as u8
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

/// Tests: a photo-like RGB image, smooth gradients plus noise from `seed` (non-zero): as a PNG,
/// a zlib stream of several hundred KiB in many blocks.
#[cfg(test)]
pub(crate) fn test_photo(w: usize, h: usize, seed: u64) -> Vec<u8> {
    let mut s = seed;
    let mut px = Vec::with_capacity(w * h * 3);
    for y in 0..h {
        for x in 0..w {
            for c in 0..3 {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                let v = (x * (c + 1) + y * (3 - c)) as f64 / 5.0 + (s % 25) as f64 - 12.0;
                px.push(v.rem_euclid(256.0) as u8);
            }
        }
    }
    px
}

/// Tests: 8-bit RGB pixels `px` (`w` x `h`) as a PNG with this filter and zlib level (0:
/// fdeflate's fast encoder instead).
#[cfg(test)]
pub(crate) fn test_png(px: &[u8], w: usize, h: usize, filter: png::Filter, level: u8) -> Vec<u8> {
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, w as u32, h as u32);
    enc.set_color(ColorType::Rgb);
    enc.set_depth(BitDepth::Eight);
    enc.set_filter(filter);
    enc.set_deflate_compression(match level {
        0 => png::DeflateCompression::FdeflateUltraFast,
        l => png::DeflateCompression::Level(l),
    });
    let mut wr = enc.write_header().unwrap();
    wr.write_image_data(px).unwrap();
    wr.finish().unwrap();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The two-thread decode gives the rows the png crate reads ([`RgbRows`]) for every filter
    /// type, at zlib levels 6 and 9 (where it must split) and with fdeflate's encoder (where it
    /// may not, and then gives `None`).
    #[test]
    fn split_decode_equals_png_crate() {
        let (w, h) = (700, 420);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        // the second part always runs (else a slow thread leaves everything to the first)
        super::super::inflate_wait_for_second(true);
        let px = test_photo(w, h, 0x243f_6a88_85a3_08d3);
        let mut split = 0;
        for filter in [
            png::Filter::NoFilter,
            png::Filter::Sub,
            png::Filter::Up,
            png::Filter::Avg,
            png::Filter::Paeth,
            png::Filter::Adaptive,
        ] {
            for level in [0, 6, 9] {
                let file = test_png(&px, w, h, filter, level);
                let mut rows = RgbRows::open(&file, usize::MAX).unwrap().unwrap();
                let mut want = vec![0u8; w * h * 3];
                rows.read(&mut want).unwrap();
                assert_eq!(want, px, "the png crate reads back what was written");
                let got = std::sync::Mutex::new(vec![0u8; w * h * 3]);
                let second_ran = std::sync::atomic::AtomicBool::new(false);
                let put = |k: usize, rows: &[u8]| {
                    got.lock().unwrap()[k * w * 3..k * w * 3 + rows.len()].copy_from_slice(rows)
                };
                let r = pool.install(|| {
                    rgb8_split(
                        &file,
                        w,
                        h,
                        |rows, _| {
                            put(0, rows);
                            ((), ())
                        },
                        |_, _| {},
                        |_, k, rows| {
                            put(k, rows);
                            second_ran.store(true, std::sync::atomic::Ordering::Relaxed);
                        },
                    )
                });
                match r {
                    Some(()) => {
                        assert!(
                            *got.lock().unwrap() == want,
                            "{filter:?}, level {level}: other rows"
                        );
                        split += second_ran.load(std::sync::atomic::Ordering::Relaxed) as usize;
                    }
                    None => assert_eq!(level, 0, "{filter:?}, level {level}: not inflated"),
                }
            }
        }
        super::super::inflate_wait_for_second(false);
        assert!(split >= 12, "{split} of 18 files split");
        // a filter type past 4 is left to the png crate
        let mut raw = vec![5u8, 1, 2, 3];
        assert!(unfilter(&mut raw, 3, 0..1, 3).is_none());
    }
}
