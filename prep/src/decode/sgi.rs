//! SGI (`.sgi`, `.rgb`, `.bw`), read as Pillow 13.0.0's `SgiImagePlugin` and `SgiRleDecode.c`
//! read it: a 512-byte header whose (bytes per channel, dimension, channels) picks the mode through
//! `MODES` (L, RGB, RGBA; 16-bit channels keep their high byte, the `;16B` raw modes), rows stored
//! bottom-up, channels as separate planes (verbatim) or as RLE rows through offset and length
//! tables (the row buffer is kept from one row to the next, as the C decoder's is; a row whose
//! run list ends without its terminator stops decoding with the rows read so far, as PIL does;
//! a run past the row or the file is PIL's "buffer overrun" error).

use super::Fail;
use super::bytes::{be16, be32};
use super::modes::{Pixels, Raster, Transparency};

const HEADER: usize = 512;

struct Head {
    width: usize,
    height: usize,
    /// Bytes per channel sample: 1 or 2.
    bpc: usize,
    /// 1 (L), 3 (RGB) or 4 (RGBA).
    bands: usize,
    rle: bool,
}

fn head(d: &[u8]) -> Result<Head, Fail> {
    if be16(d, 0) != Some(474) {
        return Err(Fail::Corrupt("not an SGI header (magic 474)".into()));
    }
    let (Some(&compression), Some(&bpc), Some(dim), Some(w), Some(h), Some(z)) = (
        d.get(2),
        d.get(3),
        be16(d, 4),
        be16(d, 6),
        be16(d, 8),
        be16(d, 10),
    ) else {
        return Err(Fail::Corrupt(
            "the file ends inside the SGI header (truncated)".into(),
        ));
    };
    // `MODES[(bpc, dimension, zsize)]`.
    let bands = match (bpc, dim, z) {
        (1 | 2, 1 | 2, 1) => 1,
        (1 | 2, 3, 3) => 3,
        (1 | 2, 3, 4) => 4,
        _ => {
            return Err(Fail::Unsupported(format!(
                "SGI image of {bpc} bytes per channel, dimension {dim}, {z} channels \
                 (PIL: unsupported SGI image mode)"
            )));
        }
    };
    let rle = match compression {
        0 => false,
        1 => true,
        c => {
            return Err(Fail::Unsupported(format!(
                "SGI compression {c} (PIL cannot load it either)"
            )));
        }
    };
    Ok(Head {
        width: w as usize,
        height: h as usize,
        bpc: bpc as usize,
        bands,
        rle,
    })
}

pub(crate) fn dims(d: &[u8]) -> Result<(u32, u32), Fail> {
    let h = head(d)?;
    Ok((h.width as u32, h.height as u32))
}

fn overrun(what: &str) -> Fail {
    Fail::Corrupt(format!(
        "SGI RLE data: {what} (PIL: buffer overrun when reading image file)"
    ))
}

/// What `expandrow` / `expandrow2` returned.
enum Row {
    Done,
    /// The run list's last atom was not its terminator: PIL stops decoding, keeping what it has.
    Stop,
}

/// `expandrow` (`bpc` 1) and `expandrow2` (`bpc` 2): the runs of one channel of one row, from
/// `src` in `buf` (the file after the header), into `row` (interleaved samples of `bpc` bytes,
/// `bands` per pixel) at channel `ch`. `n` is the length table's entry, as C's `int`.
fn expand_row(
    row: &mut [u8],
    buf: &[u8],
    mut src: usize,
    n: i32,
    ch: usize,
    h: &Head,
) -> Result<Row, Fail> {
    let (bands, bpc, xsize) = (h.bands, h.bpc, h.width);
    // `end_of_buffer` points at the last byte of the buffer.
    let end = buf.len() - 1;
    let mut x = 0usize;
    let mut n = n;
    while n > 0 {
        // The flag byte is the atom's last byte (its low byte for 16-bit atoms).
        let flag_at = src + bpc - 1;
        if flag_at > end {
            return Err(overrun("a run starts past the end of the file"));
        }
        let pixel = buf[flag_at];
        src += bpc;
        if n == 1 && pixel != 0 {
            return Ok(Row::Stop);
        }
        let count = (pixel & 0x7f) as usize;
        if count == 0 {
            return Ok(Row::Done);
        }
        if x + count > xsize {
            return Err(overrun("a run goes past the end of the row"));
        }
        let at = |x: usize| (x * bands + ch) * bpc;
        if pixel & 0x80 != 0 {
            if src + bpc * count > end {
                return Err(overrun("a literal run goes past the end of the file"));
            }
            for k in 0..count {
                let o = at(x + k);
                row[o..o + bpc].copy_from_slice(&buf[src..src + bpc]);
                src += bpc;
            }
        } else {
            // 8-bit: `src > end`; 16-bit: `src + 2 > end`.
            if src + (bpc - 1) * 2 > end {
                return Err(overrun("a repeat run goes past the end of the file"));
            }
            for k in 0..count {
                let o = at(x + k);
                row[o..o + bpc].copy_from_slice(&buf[src..src + bpc]);
            }
            src += bpc;
        }
        x += count;
        n -= 1;
    }
    Ok(Row::Done)
}

/// `ImagingSgiRleDecode`: interleaved 8-bit samples (the high byte of 16-bit ones), top-down.
fn rle(d: &[u8], h: &Head, out: &mut [u8]) -> Result<(), Fail> {
    let (w, ht, bands, bpc) = (h.width, h.height, h.bands, h.bpc);
    let buf = d.get(HEADER..).unwrap_or(&[]);
    let tablen = bands * ht;
    if buf.len() < 8 * tablen || buf.is_empty() {
        return Err(overrun(
            "the offset and length tables are longer than the file",
        ));
    }
    let tab = |i: usize| be32(buf, i * 4).unwrap_or(0);
    let mut row = vec![0u8; w * bands * bpc];
    for rowno in 0..ht {
        for ch in 0..bands {
            let i = rowno + ch * ht;
            let offset = tab(i) as usize;
            let length = tab(tablen + i) as i32;
            if offset < HEADER {
                return Err(overrun("a row offset points into the header"));
            }
            match expand_row(&mut row, buf, offset - HEADER, length, ch, h)? {
                Row::Done => {}
                Row::Stop => return Ok(()),
            }
        }
        // Stored bottom-up: the first row read is the image's last.
        let y = ht - 1 - rowno;
        let dst = &mut out[y * w * bands..(y + 1) * w * bands];
        for (o, s) in dst.iter_mut().zip(row.chunks_exact(bpc)) {
            *o = s[0];
        }
    }
    Ok(())
}

/// Verbatim planes, one per channel, each bottom-up.
fn planes(d: &[u8], h: &Head, out: &mut [u8]) -> Result<(), Fail> {
    let (w, ht, bands, bpc) = (h.width, h.height, h.bands, h.bpc);
    let page = w * ht * bpc;
    let need = HEADER + page * bands;
    if d.len() < need {
        return Err(Fail::Corrupt(format!(
            "the SGI image data needs {need} bytes, the file has {} (truncated)",
            d.len()
        )));
    }
    for ch in 0..bands {
        let plane = &d[HEADER + ch * page..HEADER + (ch + 1) * page];
        for (r, src) in plane.chunks_exact(w * bpc).enumerate() {
            let y = ht - 1 - r;
            for (x, s) in src.chunks_exact(bpc).enumerate() {
                out[(y * w + x) * bands + ch] = s[0];
            }
        }
    }
    Ok(())
}

pub(crate) fn decode(d: &[u8], max_bytes: usize) -> Result<Raster, Fail> {
    let h = head(d)?;
    if h.width == 0 || h.height == 0 {
        return Err(Fail::Corrupt("SGI image of zero size".into()));
    }
    let n = h.width * h.height * h.bands;
    if n > max_bytes {
        return Err(Fail::Limits);
    }
    let mut out = vec![0u8; n];
    if h.rle {
        rle(d, &h, &mut out)?;
    } else {
        planes(d, &h, &mut out)?;
    }
    let pixels = match h.bands {
        1 => Pixels::L(out),
        3 => Pixels::Rgb(out),
        _ => Pixels::Rgba(out),
    };
    Ok(Raster {
        width: h.width as u32,
        height: h.height as u32,
        pixels,
        transparency: Transparency::None,
    })
}
