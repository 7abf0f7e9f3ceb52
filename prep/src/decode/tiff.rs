//! TIFF, first IFD, with the `tiff` crate's samples mapped to the modes of Pillow's
//! `TiffImagePlugin.OPEN_INFO`: 16-bit gray is "I;16" (clips at 255 in RGB), 16-bit colour keeps
//! each sample's high byte ("RGB;16L"), associated alpha ("RGBa") is un-premultiplied as
//! `unpackRGBa` does. Palette TIFFs: the `tiff` crate refuses photometric 3, so a copy with
//! the tag set to BlackIsZero gives the indices, and the colormap keeps the high byte of each
//! 16-bit entry (`b // 256`), as Pillow's palette does; palette + alpha ("PA") keeps each pixel's
//! alpha beside its palette colour. FillOrder 2 (bits of each byte from the lowest) is undone for
//! uncompressed gray of 1-8 bits, as Pillow's `;R` unpackers do. Signed gray (SampleFormat 2):
//! 8-bit as its bytes, 16/32-bit as mode "I" (clipped to 0..=255 in RGB). Separate planes
//! (PlanarConfiguration 2) in strips are interleaved here; in tiles they are refused.
//!
//! JPEG-compressed TIFFs (compression 6 and 7) are refused: Pillow decodes them with libtiff and
//! libjpeg-turbo (colour conversion, upsampling, JPEGTables), which the `tiff` crate's JPEG path
//! does not reproduce bit for bit (the Pillow corpus shows the differences), so they are a typed
//! refusal rather than a silent difference.

use super::Fail;
use super::exif::{rd16, tiff_header};
use super::modes::{Pixels, Raster, Transparency, blank_palette};
use tiff::ColorType;
use tiff::decoder::{Decoder, DecodingResult, Limits};
use tiff::tags::Tag;

/// Offset of IFD0's PhotometricInterpretation value when it is 3 (palette), as a SHORT.
fn palette_photometric_at(d: &[u8]) -> Option<usize> {
    let (le, off) = tiff_header(d)?;
    let off = off as usize;
    let n = rd16(d, off, le)? as usize;
    (0..n).map(|i| off + 2 + i * 12).find_map(|e| {
        (rd16(d, e, le)? == 262 && rd16(d, e + 2, le)? == 3 && rd16(d, e + 8, le)? == 3)
            .then_some(e + 8)
    })
}

pub(crate) fn decode(data: &[u8], max_bytes: usize) -> Result<Raster, Fail> {
    let patched;
    let (data, palette) = match palette_photometric_at(data) {
        Some(at) => {
            let mut d = data.to_vec();
            let le = d.starts_with(b"II");
            d[at..at + 2].copy_from_slice(&if le {
                1u16.to_le_bytes()
            } else {
                1u16.to_be_bytes()
            });
            patched = d;
            (&patched[..], true)
        }
        None => (data, false),
    };
    let mut limits = Limits::default();
    limits.decoding_buffer_size = max_bytes;
    limits.intermediate_buffer_size = max_bytes;
    let mut dec = Decoder::new(std::io::Cursor::new(data))
        .map_err(map_err)?
        .with_limits(limits);
    let (w, h) = dec.dimensions().map_err(map_err)?;
    let compression = dec
        .find_tag_unsigned::<u16>(Tag::Compression)
        .map_err(map_err)?;
    if let Some(c @ (6 | 7)) = compression {
        return Err(Fail::Unsupported(format!(
            "JPEG-compressed TIFF (compression {c}): PIL decodes it through libtiff and \
             libjpeg-turbo, which glm5v does not reproduce bit for bit yet (convert it to PNG \
             or plain TIFF)"
        )));
    }
    let fill_reversed = dec
        .find_tag_unsigned::<u16>(Tag::FillOrder)
        .map_err(map_err)?
        == Some(2);
    let color = dec.colortype().map_err(map_err)?;
    let extra: Vec<u16> = dec
        .find_tag_unsigned_vec(Tag::ExtraSamples)
        .map_err(map_err)?
        .unwrap_or_default();
    let n = w as usize * h as usize;
    let planar = dec
        .find_tag_unsigned::<u16>(Tag::PlanarConfiguration)
        .map_err(map_err)?
        == Some(2);
    if planar && dec.find_tag(Tag::TileWidth).map_err(map_err)?.is_some() {
        // tiff 0.11's planar read of tiles trips an assertion inside the crate (the Pillow
        // corpus's tiff_tiled_planar_*): refused until the crate reads them.
        return Err(Fail::Unsupported(
            "tiled TIFF with separate planes (PlanarConfiguration 2)".into(),
        ));
    }
    let mut img = if planar {
        // PlanarConfiguration 2: the planes one after the other, interleaved here.
        let samples = dec
            .find_tag_unsigned::<u16>(Tag::SamplesPerPixel)
            .map_err(map_err)?
            .unwrap_or(1) as usize;
        let mut r = DecodingResult::U8(Vec::new());
        let layout = dec.read_image_to_buffer(&mut r).map_err(map_err)?;
        if r.as_buffer(0).as_bytes().len() < layout.complete_len {
            return Err(Fail::Limits);
        }
        interleave(r, samples).ok_or_else(|| unsupported_planar(color))?
    } else {
        dec.read_image().map_err(map_err)?
    };
    if fill_reversed && matches!(color, ColorType::Gray(1 | 2 | 4 | 8)) {
        if compression.unwrap_or(1) != 1 {
            return Err(Fail::Unsupported(format!(
                "FillOrder 2 with compression {} (PIL reads it through libtiff)",
                compression.unwrap_or(1)
            )));
        }
        // Uncompressed: the decoded bytes are the file's bytes, so reversing each byte's bits
        // reads them in FillOrder 1 (PIL's `L;2R`, `L;4R`, `1;R`, `L;R`).
        if let DecodingResult::U8(v) = &mut img {
            v.iter_mut().for_each(|b| *b = b.reverse_bits());
        }
    }
    let unsupported = |what: &str| Fail::Unsupported(format!("{what} TIFF ({color:?})"));
    let pixels = match (color, img) {
        (ColorType::Gray(b @ (1 | 2 | 4 | 8)), DecodingResult::U8(v)) if palette => {
            let map = dec.get_tag_u16_vec(Tag::ColorMap).map_err(map_err)?;
            let entries = 1usize << b;
            if map.len() != entries * 3 {
                return Err(Fail::Corrupt(format!(
                    "the colormap has {} values, {} expected",
                    map.len(),
                    entries * 3
                )));
            }
            let mut pal = blank_palette();
            for (i, p) in pal.iter_mut().enumerate().take(entries) {
                *p = [
                    (map[i] >> 8) as u8,
                    (map[entries + i] >> 8) as u8,
                    (map[2 * entries + i] >> 8) as u8,
                    255,
                ];
            }
            let idx = if b == 8 {
                v
            } else {
                unpack_bits(&v, w as usize, h as usize, b as usize)
            };
            Pixels::P(idx, pal)
        }
        // "PA": palette index + alpha; `convert("RGB")` drops the alpha, `convert("RGBA")` keeps it.
        (
            ColorType::Multiband {
                bit_depth: 8,
                num_samples: 2,
            },
            DecodingResult::U8(v),
        ) if palette => {
            let map = dec.get_tag_u16_vec(Tag::ColorMap).map_err(map_err)?;
            if map.len() != 256 * 3 {
                return Err(Fail::Corrupt(format!(
                    "the colormap has {} values, 768 expected",
                    map.len()
                )));
            }
            let mut out = Vec::with_capacity(n * 4);
            for p in v.chunks_exact(2) {
                let i = p[0] as usize;
                out.extend([
                    (map[i] >> 8) as u8,
                    (map[256 + i] >> 8) as u8,
                    (map[512 + i] >> 8) as u8,
                    p[1],
                ]);
            }
            Pixels::Rgba(out)
        }
        (ColorType::Gray(8), DecodingResult::U8(v)) => Pixels::L(v),
        (ColorType::Gray(16), DecodingResult::U16(v)) => Pixels::I16(v),
        // Signed samples (SampleFormat 2): 8-bit is read as its bytes ("L"), 16 and 32-bit as
        // mode "I" ("I;16S", "I;32S"), whose conversion to RGB clips to 0..=255 (`i2rgb`).
        (ColorType::Gray(8), DecodingResult::I8(v)) => {
            Pixels::L(v.into_iter().map(|x| x as u8).collect())
        }
        (ColorType::Gray(16), DecodingResult::I16(v)) => {
            Pixels::L(v.into_iter().map(|x| x.clamp(0, 255) as u8).collect())
        }
        (ColorType::Gray(32), DecodingResult::I32(v)) => {
            Pixels::L(v.into_iter().map(|x| x.clamp(0, 255) as u8).collect())
        }
        (ColorType::Gray(b @ (1 | 2 | 4)), DecodingResult::U8(v)) => {
            let idx = unpack_bits(&v, w as usize, h as usize, b as usize);
            match b {
                1 => Pixels::Bilevel(idx.into_iter().map(|x| x * 255).collect()),
                2 => Pixels::L(idx.into_iter().map(|x| x * 0x55).collect()),
                _ => Pixels::L(idx.into_iter().map(|x| x * 0x11).collect()),
            }
        }
        (ColorType::GrayA(8), DecodingResult::U8(v)) => Pixels::La(v),
        // Gray plus one extra sample: ExtraSamples 0 is "LX" (mode L), 2 or absent is "LA".
        (
            ColorType::Multiband {
                bit_depth: 8,
                num_samples: 2,
            },
            DecodingResult::U8(v),
        ) => match extra.first() {
            Some(0) => Pixels::L(v.chunks_exact(2).map(|p| p[0]).collect()),
            None | Some(2) => Pixels::La(v),
            _ => return Err(unsupported("premultiplied gray+alpha")),
        },
        (ColorType::RGB(8), DecodingResult::U8(v)) => Pixels::Rgb(v),
        (ColorType::RGB(16), DecodingResult::U16(v)) => {
            Pixels::Rgb(v.iter().map(|&s| (s >> 8) as u8).collect())
        }
        (ColorType::RGBA(8), DecodingResult::U8(v)) => rgba(v, &extra),
        (ColorType::RGBA(16), DecodingResult::U16(v)) => {
            rgba(v.iter().map(|&s| (s >> 8) as u8).collect(), &extra)
        }
        (ColorType::CMYK(8), DecodingResult::U8(v)) => Pixels::Cmyk(v),
        (ColorType::CMYK(16), DecodingResult::U16(v)) => {
            Pixels::Cmyk(v.iter().map(|&s| (s >> 8) as u8).collect())
        }
        _ => return Err(unsupported("this kind of")),
    };
    let expected = match &pixels {
        Pixels::La(_) => 2 * n,
        Pixels::Rgb(_) => 3 * n,
        Pixels::Rgba(_) | Pixels::Cmyk(_) => 4 * n,
        _ => n,
    };
    let got = match &pixels {
        Pixels::Bilevel(v)
        | Pixels::L(v)
        | Pixels::La(v)
        | Pixels::Rgb(v)
        | Pixels::Rgba(v)
        | Pixels::Cmyk(v) => v.len(),
        Pixels::P(v, _) => v.len(),
        Pixels::I16(v) => v.len(),
    };
    if got < expected {
        return Err(Fail::Corrupt(
            "fewer samples than the image size needs".into(),
        ));
    }
    Ok(Raster {
        width: w,
        height: h,
        pixels,
        transparency: Transparency::None,
    })
}

fn unsupported_planar(color: ColorType) -> Fail {
    Fail::Unsupported(format!("planar TIFF of {color:?}"))
}

/// `samples` planes of equal length, one after the other, to interleaved samples (8 and 16 bits).
fn interleave(r: DecodingResult, samples: usize) -> Option<DecodingResult> {
    fn mix<T: Copy>(v: &[T], samples: usize) -> Option<Vec<T>> {
        if samples == 0 || !v.len().is_multiple_of(samples) {
            return None;
        }
        let n = v.len() / samples;
        Some(
            (0..n * samples)
                .map(|i| v[(i % samples) * n + i / samples])
                .collect(),
        )
    }
    match r {
        DecodingResult::U8(v) => mix(&v, samples).map(DecodingResult::U8),
        DecodingResult::U16(v) => mix(&v, samples).map(DecodingResult::U16),
        _ => None,
    }
}

/// RGBA with ExtraSamples: 0 (unspecified) is "RGBX", 1 (associated) is "RGBa", else "RGBA".
fn rgba(mut v: Vec<u8>, extra: &[u16]) -> Pixels {
    match extra.first() {
        Some(0) => Pixels::Rgb(v.chunks_exact(4).flat_map(|p| [p[0], p[1], p[2]]).collect()),
        Some(1) => {
            // `unpackRGBa`: CLIP8(c * 255 / a); a == 0 gives all zeros.
            for p in v.chunks_exact_mut(4) {
                let a = p[3] as u32;
                if a == 0 {
                    p.copy_from_slice(&[0, 0, 0, 0]);
                } else if a != 255 {
                    for c in &mut p[..3] {
                        *c = (*c as u32 * 255 / a).min(255) as u8;
                    }
                }
            }
            Pixels::Rgba(v)
        }
        _ => Pixels::Rgba(v),
    }
}

/// Rows of `bits`-bit samples, msb first, each row padded to a byte.
fn unpack_bits(v: &[u8], w: usize, h: usize, bits: usize) -> Vec<u8> {
    let stride = (w * bits).div_ceil(8);
    let mask = ((1u16 << bits) - 1) as u8;
    let mut out = Vec::with_capacity(w * h);
    for y in 0..h {
        let row = v.get(y * stride..(y + 1) * stride).unwrap_or(&[]);
        for x in 0..w {
            let bit = x * bits;
            let byte = row.get(bit / 8).copied().unwrap_or(0);
            out.push((byte >> (8 - bits - bit % 8)) & mask);
        }
    }
    out
}

fn map_err(e: tiff::TiffError) -> Fail {
    match e {
        tiff::TiffError::LimitsExceeded => Fail::Limits,
        tiff::TiffError::UnsupportedError(u) => Fail::Unsupported(u.to_string()),
        tiff::TiffError::IoError(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            Fail::Corrupt("the file ends before the image data does (truncated)".into())
        }
        other => Fail::Corrupt(other.to_string()),
    }
}
