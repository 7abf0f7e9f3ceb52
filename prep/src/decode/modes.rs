//! Decoded samples in PIL's image modes, and PIL's conversions from them to RGB
//! (Pillow 13.0.0 `src/libImaging/Convert.c`, `AlphaComposite.c`).

use image::RgbImage;

/// Pixels in one of the PIL modes our decoders produce, row-major, tightly packed.
#[derive(Debug, Clone)]
pub(crate) enum Pixels {
    /// Mode "1", one byte per pixel: 0 or 255.
    Bilevel(Vec<u8>),
    L(Vec<u8>),
    La(Vec<u8>),
    Rgb(Vec<u8>),
    Rgba(Vec<u8>),
    /// Mode "I;16": native 16-bit gray (also "I;16B": `convert` goes through "L" the same way,
    /// values over 255 clip).
    I16(Vec<u16>),
    /// Mode "I": 32-bit signed gray (`i2rgb`: clipped to 0..=255).
    I32(Vec<i32>),
    /// Mode "F": 32-bit float gray. Convert.c has no F to RGB converter: `Image.convert` goes
    /// through the mode's base, "L" (`f2l`: clipped, truncated toward zero), then to RGB.
    F(Vec<f32>),
    Cmyk(Vec<u8>),
    /// Mode "P": indices and a 256-entry RGBA palette (entries past the file's palette are black,
    /// alpha 255, as `ImagingPaletteNew` leaves them).
    P(Vec<u8>, Box<[[u8; 4]; 256]>),
}

/// PIL's `info["transparency"]` for modes without an alpha band.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transparency {
    None,
    /// A gray key (modes 1, L, I;16).
    Gray(u16),
    /// An RGB key (mode RGB).
    Rgb(u16, u16, u16),
    /// Palette transparency given per entry (PIL keeps the tRNS bytes), already folded into the
    /// palette's alpha.
    Palette,
    /// A single fully transparent palette index (PIL keeps it as an int: a PNG tRNS of 0xff bytes
    /// and one 0x00, or a GIF transparent index), also folded into the palette's alpha.
    PaletteIndex(u8),
}

#[derive(Debug, Clone)]
pub(crate) struct Raster {
    pub width: u32,
    pub height: u32,
    pub pixels: Pixels,
    pub transparency: Transparency,
}

/// An empty palette as `ImagingPaletteNew` makes it: black, opaque.
pub(crate) fn blank_palette() -> Box<[[u8; 4]; 256]> {
    Box::new([[0, 0, 0, 255]; 256])
}

/// `((a >> 8) + a) >> 8`, PIL's fast division by 255.
#[inline]
fn shift_div255(a: u32) -> u32 {
    ((a >> 8) + a) >> 8
}

/// `MULDIV255(a, b)`.
#[inline]
fn muldiv255(a: i32, b: i32) -> i32 {
    let t = a * b + 128;
    ((t >> 8) + t) >> 8
}

/// `cmyk2rgb`: `CLIP8(nk - MULDIV255(c, nk))` with `nk = 255 - k`.
#[inline]
pub(crate) fn cmyk_to_rgb(c: u8, m: u8, y: u8, k: u8) -> [u8; 3] {
    let nk = 255 - k as i32;
    let f = |v: u8| (nk - muldiv255(v as i32, nk)).clamp(0, 255) as u8;
    [f(c), f(m), f(y)]
}

/// `I16_RGB`: values above 255 clip to 255 (no scaling).
#[inline]
fn i16_to_8(v: u16) -> u8 {
    if v > 255 { 255 } else { v as u8 }
}

/// `f2l`: `v <= 0` gives 0, `v >= 255` gives 255, else the value truncated toward zero. NaN
/// fails both tests; C's conversion then gives 0 on x86 (the low byte of 0x80000000), and so
/// does Rust's saturating `as`.
#[inline]
pub(crate) fn f_to_8(v: f32) -> u8 {
    if v <= 0.0 {
        0
    } else if v >= 255.0 {
        255
    } else {
        v as u8
    }
}

/// `i2rgb` / `i2l`: clipped to 0..=255.
#[inline]
fn i32_to_8(v: i32) -> u8 {
    v.clamp(0, 255) as u8
}

/// `Image.alpha_composite(white, rgba)` for one channel (`AlphaComposite.c` with an opaque white
/// destination): `coef1 = a*128`, `coef2 = (255-a)*128`, rounded shift-division.
#[inline]
fn over_white(c: u8, a: u8) -> u8 {
    if a == 0 {
        return 255;
    }
    let a = a as u32;
    let coef1 = a * 255 * 255 * 128 / (a * 255 + 255 * (255 - a));
    let coef2 = 255 * 128 - coef1;
    let t = c as u32 * coef1 + 255 * coef2;
    (shift_div255(t + (0x80 << 7)) >> 7) as u8
}

impl Raster {
    pub fn pixel_count(&self) -> usize {
        self.width as usize * self.height as usize
    }

    /// Whether the processor's `convert_to_rgb` would see transparency: an alpha band or
    /// `info["transparency"]`.
    pub fn has_alpha(&self) -> bool {
        matches!(self.pixels, Pixels::La(_) | Pixels::Rgba(_))
            || self.transparency != Transparency::None
    }

    /// `image.convert("RGB")`: alpha and transparency keys are dropped.
    pub fn to_rgb(&self) -> Vec<u8> {
        let n = self.pixel_count();
        let mut out = Vec::with_capacity(n * 3);
        match &self.pixels {
            Pixels::Bilevel(v) | Pixels::L(v) => v.iter().for_each(|&g| out.extend([g, g, g])),
            Pixels::La(v) => v
                .chunks_exact(2)
                .for_each(|p| out.extend([p[0], p[0], p[0]])),
            Pixels::Rgb(v) => out.extend_from_slice(v),
            Pixels::Rgba(v) => v
                .chunks_exact(4)
                .for_each(|p| out.extend_from_slice(&p[..3])),
            Pixels::I16(v) => v.iter().for_each(|&g| {
                let g = i16_to_8(g);
                out.extend([g, g, g])
            }),
            Pixels::I32(v) => v.iter().for_each(|&g| {
                let g = i32_to_8(g);
                out.extend([g, g, g])
            }),
            Pixels::F(v) => v.iter().for_each(|&g| {
                let g = f_to_8(g);
                out.extend([g, g, g])
            }),
            Pixels::Cmyk(v) => v
                .chunks_exact(4)
                .for_each(|p| out.extend(cmyk_to_rgb(p[0], p[1], p[2], p[3]))),
            Pixels::P(idx, pal) => idx
                .iter()
                .for_each(|&i| out.extend_from_slice(&pal[i as usize][..3])),
        }
        out
    }

    /// What upstream's pipeline makes of the image in the default (`drop`) mode: `load_image`'s
    /// `convert("RGB")`, then the processor's `convert_to_rgb` on that RGB image.
    ///
    /// `convert("RGB")` drops alpha bands, but from modes L, RGB and P it keeps a single-colour
    /// `info["transparency"]` key, converted to an RGB colour (`Image.convert`'s transparency
    /// handling). `convert_to_rgb` then sees that key, turns it into alpha and composites over
    /// white: every pixel of exactly the key colour becomes (255, 255, 255). Keys of modes 1 and
    /// I;16, and per-entry palette alphas, are deleted by `convert("RGB")` and change nothing.
    pub fn into_upstream_rgb(self) -> Vec<u8> {
        let key: Option<[u8; 3]> = match (&self.pixels, self.transparency) {
            (Pixels::L(_), Transparency::Gray(k)) => {
                // `putpixel` on an L image clips the int to 0..=255.
                let k = k.min(255) as u8;
                Some([k, k, k])
            }
            (Pixels::Rgb(_), Transparency::Rgb(r, g, b)) => {
                Some([r.min(255) as u8, g.min(255) as u8, b.min(255) as u8])
            }
            (Pixels::P(_, pal), Transparency::PaletteIndex(i)) => {
                let c = pal[i as usize];
                Some([c[0], c[1], c[2]])
            }
            _ => None,
        };
        let mut rgb = self.into_rgb();
        if let Some(key) = key {
            for p in rgb.chunks_exact_mut(3) {
                if p == key {
                    p.copy_from_slice(&[255, 255, 255]);
                }
            }
        }
        rgb
    }

    /// `convert("RGB")`, reusing the buffer when the image is already RGB.
    pub fn into_rgb(self) -> Vec<u8> {
        match self.pixels {
            Pixels::Rgb(v) => v,
            _ => self.to_rgb(),
        }
    }

    /// `convert_to_rgb`: with transparency, `convert("RGBA")` then alpha-composite over opaque
    /// white; without, plain `convert("RGB")`.
    pub fn to_rgb_over_white(&self) -> Vec<u8> {
        if !self.has_alpha() {
            return self.to_rgb();
        }
        let rgb = self.to_rgb();
        let n = self.pixel_count();
        // The alpha `convert("RGBA")` gives each pixel.
        let alpha: Vec<u8> = match (&self.pixels, self.transparency) {
            (Pixels::La(v), _) => v.chunks_exact(2).map(|p| p[1]).collect(),
            (Pixels::Rgba(v), _) => v.chunks_exact(4).map(|p| p[3]).collect(),
            (Pixels::P(idx, pal), _) => idx.iter().map(|&i| pal[i as usize][3]).collect(),
            // `convert_transparent` + `rgbT2a`: the converted pixel is compared with the key's
            // low bytes.
            (_, Transparency::Gray(k)) => {
                let k = (k & 0xff) as u8;
                rgb.chunks_exact(3)
                    .map(|p| if p[0] == k { 0 } else { 255 })
                    .collect()
            }
            (_, Transparency::Rgb(r, g, b)) => {
                let key = [(r & 0xff) as u8, (g & 0xff) as u8, (b & 0xff) as u8];
                rgb.chunks_exact(3)
                    .map(|p| if p == key { 0 } else { 255 })
                    .collect()
            }
            _ => vec![255; n],
        };
        let mut out = rgb;
        for (p, &a) in out.chunks_exact_mut(3).zip(alpha.iter()) {
            for c in p.iter_mut() {
                *c = over_white(*c, a);
            }
        }
        out
    }
}

/// `Image.transpose` for EXIF orientation `o` (2-8), as `ImageOps.exif_transpose` maps it.
pub(crate) fn apply_orientation(img: RgbImage, o: u8) -> RgbImage {
    use image::imageops;
    match o {
        2 => imageops::flip_horizontal(&img),
        3 => imageops::rotate180(&img),
        4 => imageops::flip_vertical(&img),
        // TRANSPOSE: (x, y) -> (y, x).
        5 => transpose(&img, false),
        // ROTATE_270 (clockwise 90).
        6 => imageops::rotate90(&img),
        // TRANSVERSE.
        7 => transpose(&img, true),
        // ROTATE_90 (counter-clockwise 90).
        8 => imageops::rotate270(&img),
        _ => img,
    }
}

/// Transpose (mirror over the main diagonal) or transverse (over the anti-diagonal).
fn transpose(img: &RgbImage, transverse: bool) -> RgbImage {
    let (w, h) = img.dimensions();
    let src = img.as_raw();
    let mut out = vec![0u8; src.len()];
    // Output is h wide, w tall.
    for y in 0..h as usize {
        for x in 0..w as usize {
            let (ox, oy) = if transverse {
                (h as usize - 1 - y, w as usize - 1 - x)
            } else {
                (y, x)
            };
            let s = (y * w as usize + x) * 3;
            let d = (oy * h as usize + ox) * 3;
            out[d..d + 3].copy_from_slice(&src[s..s + 3]);
        }
    }
    RgbImage::from_raw(h, w, out).expect("transposed buffer has the right size")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn over_white_matches_closed_form() {
        // With an opaque white destination the composite reduces to
        // (c*a*128 + 255*(255-a)*128 + 128*128) / 255 / 128 with PIL's shift-division.
        for a in 0..=255u32 {
            for c in [0u32, 1, 77, 128, 200, 254, 255] {
                let got = over_white(c as u8, a as u8) as u32;
                if a == 0 {
                    assert_eq!(got, 255);
                    continue;
                }
                let t = c * a * 128 + 255 * (255 - a) * 128 + (0x80 << 7);
                assert_eq!(got, shift_div255(t) >> 7, "c={c} a={a}");
                // And within one level of the exact blend.
                let exact = (c as f64 * a as f64 + 255.0 * (255 - a) as f64) / 255.0;
                assert!(
                    (got as f64 - exact).abs() <= 1.0,
                    "c={c} a={a} got={got} exact={exact}"
                );
            }
        }
    }

    #[test]
    fn cmyk_extremes() {
        assert_eq!(cmyk_to_rgb(0, 0, 0, 0), [255, 255, 255]);
        assert_eq!(cmyk_to_rgb(255, 255, 255, 0), [0, 0, 0]);
        assert_eq!(cmyk_to_rgb(0, 0, 0, 255), [0, 0, 0]);
        // nk = 155, c = 100: 155 - (100*155+128)/255 (PIL rounding) = 155 - 61 = 94.
        assert_eq!(cmyk_to_rgb(100, 0, 0, 100)[0], 94);
    }

    #[test]
    fn orientation_geometry() {
        // 2x1 image: pixel A at (0,0), B at (1,0).
        let img = RgbImage::from_raw(2, 1, vec![1, 1, 1, 2, 2, 2]).unwrap();
        let r6 = apply_orientation(img.clone(), 6); // rotate 90 clockwise: A on top.
        assert_eq!(r6.dimensions(), (1, 2));
        assert_eq!(r6.as_raw(), &vec![1, 1, 1, 2, 2, 2]);
        let r8 = apply_orientation(img.clone(), 8); // counter-clockwise: B on top.
        assert_eq!(r8.as_raw(), &vec![2, 2, 2, 1, 1, 1]);
        let r5 = apply_orientation(img.clone(), 5);
        assert_eq!(r5.as_raw(), &vec![1, 1, 1, 2, 2, 2]);
        let r7 = apply_orientation(img, 7);
        assert_eq!(r7.as_raw(), &vec![2, 2, 2, 1, 1, 1]);
    }
}
