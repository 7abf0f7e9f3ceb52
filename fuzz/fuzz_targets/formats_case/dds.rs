//! DDS recipes: the 128-byte header (and the DX10 one), a pixel format Pillow reads or one it
//! refuses, then blocks or rows from the recipe.

use super::recipe::{Built, R, le32, samples};

/// A DDS: the 128-byte header (and the DX10 one), a pixel format of those Pillow reads (BC1-BC5 by
/// FourCC or DXGI format, bitmask RGB(A) of 16, 24 or 32 bits, luminance, luminance + alpha, an
/// 8-bit palette, DX10 R8G8B8A8) or sometimes one it refuses (BC6H, BC7, others), then blocks or
/// rows from the recipe.
pub(super) fn dds(r: &mut R) -> Built {
    let w = 1 + r.below(40) as u32;
    let h = 1 + r.below(40) as u32;
    let mut pfflags: u32;
    let (mut fourcc, mut bitcount, mut masks) = ([0u8; 4], 0u32, [0u32; 4]);
    let mut dxgi = None;
    // bytes per 4x4 block (compressed) or bits per pixel (rows)
    let (block, bpp): (usize, usize) = match r.below(12) {
        0..=4 => {
            let (cc, b) = [
                (b"DXT1", 8),
                (b"DXT3", 16),
                (b"DXT5", 16),
                (b"ATI1", 8),
                (b"BC4U", 8),
            ][r.below(5)];
            pfflags = 0x4;
            fourcc = *cc;
            (b, 0)
        }
        5 => {
            let cc = [b"ATI2", b"BC5U", b"BC5S"][r.below(3)];
            pfflags = 0x4;
            fourcc = *cc;
            (16, 0)
        }
        6 => {
            pfflags = 0x4;
            fourcc = *b"DX10";
            let (f, b, bits) = [
                (71u32, 8, 0),
                (74, 16, 0),
                (77, 16, 0),
                (80, 8, 0),
                (83, 16, 0),
                (84, 16, 0),
                (28, 0, 32),
                (29, 0, 32),
                (95, 16, 0),
                (98, 16, 0),
                (2, 0, 128),
            ][r.below(11)];
            dxgi = Some(f);
            (b, bits)
        }
        7 | 8 => {
            pfflags = 0x40;
            let (bits, m): (u32, [u32; 4]) = [
                (24, [0xff0000, 0xff00, 0xff, 0]),
                (32, [0xff0000, 0xff00, 0xff, 0xff000000]),
                (32, [0xff, 0xff00, 0xff0000, 0xff000000]),
                (16, [0xf800, 0x7e0, 0x1f, 0]),
                (16, [0x7c00, 0x3e0, 0x1f, 0x8000]),
                (16, [0xf00, 0xf0, 0xf, 0xf000]),
            ][r.below(6)];
            if m[3] != 0 {
                pfflags |= 0x1;
            }
            bitcount = bits;
            masks = m;
            (0, bits as usize)
        }
        9 => {
            pfflags = 0x20000;
            bitcount = 8;
            masks[0] = 0xff;
            (0, 8)
        }
        10 => {
            pfflags = 0x20000 | 0x1;
            bitcount = 16;
            masks = [0xff, 0, 0, 0xff00];
            (0, 16)
        }
        _ => {
            pfflags = 0x20;
            bitcount = 8;
            (0, 8)
        }
    };
    let data_len = if block > 0 {
        (w as usize).div_ceil(4) * (h as usize).div_ceil(4) * block
    } else {
        (w as usize * h as usize * bpp).div_ceil(8)
    };
    let mut v = b"DDS ".to_vec();
    le32(&mut v, 124);
    le32(&mut v, 0x1007 | if block > 0 { 0x80000 } else { 0x8 });
    le32(&mut v, h);
    le32(&mut v, w);
    le32(
        &mut v,
        if block > 0 {
            data_len as u32
        } else {
            (w * bitcount).div_ceil(8)
        },
    );
    le32(&mut v, 0);
    le32(&mut v, 1);
    v.resize(76, 0);
    le32(&mut v, 32);
    le32(&mut v, pfflags);
    v.extend_from_slice(&fourcc);
    le32(&mut v, bitcount);
    for m in masks {
        le32(&mut v, m);
    }
    le32(&mut v, 0x1000);
    v.resize(128, 0);
    if let Some(f) = dxgi {
        le32(&mut v, f);
        le32(&mut v, 3);
        le32(&mut v, 0);
        le32(&mut v, 1);
        le32(&mut v, 0);
    }
    if pfflags == 0x20 {
        v.extend(samples(r, 1024));
    }
    v.extend(samples(r, data_len));
    Built {
        bytes: v,
        dims: Some((w, h)),
        diff: None,
        magic: None,
    }
}
