//! IM (IFUNC Image Memory) and IMT (IM Tools), read as Pillow 13.0.0's `ImImagePlugin` and
//! `ImtImagePlugin` read them.
//!
//! IM: text header lines `Key: value` (100 bytes at most each; `Image type` through PIL's `OPEN`
//! table, `Image size (x*y)` as two numbers, defaults L and 512x512) up to a NUL or `0x1a`, the data
//! after the next `0x1a`; a `Lut` key puts 768 bytes (256 R, 256 G, 256 B) there, which turn an
//! L image into P unless they are gray (a gray ramp that is not linear is kept only as
//! `im.lut`, which `load` never applies; so is any `Lut` of an RGB image). Rows are stored
//! bottom-up: L and "1", P, RGB as a plane per line (`RGB;L`) or interleaved (`X 24`), the
//! `RGB3` layout (whole G, R, B planes), RGBA, RGBX, LA and CMYK with a plane per line, and
//! 16-bit gray (`I;16`), modes I (32-bit) and F (8/16/32-bit integers, 32-bit floats), which
//! `convert("RGB")` clips to gray. PIL's other IM modes (YCbCr, PA, P without a `Lut`, I;16L/B,
//! F of other bit counts, RLB) are refused by name.
//!
//! IMT: lines `width N`, `height N`, `pixel n8` (`*` lines are comments) up to a form feed, then
//! the rows of an 8-bit gray image, top-down.

use super::Fail;
use super::legacy::{py_int, readline};
use super::modes::{Pixels, Raster, Transparency, blank_palette};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Layout {
    /// Mode "1", MSB first.
    Bit,
    /// Mode L, or P with the `Lut` palette.
    Byte,
    /// `n` planes per line (RGB;L: 3, LA;L: 2, RGBA;L/RGBX;L/CMYK;L: 4).
    Lines(usize),
    /// RGB interleaved (`X 24 image`).
    Rgb,
    /// RGB;T: whole planes G, R, B.
    Planes,
    /// I;16 little-endian.
    I16,
    /// Modes I and F: one little-endian sample per pixel, converted as `convert("RGB")` does
    /// (`i2rgb` clips; F goes through `f2l`: clipped, then truncated).
    Wide(Sample),
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Sample {
    /// I;32 / I;32S.
    I32,
    /// F;8, F;8S, F;16, F;16S, F;32 (unsigned), F;32F.
    F8,
    F8S,
    F16,
    F16S,
    F32,
    F32F,
}

impl Sample {
    fn bytes(self) -> usize {
        match self {
            Sample::F8 | Sample::F8S => 1,
            Sample::F16 | Sample::F16S => 2,
            Sample::I32 | Sample::F32 | Sample::F32F => 4,
        }
    }

    /// The L value `convert("RGB")` gives the sample `b`.
    fn to_l(self, b: &[u8]) -> u8 {
        let f: f32 = match self {
            Sample::I32 => return i32::from_le_bytes([b[0], b[1], b[2], b[3]]).clamp(0, 255) as u8,
            Sample::F8 => b[0] as f32,
            Sample::F8S => b[0] as i8 as f32,
            Sample::F16 => u16::from_le_bytes([b[0], b[1]]) as f32,
            Sample::F16S => i16::from_le_bytes([b[0], b[1]]) as f32,
            Sample::F32 => u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f32,
            Sample::F32F => f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        };
        // `f2l`: v <= 0 -> 0, v >= 255 -> 255, else (UINT8)v; NaN fails both tests and casts
        // to 0 here as on x86.
        if f <= 0.0 {
            0
        } else if f >= 255.0 {
            255
        } else {
            f as u8
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Bilevel,
    L,
    P,
    La,
    Rgb,
    Rgba,
    Cmyk,
    I16,
    /// PIL's I or F: read to L (a `Lut` does not apply).
    IorF,
}

struct Head {
    width: usize,
    height: usize,
    mode: Mode,
    layout: Layout,
    palette: Option<Vec<u8>>,
    data_at: usize,
}

fn unsupported(what: &str) -> Fail {
    Fail::Unsupported(format!("IM {what} (not read by glm5v)"))
}

/// `OPEN[value]`: the mode and how its samples are laid out.
fn open_mode(v: &[u8]) -> Result<(Mode, Layout), Fail> {
    Ok(match v {
        b"0 1 image" | b"L 1 image" | b"B1 image" => (Mode::Bilevel, Layout::Bit),
        b"Greyscale image" | b"Grayscale image" | b"L" => (Mode::L, Layout::Byte),
        b"RGB image" => (Mode::Rgb, Layout::Lines(3)),
        b"X 24 image" => (Mode::Rgb, Layout::Rgb),
        b"RGB3 image" => (Mode::Rgb, Layout::Planes),
        b"LA image" => (Mode::La, Layout::Lines(2)),
        b"RGBA image" => (Mode::Rgba, Layout::Lines(4)),
        b"RGBX image" => (Mode::Rgb, Layout::Lines(4)),
        b"CMYK image" => (Mode::Cmyk, Layout::Lines(4)),
        b"L 16 image" => (Mode::I16, Layout::I16),
        b"L 32 S image" | b"L 32S image" | b"L*32S image" => {
            (Mode::IorF, Layout::Wide(Sample::I32))
        }
        b"L 8 image" | b"L*8 image" => (Mode::IorF, Layout::Wide(Sample::F8)),
        b"L 8S image" | b"L*8S image" => (Mode::IorF, Layout::Wide(Sample::F8S)),
        b"L*16 image" => (Mode::IorF, Layout::Wide(Sample::F16)),
        b"L 16S image" | b"L*16S image" => (Mode::IorF, Layout::Wide(Sample::F16S)),
        b"L 32 F image" | b"L 32 image" | b"L*32 image" => (Mode::IorF, Layout::Wide(Sample::F32)),
        b"L 32F image" | b"L*32F image" => (Mode::IorF, Layout::Wide(Sample::F32F)),
        _ => {
            return Err(unsupported(&format!(
                "image type \"{}\"",
                String::from_utf8_lossy(v)
            )));
        }
    })
}

/// `ImImageFile._open`.
fn im_head(d: &[u8]) -> Result<Head, Fail> {
    let not_im = |why: &str| Fail::Corrupt(format!("not an IM file: {why}"));
    if !d[..d.len().min(100)].contains(&b'\n') {
        return Err(not_im("no line end in the first 100 bytes"));
    }
    let mut mode_value: Vec<u8> = b"L".to_vec();
    let mut size = (512usize, 512usize);
    let (mut lut, mut tags) = (false, 0);
    let mut pos = 0;
    let stop = loop {
        let Some(&c) = d.get(pos) else {
            break None;
        };
        pos += 1;
        match c {
            b'\r' => continue,
            0 | 0x1a => break Some(c),
            _ => {}
        }
        let rest = readline(d, pos, usize::MAX);
        pos += rest.len();
        let mut line = [&[c][..], rest].concat();
        if line.len() > 100 {
            return Err(not_im("a header line of more than 100 bytes"));
        }
        if line.ends_with(b"\r\n") {
            line.truncate(line.len() - 2);
        } else if line.ends_with(b"\n") {
            line.truncate(line.len() - 1);
        }
        // `^([A-Za-z][^:]*):[ \t]*(.*)[ \t]*$`
        let colon = line.iter().position(|&b| b == b':');
        let (Some(colon), true) = (colon, line.first().is_some_and(u8::is_ascii_alphabetic)) else {
            return Err(not_im("syntax error in the header"));
        };
        let key = &line[..colon];
        let v0 = colon
            + 1
            + line[colon + 1..]
                .iter()
                .take_while(|&&b| b == b' ' || b == b'\t')
                .count();
        let value = &line[v0..];
        // `number()` of each part: an int, else a float (`None` here), else an error.
        let numbers = || -> Result<Vec<Option<i64>>, Fail> {
            let text = String::from_utf8_lossy(value).replace('*', ",");
            text.split(',')
                .map(|p| match py_int(p.as_bytes()) {
                    Some(v) => Ok(Some(v)),
                    None if p.trim().parse::<f64>().is_ok() => Ok(None),
                    None => Err(not_im("a number that is not a number")),
                })
                .collect()
        };
        match key {
            b"Image size (x*y)" => match numbers()?[..] {
                [Some(w), Some(h)]
                    if (0..=u32::MAX as i64).contains(&w) && (0..=u32::MAX as i64).contains(&h) =>
                {
                    size = (w as usize, h as usize)
                }
                _ => return Err(unsupported("image size that is not two whole numbers")),
            },
            b"File size (no of images)" | b"Scale (x,y)" => {
                numbers()?;
            }
            b"Image type" => mode_value = value.to_vec(),
            b"Lut" => lut = true,
            _ => {}
        }
        if matches!(
            key,
            b"Comment"
                | b"Date"
                | b"Digitalization equipment"
                | b"File size (no of images)"
                | b"Lut"
                | b"Name"
                | b"Scale (x,y)"
                | b"Image size (x*y)"
                | b"Image type"
        ) {
            tags += 1;
        }
    };
    if tags == 0 {
        return Err(not_im("no known header key"));
    }
    // The data starts after the next 0x1a.
    let data_at = match stop {
        Some(0x1a) => pos,
        Some(_) => d[pos..]
            .iter()
            .position(|&b| b == 0x1a)
            .map(|i| pos + i + 1)
            .ok_or_else(|| not_im("the file ends before the header's end (truncated)"))?,
        _ => return Err(not_im("the file ends inside the header (truncated)")),
    };
    let (mut mode, layout) = open_mode(&mode_value)?;
    let mut palette = None;
    let mut data_at = data_at;
    if lut {
        let p = d
            .get(data_at..data_at + 768)
            .ok_or_else(|| not_im("the file ends inside the Lut (truncated)"))?;
        data_at += 768;
        let gray = (0..256).all(|i| p[i] == p[i + 256] && p[i] == p[i + 512]);
        match mode {
            Mode::L if !gray => {
                mode = Mode::P;
                palette = Some(p.to_vec());
            }
            Mode::La if !gray => return Err(unsupported("LA image with a colour Lut (mode PA)")),
            _ => {}
        }
    }
    Ok(Head {
        width: size.0,
        height: size.1,
        mode,
        layout,
        palette,
        data_at,
    })
}

/// `ImtImageFile._open`: (width, height, where the rows start).
fn imt_head(d: &[u8]) -> Result<Head, Fail> {
    let not_imt = |why: &str| Fail::Corrupt(format!("not an IMT file: {why}"));
    let mut pos = d.len().min(100);
    let mut buffer: Vec<u8> = d[..pos].to_vec();
    if !buffer.contains(&b'\n') {
        return Err(not_imt("no line end in the first 100 bytes"));
    }
    let (mut w, mut h, mut gray, mut data_at) = (0i64, 0i64, false, None);
    loop {
        let s = if !buffer.is_empty() {
            buffer.remove(0)
        } else if let Some(&c) = d.get(pos) {
            pos += 1;
            c
        } else {
            break;
        };
        if s == 0x0c {
            data_at = Some(pos - buffer.len());
            break;
        }
        if !buffer.contains(&b'\n') {
            let more = d.get(pos..(pos + 100).min(d.len())).unwrap_or(&[]);
            buffer.extend_from_slice(more);
            pos += more.len();
        }
        let first = buffer
            .iter()
            .position(|&b| b == b'\n')
            .unwrap_or(buffer.len());
        let mut line = vec![s];
        line.extend_from_slice(&buffer[..first]);
        buffer.drain(..(first + 1).min(buffer.len()));
        if line.len() == 1 || line.len() > 100 {
            break;
        }
        if line[0] == b'*' {
            continue;
        }
        // `([a-z]*) ([^ \r\n]*)`
        let k_end = line.iter().take_while(|b| b.is_ascii_lowercase()).count();
        if line.get(k_end) != Some(&b' ') {
            break;
        }
        let (k, rest) = (&line[..k_end], &line[k_end + 1..]);
        let v = &rest[..rest
            .iter()
            .position(|b| matches!(b, b' ' | b'\r' | b'\n'))
            .unwrap_or(rest.len())];
        match k {
            b"width" => w = py_int(v).ok_or_else(|| not_imt("a width that is not a number"))?,
            b"height" => h = py_int(v).ok_or_else(|| not_imt("a height that is not a number"))?,
            b"pixel" if v == b"n8" => gray = true,
            _ => {}
        }
    }
    if !gray || w <= 0 || h <= 0 || w > u32::MAX as i64 || h > u32::MAX as i64 {
        return Err(not_imt("no 8-bit pixel type or no positive size"));
    }
    let data_at = data_at.ok_or_else(|| not_imt("no form feed before the image data"))?;
    Ok(Head {
        width: w as usize,
        height: h as usize,
        mode: Mode::L,
        layout: Layout::Byte,
        palette: None,
        data_at,
    })
}

fn head(d: &[u8], imt: bool) -> Result<Head, Fail> {
    if imt { imt_head(d) } else { im_head(d) }
}

pub(crate) fn dims(d: &[u8], imt: bool) -> Result<(u32, u32), Fail> {
    let h = head(d, imt)?;
    let (Ok(w), Ok(ht)) = (u32::try_from(h.width), u32::try_from(h.height)) else {
        return Err(Fail::Corrupt("IM size out of range".into()));
    };
    Ok((w, ht))
}

pub(crate) fn decode(d: &[u8], imt: bool, max_bytes: usize) -> Result<Raster, Fail> {
    let h = head(d, imt)?;
    let (w, ht) = (h.width, h.height);
    if w == 0 || ht == 0 {
        return Err(Fail::Corrupt("IM image of zero size".into()));
    }
    let channels = match h.mode {
        Mode::Bilevel | Mode::L | Mode::P | Mode::IorF => 1,
        Mode::La | Mode::I16 => 2,
        Mode::Rgb => 3,
        Mode::Rgba | Mode::Cmyk => 4,
    };
    if w.saturating_mul(ht).saturating_mul(channels) > max_bytes {
        return Err(Fail::Limits);
    }
    let line = match h.layout {
        Layout::Bit => w.div_ceil(8),
        Layout::Byte | Layout::Planes => w,
        Layout::Lines(n) => n * w,
        Layout::Rgb => 3 * w,
        Layout::I16 => 2 * w,
        Layout::Wide(k) => k.bytes() * w,
    };
    let need = if h.layout == Layout::Planes {
        3 * w * ht
    } else {
        line * ht
    };
    let data = d
        .get(h.data_at..)
        .filter(|r| r.len() >= need)
        .ok_or_else(|| {
            Fail::Corrupt(format!(
                "the {} image data needs {need} bytes (truncated)",
                if imt { "IMT" } else { "IM" }
            ))
        })?;
    let mut out = vec![0u8; w * ht * channels];
    for r in 0..ht {
        // IM rows are stored bottom-up, IMT rows top-down.
        let y = if imt { r } else { ht - 1 - r };
        let src = &data[r * line..(r + 1) * line];
        let dst = &mut out[y * w * channels..(y + 1) * w * channels];
        match h.layout {
            Layout::Bit => {
                for (x, o) in dst.iter_mut().enumerate() {
                    *o = if src[x / 8] & (0x80 >> (x % 8)) != 0 {
                        255
                    } else {
                        0
                    };
                }
            }
            Layout::Byte | Layout::Rgb | Layout::I16 => dst.copy_from_slice(src),
            Layout::Wide(k) => {
                for (o, b) in dst.iter_mut().zip(src.chunks_exact(k.bytes())) {
                    *o = k.to_l(b);
                }
            }
            Layout::Lines(_) => {
                for x in 0..w {
                    for c in 0..channels {
                        dst[x * channels + c] = src[x + c * w];
                    }
                }
            }
            Layout::Planes => {
                // Tiles G, R, B, each a whole bottom-up plane.
                let page = w * ht;
                for x in 0..w {
                    let i = r * w + x;
                    dst[x * 3..x * 3 + 3].copy_from_slice(&[
                        data[page + i],
                        data[i],
                        data[2 * page + i],
                    ]);
                }
            }
        }
    }
    let pixels = match h.mode {
        Mode::Bilevel => Pixels::Bilevel(out),
        Mode::L | Mode::IorF => Pixels::L(out),
        Mode::P => {
            let p = h.palette.as_deref().unwrap_or(&[]);
            let mut pal = blank_palette();
            for (i, e) in pal.iter_mut().enumerate() {
                if let (Some(&r), Some(&g), Some(&b)) = (p.get(i), p.get(i + 256), p.get(i + 512)) {
                    *e = [r, g, b, 255];
                }
            }
            Pixels::P(out, pal)
        }
        Mode::La => Pixels::La(out),
        Mode::Rgb => Pixels::Rgb(out),
        Mode::Rgba => Pixels::Rgba(out),
        Mode::Cmyk => Pixels::Cmyk(out),
        Mode::I16 => Pixels::I16(
            out.chunks_exact(2)
                .map(|p| u16::from_le_bytes([p[0], p[1]]))
                .collect(),
        ),
    };
    Ok(Raster {
        width: w as u32,
        height: ht as u32,
        pixels,
        transparency: Transparency::None,
    })
}
