//! TGA recipes: colour-mapped, true-colour and gray images (types 1-3 and their RLE types 9-11),
//! 8 to 32 bits, image IDs, colour maps, sometimes the TGA 2.0 footer.

use super::recipe::{Built, R, le16, samples};

pub(super) fn tga(r: &mut R) -> Built {
    let image_type = [1u8, 2, 3, 9, 10, 11][r.below(6)];
    let w = 1 + r.below(40) as u16;
    let h = 1 + r.below(40) as u16;
    let id_len = r.below(4) as u8;
    let flags = r.u8();
    let mapped = image_type == 1 || image_type == 9;
    let depth: u8 = match image_type {
        1 | 9 => 8,
        3 | 11 => [8u8, 16][r.below(2)],
        _ => [15u8, 16, 24, 32][r.below(4)],
    };
    let (map_len, map_depth) = if mapped {
        (1 + r.below(256) as u16, [24u8, 32, 15, 16][r.below(4)])
    } else {
        (0, 0)
    };
    let alpha_bits = match depth {
        32 => 8,
        16 if !mapped && image_type != 3 && image_type != 11 => flags & 1,
        16 => 8,
        _ => 0,
    };
    let descriptor = alpha_bits | (flags & 0x30);
    let mut v = vec![id_len, mapped as u8, image_type];
    le16(&mut v, 0);
    le16(&mut v, map_len);
    v.push(map_depth);
    le16(&mut v, 0);
    le16(&mut v, 0);
    le16(&mut v, w);
    le16(&mut v, h);
    v.push(depth);
    v.push(descriptor);
    v.extend(samples(r, id_len as usize));
    v.extend(samples(
        r,
        map_len as usize * (map_depth as usize).div_ceil(8),
    ));
    let bpp = (depth as usize).div_ceil(8);
    let n = w as usize * h as usize;
    // colour-mapped pixels index the map (mostly: flag bit 7 lets them point anywhere)
    let fix = |px: Vec<u8>| -> Vec<u8> {
        if mapped && flags & 0x80 == 0 {
            px.into_iter().map(|i| (i as u16 % map_len) as u8).collect()
        } else {
            px
        }
    };
    if image_type >= 9 {
        let mut left = n;
        while left > 0 {
            let count = (1 + r.below(128)).min(left);
            if r.u8() & 1 == 0 {
                v.push(0x80 | (count - 1) as u8);
                v.extend(fix(samples(r, bpp)));
            } else {
                v.push((count - 1) as u8);
                v.extend(fix(samples(r, bpp * count)));
            }
            left -= count;
        }
    } else {
        v.extend(fix(samples(r, n * bpp)));
    }
    if flags & 0x40 == 0x40 {
        v.extend_from_slice(&[0; 8]);
        v.extend_from_slice(b"TRUEVISION-XFILE.\0");
    }
    Built {
        bytes: v,
        dims: Some((w as u32, h as u32)),
        diff: Some(image::ImageFormat::Tga),
        magic: None,
    }
}
