//! GIF, first frame, as Pillow's `GifImagePlugin` builds it: the canvas is the logical screen
//! (grown if the frame reaches past it), filled with the frame's transparent index (else 0),
//! the frame's indices pasted at its offset; mode "P" with the local palette, else the global
//! one, or mode "L" (index = gray) when that palette is missing or is the identity gray ramp.

use super::Fail;
use super::modes::{Pixels, Raster, Transparency, blank_palette};
use std::num::NonZeroU64;

pub(crate) fn decode(data: &[u8], max_bytes: usize) -> Result<Raster, Fail> {
    let mut opts = gif::DecodeOptions::new();
    opts.set_color_output(gif::ColorOutput::Indexed);
    opts.check_frame_consistency(false);
    if let Some(l) = NonZeroU64::new(max_bytes as u64) {
        opts.set_memory_limit(gif::MemoryLimit::Bytes(l));
    }
    // Without a global colour table the `gif` crate refuses frames that lack a local one, where
    // PIL reads the indices as gray ("L"). A gray-ramp global table gives the same result (it is
    // "not needed" below) and lets the crate decode the indices.
    let patched;
    let data = if data.len() > 10 && data[10] & 0x80 == 0 {
        let mut d = Vec::with_capacity(data.len() + 768);
        d.extend_from_slice(&data[..13.min(data.len())]);
        d[10] |= 0x87;
        d.extend((0..=255u8).flat_map(|i| [i, i, i]));
        d.extend_from_slice(data.get(13..).unwrap_or(&[]));
        patched = d;
        &patched[..]
    } else {
        data
    };
    let mut dec = opts
        .read_info(std::io::Cursor::new(data))
        .map_err(map_err)?;
    let (sw, sh) = (dec.width() as u32, dec.height() as u32);
    let global = dec.global_palette().map(|p| p.to_vec());
    let frame = dec
        .read_next_frame()
        .map_err(map_err)?
        .ok_or_else(|| Fail::Corrupt("no image in the GIF file".into()))?;
    let (fx, fy, fw, fh) = (
        frame.left as u32,
        frame.top as u32,
        frame.width as u32,
        frame.height as u32,
    );
    let (w, h) = (sw.max(fx + fw), sh.max(fy + fh));
    let fill = frame.transparent.unwrap_or(0);
    let mut idx = vec![fill; w as usize * h as usize];
    let buf = &frame.buffer;
    if buf.len() < fw as usize * fh as usize {
        return Err(Fail::Corrupt(
            "the frame has fewer pixels than its size says (truncated)".into(),
        ));
    }
    for y in 0..fh as usize {
        let dst = (fy as usize + y) * w as usize + fx as usize;
        idx[dst..dst + fw as usize].copy_from_slice(&buf[y * fw as usize..(y + 1) * fw as usize]);
    }
    // `_is_palette_needed`: a palette equal to the gray ramp i -> (i, i, i) is dropped.
    let needed = |p: &[u8]| {
        p.chunks_exact(3)
            .enumerate()
            .any(|(i, c)| !(i == c[0] as usize && c[0] == c[1] && c[1] == c[2]))
    };
    let palette = match &frame.palette {
        Some(local) => needed(local).then(|| local.clone()),
        None => global.filter(|g| needed(g)),
    };
    let transparency = frame
        .transparent
        .map_or(Transparency::None, Transparency::PaletteIndex);
    let pixels = match palette {
        Some(p) => {
            let mut pal = blank_palette();
            for (i, c) in p.chunks_exact(3).take(256).enumerate() {
                pal[i] = [c[0], c[1], c[2], 255];
            }
            if let Some(t) = frame.transparent {
                pal[t as usize][3] = 0;
            }
            Pixels::P(idx, pal)
        }
        None => {
            // Mode "L": a transparent index is a gray key.
            let raster = Raster {
                width: w,
                height: h,
                pixels: Pixels::L(idx),
                transparency: frame
                    .transparent
                    .map_or(Transparency::None, |t| Transparency::Gray(t as u16)),
            };
            return Ok(raster);
        }
    };
    Ok(Raster {
        width: w,
        height: h,
        pixels,
        transparency,
    })
}

fn map_err(e: gif::DecodingError) -> Fail {
    match e {
        gif::DecodingError::MemoryLimit => Fail::Limits,
        gif::DecodingError::Io(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            Fail::Corrupt("the file ends before the image data does (truncated)".into())
        }
        other => Fail::Corrupt(other.to_string()),
    }
}
