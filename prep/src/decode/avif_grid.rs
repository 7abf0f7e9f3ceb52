//! AVIF grids (a `grid` primary or alpha item): the tiles decoded and put together as libavif
//! 1.4.2 does (`avifDecoderDataAllocateImagePlanes`, `avifDecoderDataCopyTileToImage`), with
//! its checks (tiles cover the canvas, the last ones overlap it, at least 64x64, even sizes with
//! subsampled chroma, every tile alike); the whole image is then converted at once.

use super::Fail;
use super::av1;
use super::avif::Src;

/// A sequence header's primaries, transfer, matrix and full-range flag.
type Cicp = (u8, u8, u8, bool);

/// `n` zeroed samples, or `Fail::Limits` when they cannot be allocated.
fn zeros<T: Copy + Default>(n: usize) -> Result<Vec<T>, Fail> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| Fail::Limits)?;
    v.resize(n, T::default());
    Ok(v)
}

fn corrupt(what: &str) -> Fail {
    Fail::Corrupt(format!("AVIF: {what}"))
}

fn concat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// Decodes one image: an item or sample, or a grid's tiles put together as libavif does
/// (`avifDecoderDataAllocateImagePlanes` / `CopyTileToImage`, with their grid checks).
pub(super) fn decode_src(src: &Src, alpha: bool, max_pixels: u64) -> Result<av1::Frame, Fail> {
    let (rows, cols, width, height, tiles) = match src {
        Src::One(parts) => return av1::decode(&concat(parts), max_pixels),
        Src::Grid {
            rows,
            cols,
            width,
            height,
            tiles,
        } => (
            *rows as usize,
            *cols as usize,
            *width as usize,
            *height as usize,
            tiles,
        ),
    };
    if (width as u64).saturating_mul(height as u64) > max_pixels {
        return Err(Fail::Limits);
    }
    let grid_err = |what: &str| corrupt(&format!("invalid grid: {what}"));
    let mut out: Option<av1::Frame> = None;
    // The first tile's size, layout and colour description: every tile must match them.
    let mut first: Option<(usize, usize, av1::Layout, u8, Cicp)> = None;
    for (i, (parts, (iw, ih))) in tiles.iter().enumerate() {
        let t = av1::decode(&concat(parts), max_pixels)?;
        if (t.width, t.height) != (*iw as usize, *ih as usize) {
            return Err(Fail::Unsupported(
                "AVIF grid tile whose frame size differs from its 'ispe' (libavif rescales it)"
                    .into(),
            ));
        }
        let (tw, th) = (t.width, t.height);
        match first {
            None => {
                if tw * cols < width || th * rows < height {
                    return Err(grid_err("the tiles do not cover the image"));
                }
                if tw * (cols - 1) >= width || th * (rows - 1) >= height {
                    return Err(grid_err("the last tiles do not overlap the image"));
                }
                if tw < 64 || th < 64 {
                    return Err(grid_err("tiles smaller than 64x64"));
                }
                let sub_x = matches!(t.layout, av1::Layout::I420 | av1::Layout::I422);
                let sub_y = t.layout == av1::Layout::I420;
                if !alpha
                    && ((sub_x && (width % 2 != 0 || tw % 2 != 0))
                        || (sub_y && (height % 2 != 0 || th % 2 != 0)))
                {
                    return Err(grid_err("odd sizes with subsampled chroma"));
                }
                first = Some((tw, th, t.layout, t.depth, t.cicp));
                let (cw, ch) = t.layout.chroma_dims(width, height);
                let chroma = !alpha && t.layout != av1::Layout::I400;
                let (hi, n, cn) = (t.depth > 8, width * height, cw * ch);
                let (n8, c8) = if hi {
                    (0, 0)
                } else {
                    (n, if chroma { cn } else { 0 })
                };
                let (n16, c16) = if hi {
                    (n, if chroma { cn } else { 0 })
                } else {
                    (0, 0)
                };
                out = Some(av1::Frame {
                    width,
                    height,
                    layout: t.layout,
                    depth: t.depth,
                    y: zeros(n8)?,
                    u: zeros(c8)?,
                    v: zeros(c8)?,
                    y16: zeros(n16)?,
                    u16: zeros(c16)?,
                    v16: zeros(c16)?,
                    cicp: t.cicp,
                });
            }
            Some(f) => {
                if (tw, th, t.layout, t.depth, t.cicp) != f {
                    return Err(grid_err("mismatched tiles"));
                }
            }
        }
        let Some(o) = out.as_mut() else {
            return Err(grid_err("no tiles"));
        };
        let (x0, y0) = ((i % cols) * tw, (i / cols) * th);
        let (w, h) = (tw.min(width - x0), th.min(height - y0));
        copy_rect(&t.y, tw, &mut o.y, width, x0, y0, w, h);
        copy_rect(&t.y16, tw, &mut o.y16, width, x0, y0, w, h);
        if !o.u.is_empty() || !o.u16.is_empty() {
            let (sx, sy) = match t.layout {
                av1::Layout::I420 => (1, 1),
                av1::Layout::I422 => (1, 0),
                _ => (0, 0),
            };
            let (tcw, _) = t.layout.chroma_dims(tw, th);
            let (ocw, _) = t.layout.chroma_dims(width, height);
            let (cx, cy) = (x0 >> sx, y0 >> sy);
            let (cw, ch) = ((w + sx) >> sx, (h + sy) >> sy);
            copy_rect(&t.u, tcw, &mut o.u, ocw, cx, cy, cw, ch);
            copy_rect(&t.v, tcw, &mut o.v, ocw, cx, cy, cw, ch);
            copy_rect(&t.u16, tcw, &mut o.u16, ocw, cx, cy, cw, ch);
            copy_rect(&t.v16, tcw, &mut o.v16, ocw, cx, cy, cw, ch);
        }
    }
    out.ok_or_else(|| grid_err("no tiles"))
}

/// Copies a `w` x `h` block from the top left of `src` (row length `sw`) to (`x`, `y`) in `dst`
/// (row length `dw`); rows that do not fit are skipped (sizes were checked before).
#[allow(clippy::too_many_arguments)]
fn copy_rect<T: Copy>(
    src: &[T],
    sw: usize,
    dst: &mut [T],
    dw: usize,
    x: usize,
    y: usize,
    w: usize,
    h: usize,
) {
    for r in 0..h {
        let (s, d) = (r * sw, (y + r) * dw + x);
        if let (Some(from), Some(to)) = (src.get(s..s + w), dst.get_mut(d..d + w)) {
            to.copy_from_slice(from);
        }
    }
}
