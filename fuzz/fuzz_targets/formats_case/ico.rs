//! ICO recipes: a directory of one to three images, each a PNG or a BMP without its file
//! header.

use super::recipe::{Built, R, le16, le32, samples};

/// An icon's image: a PNG, or a BMP without its file header (height doubled, then an AND mask).
fn ico_image(r: &mut R, w: u32, h: u32) -> Vec<u8> {
    if r.u8() & 1 == 0 {
        // RGBA mostly: the image crate refuses other PNG entries (PIL reads them)
        let rgba = !r.u8().is_multiple_of(8);
        let px = samples(r, (w * h * if rgba { 4 } else { 3 }) as usize);
        let mut out = Vec::new();
        let mut enc = png::Encoder::new(&mut out, w, h);
        enc.set_color(if rgba {
            png::ColorType::Rgba
        } else {
            png::ColorType::Rgb
        });
        enc.set_depth(png::BitDepth::Eight);
        let mut wr = enc.write_header().expect("a PNG header");
        wr.write_image_data(&px).expect("the image data");
        wr.finish().expect("a PNG");
        out
    } else {
        let bits: u16 = [32, 24, 8][r.below(3)];
        let mut v = Vec::new();
        le32(&mut v, 40);
        le32(&mut v, w);
        le32(&mut v, 2 * h);
        le16(&mut v, 1);
        le16(&mut v, bits);
        v.resize(40, 0);
        if bits == 8 {
            v.extend(samples(r, 256 * 4));
        }
        let stride = (w as usize * bits as usize).div_ceil(32) * 4;
        v.extend(samples(r, stride * h as usize));
        v.extend(samples(r, (w as usize).div_ceil(32) * 4 * h as usize));
        v
    }
}

pub(super) fn ico(r: &mut R) -> Built {
    let count = 1 + r.below(3);
    let sizes: Vec<(u32, u32)> = (0..count)
        .map(|_| (1 + r.below(32) as u32, 1 + r.below(32) as u32))
        .collect();
    let images: Vec<Vec<u8>> = sizes.iter().map(|&(w, h)| ico_image(r, w, h)).collect();
    let mut v = vec![0, 0, 1, 0];
    le16(&mut v, count as u16);
    let mut at = 6 + 16 * count;
    for (&(w, h), img) in sizes.iter().zip(&images) {
        v.extend_from_slice(&[w as u8, h as u8, 0, 0]);
        le16(&mut v, 1);
        le16(&mut v, 32);
        le32(&mut v, img.len() as u32);
        le32(&mut v, at as u32);
        at += img.len();
    }
    for img in &images {
        v.extend_from_slice(img);
    }
    Built {
        bytes: v,
        dims: (count == 1).then_some(sizes[0]),
        diff: Some(image::ImageFormat::Ico),
        magic: None,
    }
}
