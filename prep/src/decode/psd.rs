//! PSD (Photoshop), the merged composite, read as Pillow 13.0.0's `PsdImagePlugin` reads it on
//! `Image.open` (frame 1, the image data section; layers are not composited): the header's mode
//! and depth through `MODES`, a 4-channel RGB image is RGBA, the colour mode data gives a palette
//! ("RGB;L") for mode P when it is 768 bytes, the image resources are walked as `_open` walks them,
//! the layer section skipped, then `_maketile`: one band per channel, raw or PackBits (each band
//! decoded from its own offset as Pillow's `PackbitsDecode.c` decodes it: a run past the end of a
//! row is an error). CMYK bands are inverted (";I"); LAB goes to RGB through Little CMS (`lab.rs`).

use super::Fail;
use super::bytes::{be16, be32};
use super::modes::{Pixels, Raster, Transparency, blank_palette};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Bit,
    L,
    P,
    Rgb,
    Rgba,
    Cmyk,
    Lab,
}

impl Mode {
    fn channels(self) -> usize {
        match self {
            Mode::Bit | Mode::L | Mode::P => 1,
            Mode::Rgb | Mode::Lab => 3,
            Mode::Rgba | Mode::Cmyk => 4,
        }
    }
}

/// What `_open` found.
struct Open {
    width: u32,
    height: u32,
    mode: Mode,
    palette: Option<Vec<u8>>,
    /// Where the image data section (its compression field) starts.
    data_at: usize,
}

fn corrupt(what: &str) -> Fail {
    Fail::Corrupt(format!("{what} (truncated or malformed)"))
}

fn open(d: &[u8]) -> Result<Open, Fail> {
    if d.len() < 26 || !d.starts_with(b"8BPS") || be16(d, 4) != Some(1) {
        return Err(corrupt("not a version-1 PSD header"));
    }
    let psd_channels = be16(d, 12).unwrap_or(0) as usize;
    let (height, width) = (be32(d, 14).unwrap_or(0), be32(d, 18).unwrap_or(0));
    let (bits, psd_mode) = (be16(d, 22).unwrap_or(0), be16(d, 24).unwrap_or(0));
    let mut mode = match (psd_mode, bits) {
        (0, 1) => Mode::Bit,
        (0 | 1 | 7 | 8, 8) => Mode::L,
        (2, 8) => Mode::P,
        (3, 8) => Mode::Rgb,
        (4, 8) => Mode::Cmyk,
        (9, 8) => Mode::Lab,
        _ => {
            return Err(Fail::Unsupported(format!(
                "PSD colour mode {psd_mode} with {bits}-bit channels (PIL refuses it too)"
            )));
        }
    };
    if mode.channels() > psd_channels {
        return Err(Fail::Corrupt(format!(
            "{psd_channels} channels, fewer than the colour mode needs (PIL: not enough channels)"
        )));
    }
    if mode == Mode::Rgb && psd_channels == 4 {
        mode = Mode::Rgba;
    }
    let mut pos = 26;
    // Colour mode data.
    let size = be32(d, pos).ok_or_else(|| corrupt("the colour mode data"))? as usize;
    pos += 4;
    let palette = (mode == Mode::P && size == 768)
        .then(|| d.get(pos..pos + 768).map(<[u8]>::to_vec))
        .flatten();
    pos = pos.saturating_add(size);
    // Image resources, walked as `_open` reads them (a resource may run past the section).
    let size = be32(d, pos).ok_or_else(|| corrupt("the image resources"))? as usize;
    pos += 4;
    if size > 0 {
        let end = pos.saturating_add(size);
        while pos < end {
            pos += 4 + 2;
            let name_len = *d.get(pos).ok_or_else(|| corrupt("an image resource"))? as usize;
            pos += 1;
            let name_read = name_len.min(d.len().saturating_sub(pos));
            pos += name_read;
            if name_read & 1 == 0 {
                pos += 1;
            }
            let len = be32(d, pos).ok_or_else(|| corrupt("an image resource"))? as usize;
            pos += 4;
            let read = len.min(d.len().saturating_sub(pos));
            pos += read;
            if read & 1 == 1 {
                pos += 1;
            }
        }
    }
    // Layer and mask information: skipped.
    let size = be32(d, pos).ok_or_else(|| corrupt("the layer and mask information"))? as usize;
    pos += 4;
    if size > 0 {
        pos = pos.saturating_add(size);
    }
    if mode == Mode::P && palette.is_none() {
        return Err(Fail::Unsupported(
            "PSD in indexed colour without a 768-byte colour table".into(),
        ));
    }
    Ok(Open {
        width,
        height,
        mode,
        palette,
        data_at: pos,
    })
}

pub(crate) fn dims(d: &[u8]) -> Result<(u32, u32), Fail> {
    open(d).map(|o| (o.width, o.height))
}

/// One band of `rows` rows of `row_bytes` bytes in PackBits from `src` (`PackbitsDecode.c`).
fn unpackbits(src: &[u8], row_bytes: usize, rows: usize) -> Result<Vec<u8>, Fail> {
    let mut out = Vec::with_capacity(row_bytes * rows);
    let mut x = 0;
    let mut p = 0;
    let overrun = || Fail::Corrupt("a PackBits run overflows its row (PIL: buffer overrun)".into());
    let short = || Fail::Corrupt("the PackBits data ends before the image does (truncated)".into());
    while out.len() < row_bytes * rows {
        let &b = src.get(p).ok_or_else(short)?;
        if b & 0x80 != 0 {
            if b == 0x80 {
                p += 1;
                continue;
            }
            let &v = src.get(p + 1).ok_or_else(short)?;
            for _ in 0..257 - b as usize {
                if x >= row_bytes {
                    return Err(overrun());
                }
                out.push(v);
                x += 1;
            }
            p += 2;
        } else {
            let n = b as usize + 1;
            let lit = src.get(p + 1..p + 1 + n).ok_or_else(short)?;
            for &v in lit {
                if x >= row_bytes {
                    return Err(overrun());
                }
                out.push(v);
                x += 1;
            }
            p += 1 + n;
        }
        if x >= row_bytes {
            x = 0;
        }
    }
    Ok(out)
}

pub(crate) fn decode(d: &[u8], max_bytes: usize) -> Result<Raster, Fail> {
    let o = open(d)?;
    let (w, h) = (o.width as usize, o.height as usize);
    if w.saturating_mul(h).saturating_mul(4) > max_bytes {
        return Err(Fail::Limits);
    }
    let channels = o.mode.channels();
    let row_bytes = if o.mode == Mode::Bit {
        w.div_ceil(8)
    } else {
        w
    };
    let compression = be16(d, o.data_at).ok_or_else(|| corrupt("the image data section"))?;
    let mut at = o.data_at + 2;
    let mut bands = Vec::with_capacity(channels);
    match compression {
        0 => {
            for _ in 0..channels {
                let band = d
                    .get(at..at + row_bytes * h)
                    .ok_or_else(|| corrupt("the raw image data"))?;
                bands.push(band.to_vec());
                at += w * h;
            }
        }
        1 => {
            let counts = d
                .get(at..at + channels * h * 2)
                .ok_or_else(|| corrupt("the PackBits row counts"))?;
            at += counts.len();
            for c in 0..channels {
                let src = d.get(at..).unwrap_or(&[]);
                bands.push(unpackbits(src, row_bytes, h)?);
                at += (0..h)
                    .map(|y| {
                        let i = (c * h + y) * 2;
                        u16::from_be_bytes([counts[i], counts[i + 1]]) as usize
                    })
                    .sum::<usize>();
            }
        }
        c => {
            return Err(Fail::Unsupported(format!(
                "PSD image data compression {c} (PIL reads raw and PackBits only)"
            )));
        }
    }
    let n = w * h;
    let pixels = match o.mode {
        Mode::Bit => {
            let band = &bands[0];
            let mut v = Vec::with_capacity(n);
            for y in 0..h {
                for x in 0..w {
                    let bit = band[y * row_bytes + x / 8] >> (7 - x % 8) & 1;
                    v.push(if bit == 1 { 255 } else { 0 });
                }
            }
            Pixels::Bilevel(v)
        }
        Mode::L => Pixels::L(bands.swap_remove(0)),
        Mode::P => {
            let table = o.palette.unwrap_or_default();
            let mut pal = blank_palette();
            for (i, p) in pal.iter_mut().enumerate() {
                *p = [table[i], table[256 + i], table[512 + i], 255];
            }
            Pixels::P(bands.swap_remove(0), pal)
        }
        Mode::Rgb => Pixels::Rgb(
            (0..n)
                .flat_map(|i| [bands[0][i], bands[1][i], bands[2][i]])
                .collect(),
        ),
        Mode::Rgba => Pixels::Rgba(
            (0..n)
                .flat_map(|i| [bands[0][i], bands[1][i], bands[2][i], bands[3][i]])
                .collect(),
        ),
        // Bands "L", "A", "B" as stored (unsigned), then lcms's LAB to sRGB (`lab.rs`).
        Mode::Lab => Pixels::Rgb(super::lab::to_rgb(
            &(0..n)
                .flat_map(|i| [bands[0][i], bands[1][i], bands[2][i]])
                .collect::<Vec<u8>>(),
        )?),
        Mode::Cmyk => Pixels::Cmyk(
            (0..n)
                .flat_map(|i| [0, 1, 2, 3].map(|c| 255 - bands[c][i]))
                .collect(),
        ),
    };
    Ok(Raster {
        width: o.width,
        height: o.height,
        pixels,
        transparency: Transparency::None,
    })
}

#[cfg(test)]
mod tests {
    use super::unpackbits;

    #[test]
    fn packbits_rows_and_overrun() {
        // Literal of 2, run of 3 (0xfe = -2), filling two rows of 5... then a run past a row end.
        let v = unpackbits(&[0x01, 7, 8, 0xfe, 9, 0x80, 0xfc, 1], 5, 2).unwrap();
        assert_eq!(v, vec![7, 8, 9, 9, 9, 1, 1, 1, 1, 1]);
        assert!(unpackbits(&[0xfb, 1], 5, 1).is_err());
        assert!(unpackbits(&[0x01, 7], 5, 1).is_err());
    }
}
