//! Pixels handed over already decoded, and the one conversion done here rather than by PIL:
//! upstream's `convert_to_rgb` on an RGBA (or LA) PIL image, `Image.alpha_composite` over opaque
//! white then `convert("RGB")`, with Pillow's integer arithmetic (`AlphaComposite.c`: 7
//! precision bits, the shift division by 255). Every (colour, alpha) pair is checked against
//! PIL in `tests/test_pil_fast_paths.py`.

use image::RgbImage;
use std::borrow::Cow;
use std::sync::OnceLock;

/// Decoded pixels of one input.
pub enum Pixels {
    /// RGB as the processor takes it.
    Rgb(RgbImage),
    /// RGBA (4 bytes a pixel) or LA (2 bytes a pixel) of a PIL image to composite over white.
    Alpha {
        width: u32,
        height: u32,
        bands: usize,
        data: Vec<u8>,
    },
}

impl Pixels {
    pub fn dims(&self) -> (usize, usize) {
        match self {
            Pixels::Rgb(img) => (img.height() as usize, img.width() as usize),
            Pixels::Alpha { width, height, .. } => (*height as usize, *width as usize),
        }
    }

    /// The RGB image the processor works on (composited here for the alpha kinds).
    pub fn rgb(&self) -> Cow<'_, RgbImage> {
        match self {
            Pixels::Rgb(img) => Cow::Borrowed(img),
            Pixels::Alpha {
                width,
                height,
                bands,
                data,
            } => Cow::Owned(over_white(*width, *height, *bands, data)),
        }
    }
}

/// Pillow's `alpha_composite(white, src)` for one channel value `c` of alpha `a`.
fn composite(c: u32, a: u32) -> u8 {
    if a == 0 {
        return 255;
    }
    const SHIFT: u32 = 7;
    let coef1 = a * 255 * 255 * (1 << SHIFT) / (a * 255 + 255 * (255 - a));
    let coef2 = 255 * (1 << SHIFT) - coef1;
    let t = c * coef1 + 255 * coef2 + (0x80 << SHIFT);
    ((((t >> 8) + t) >> 8) >> SHIFT) as u8
}

/// `composite` for every (alpha, colour) pair, `[a * 256 + c]`.
fn table() -> &'static [u8] {
    static TABLE: OnceLock<Vec<u8>> = OnceLock::new();
    TABLE.get_or_init(|| {
        (0..256u32)
            .flat_map(|a| (0..256u32).map(move |c| composite(c, a)))
            .collect()
    })
}

/// RGBA or LA samples composited over opaque white, as RGB.
fn over_white(width: u32, height: u32, bands: usize, data: &[u8]) -> RgbImage {
    let t = table();
    let mut out = Vec::with_capacity(width as usize * height as usize * 3);
    for p in data.chunks_exact(bands) {
        let a = p[bands - 1] as usize * 256;
        if bands == 4 {
            out.extend_from_slice(&[
                t[a + p[0] as usize],
                t[a + p[1] as usize],
                t[a + p[2] as usize],
            ]);
        } else {
            let v = t[a + p[0] as usize];
            out.extend_from_slice(&[v, v, v]);
        }
    }
    RgbImage::from_raw(width, height, out).expect("3 bytes per pixel")
}
