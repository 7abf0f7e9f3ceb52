//! PCX (and DCX, whose first page is a PCX), read as Pillow 13.0.0's `PcxImagePlugin`,
//! `DcxImagePlugin` and `PcxDecode.c` read them:
//! - the mode from bits and planes: 1 bit, 1 plane is mode "1"; 1 bit, 2 or 4 planes is mode P
//!   (bit planes, raw modes `P;2L` / `P;4L`) with the header's 16-entry palette; version 5, 8 bits,
//!   1 plane is L, or P when the file ends with the 769-byte VGA palette (`0x0c` + 768 bytes, the
//!   end of the whole file, also for a DCX page) that is not the gray ramp; version 5, 8 bits, 3
//!   planes is RGB (plane per line, `RGB;L`); anything else is refused as PIL refuses it;
//! - the line size: `(width * bits + 7) / 8` per plane, made even when the header's stride
//!   differs from it; the RLE data from byte 128 fills lines of `planes * stride` bytes, the
//!   padding of each plane dropped before unpacking;
//! - a run that goes past a line is PIL's "buffer overrun" error, data that ends before the last
//!   line its "image file is truncated".

use super::Fail;
use super::bytes::{le16, le32};
use super::modes::{Pixels, Raster, Transparency, blank_palette};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Mode "1", raw mode "1".
    Bilevel,
    /// Mode P from 2 or 4 bit planes (`P;2L`, `P;4L`).
    Planar(usize),
    L,
    /// Mode P, 8-bit indices, the VGA palette.
    P,
    /// Mode RGB, raw mode `RGB;L`.
    Rgb,
}

impl Mode {
    /// The unpacker's bits per pixel (PIL's `state->bits`).
    fn bits(self) -> usize {
        match self {
            Mode::Bilevel => 1,
            Mode::Planar(p) => p,
            Mode::L | Mode::P => 8,
            Mode::Rgb => 24,
        }
    }
}

struct Head {
    width: usize,
    height: usize,
    mode: Mode,
    palette: Option<Vec<u8>>,
    /// `planes * stride`: the bytes of one line.
    line: usize,
    /// Where the RLE data starts.
    data_at: usize,
}

/// `PcxImageFile._open` for a header at `base` (0, or a DCX page's offset).
fn head(d: &[u8], base: usize) -> Result<Head, Fail> {
    let s = d
        .get(base..base.saturating_add(68))
        .ok_or_else(|| Fail::Corrupt("the file ends inside the PCX header (truncated)".into()))?;
    if s[0] != 10 || !matches!(s[1], 0 | 2 | 3 | 5) {
        return Err(Fail::Corrupt("not a PCX header".into()));
    }
    let at = |i| le16(s, i).unwrap_or(0) as usize;
    let (x0, y0, x1, y1) = (at(4), at(6), at(8) + 1, at(10) + 1);
    if x1 <= x0 || y1 <= y0 {
        return Err(Fail::Corrupt(
            "bad PCX image size (the window's end is before its start)".into(),
        ));
    }
    let (version, bits, planes, provided_stride) = (s[1], s[3] as usize, s[65] as usize, at(66));
    let mut palette = None;
    let mode = match (version, bits, planes) {
        (_, 1, 1) => Mode::Bilevel,
        (_, 1, 2 | 4) => {
            palette = Some(s[16..64].to_vec());
            Mode::Planar(planes)
        }
        (5, 8, 1) => {
            // `fp.seek(-769, SEEK_END)`: an error on a shorter file.
            let start = d.len().checked_sub(769).ok_or_else(|| {
                Fail::Corrupt("a PCX file shorter than its VGA palette (PIL cannot seek)".into())
            })?;
            let tail = &d[start..];
            let gray = (0..256).all(|i| tail[1 + 3 * i..4 + 3 * i] == [i as u8; 3]);
            if tail[0] == 12 && !gray {
                palette = Some(tail[1..].to_vec());
                Mode::P
            } else {
                Mode::L
            }
        }
        (5, 8, 3) => Mode::Rgb,
        _ => {
            return Err(Fail::Unsupported(format!(
                "PCX version {version} with {bits} bits and {planes} planes (PIL: unknown PCX mode)"
            )));
        }
    };
    let width = x1 - x0;
    let mut stride = (width * bits).div_ceil(8);
    if provided_stride != stride {
        stride += stride % 2;
    }
    Ok(Head {
        width,
        height: y1 - y0,
        mode,
        palette,
        line: planes * stride,
        data_at: base + 128,
    })
}

/// The first page's offset in a DCX file (`DcxImageFile._open`).
fn dcx_page(d: &[u8]) -> Result<usize, Fail> {
    if le32(d, 0) != Some(0x3ADE68B1) {
        return Err(Fail::Corrupt("not a DCX header".into()));
    }
    match le32(d, 4) {
        None => Err(Fail::Corrupt(
            "the file ends inside the DCX page directory (truncated)".into(),
        )),
        Some(0) => Err(Fail::Corrupt("the DCX file has no page".into())),
        Some(first) => {
            // PIL reads the directory up to its terminating 0 (at most 1024 entries).
            for i in 1..1024 {
                match le32(d, 4 + 4 * i) {
                    Some(0) => break,
                    Some(_) => {}
                    None => {
                        return Err(Fail::Corrupt(
                            "the file ends inside the DCX page directory (truncated)".into(),
                        ));
                    }
                }
            }
            Ok(first as usize)
        }
    }
}

fn head_of(d: &[u8], dcx: bool) -> Result<Head, Fail> {
    let base = if dcx { dcx_page(d)? } else { 0 };
    head(d, base)
}

pub(crate) fn dims(d: &[u8], dcx: bool) -> Result<(u32, u32), Fail> {
    let h = head_of(d, dcx)?;
    Ok((h.width as u32, h.height as u32))
}

/// Unpacks one line (`buf`, `h.line` bytes, plane padding already dropped) into `out`.
fn unpack(h: &Head, buf: &[u8], out: &mut [u8]) {
    let w = h.width;
    match h.mode {
        Mode::Bilevel => {
            for (x, o) in out.iter_mut().enumerate() {
                *o = if buf[x / 8] & (0x80 >> (x % 8)) != 0 {
                    255
                } else {
                    0
                };
            }
        }
        Mode::Planar(planes) => {
            let s = w.div_ceil(8);
            for (x, o) in out.iter_mut().enumerate() {
                let m = 0x80 >> (x % 8);
                *o = (0..planes)
                    .map(|p| ((buf[x / 8 + p * s] & m != 0) as u8) << p)
                    .sum();
            }
        }
        Mode::L | Mode::P => out.copy_from_slice(&buf[..w]),
        Mode::Rgb => {
            for (x, o) in out.chunks_exact_mut(3).enumerate() {
                o.copy_from_slice(&[buf[x], buf[x + w], buf[x + 2 * w]]);
            }
        }
    }
}

pub(crate) fn decode(d: &[u8], dcx: bool, max_bytes: usize) -> Result<Raster, Fail> {
    let h = head_of(d, dcx)?;
    let (w, ht) = (h.width, h.height);
    let channels = if h.mode == Mode::Rgb { 3 } else { 1 };
    if w * ht * channels > max_bytes || h.line > max_bytes {
        return Err(Fail::Limits);
    }
    if (w * h.mode.bits()).div_ceil(8) > h.line {
        return Err(Fail::Corrupt(
            "the PCX line is shorter than the image width needs (PIL: buffer overrun)".into(),
        ));
    }
    let mut out = vec![0u8; w * ht * channels];
    let mut buf = vec![0u8; h.line];
    // What `ImagingPcxDecode` does with a full line: the planes' padding dropped.
    let (plane_len, bands) = match h.mode {
        Mode::Planar(p) => (w.div_ceil(8), p),
        Mode::Rgb => (w, 3),
        _ => (w, 1),
    };
    let plane_stride = h.line / bands;
    let truncated =
        || Fail::Corrupt("the PCX image data ends before the last line (truncated)".into());
    let (mut pos, mut x, mut y, mut overrun) = (h.data_at, 0usize, 0usize, false);
    while y < ht {
        let &b = d.get(pos).ok_or_else(truncated)?;
        if b & 0xc0 == 0xc0 {
            let &v = d.get(pos + 1).ok_or_else(truncated)?;
            let n = (b & 0x3f) as usize;
            let fit = n.min(h.line - x);
            overrun |= fit < n;
            buf[x..x + fit].fill(v);
            x += fit;
            pos += 2;
        } else {
            buf[x] = b;
            x += 1;
            pos += 1;
        }
        if x >= h.line {
            if plane_stride > plane_len {
                for i in 1..bands {
                    buf.copy_within(
                        i * plane_stride..i * plane_stride + plane_len,
                        i * plane_len,
                    );
                }
            }
            unpack(&h, &buf, &mut out[y * w * channels..(y + 1) * w * channels]);
            x = 0;
            y += 1;
        }
    }
    if overrun {
        return Err(Fail::Corrupt(
            "a PCX run goes past the end of its line (PIL: buffer overrun)".into(),
        ));
    }
    let pixels = match h.mode {
        Mode::Bilevel => Pixels::Bilevel(out),
        Mode::L => Pixels::L(out),
        Mode::Rgb => Pixels::Rgb(out),
        Mode::Planar(_) | Mode::P => {
            let mut pal = blank_palette();
            for (e, c) in pal
                .iter_mut()
                .zip(h.palette.as_deref().unwrap_or(&[]).chunks_exact(3))
            {
                *e = [c[0], c[1], c[2], 255];
            }
            Pixels::P(out, pal)
        }
    };
    Ok(Raster {
        width: w as u32,
        height: ht as u32,
        pixels,
        transparency: Transparency::None,
    })
}
