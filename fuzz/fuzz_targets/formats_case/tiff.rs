//! TIFF recipes: a baseline TIFF of one IFD, and the PackBits encoder of its PackBits strips.

use super::recipe::{Built, R, samples};

/// PackBits (TIFF compression 32773): literal runs and repeats.
fn packbits(d: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    let mut i = 0;
    while i < d.len() {
        let mut run = 1;
        while i + run < d.len() && run < 128 && d[i + run] == d[i] {
            run += 1;
        }
        if run >= 2 {
            v.push((257 - run) as u8);
            v.push(d[i]);
            i += run;
        } else {
            let start = i;
            while i < d.len() && i - start < 128 && !(i + 1 < d.len() && d[i + 1] == d[i]) {
                i += 1;
            }
            let n = (i - start).max(1);
            i = start + n;
            v.push((n - 1) as u8);
            v.extend_from_slice(&d[start..start + n]);
        }
    }
    v
}

/// A baseline TIFF: one IFD, strips, 8-bit (or 1/4/16-bit gray) samples, uncompressed,
/// PackBits or Deflate (with or without the horizontal predictor), contiguous or separate
/// planes, sometimes an orientation, a colour map or an alpha channel.
pub(super) fn tiff(r: &mut R) -> Built {
    let be = r.u8() & 1 == 1;
    let w = 1 + r.below(40) as u32;
    let h = 1 + r.below(40) as u32;
    let flags = r.u8();
    // (samples, photometric, bits, extra samples)
    let (spp, photometric, bits, extra): (u32, u16, u16, Option<u16>) = match r.below(9) {
        0 => (1, 1, 8, None),
        1 => (1, 0, 8, None),
        2 => (1, 1, [1u16, 4, 16][r.below(3)], None),
        3 => (1, 3, [4u16, 8][r.below(2)], None),
        4 => (4, 2, 8, Some(if flags & 1 == 0 { 2 } else { 1 })),
        5 => (2, 1, 8, Some(2)),
        6 => (3, 2, 16, None),
        _ => (3, 2, 8, None),
    };
    let compression: u16 = [1, 32773, 8, 1][r.below(4)];
    let predictor = compression == 8 && bits == 8 && flags & 2 == 2;
    let planar = spp > 1 && flags & 4 == 4;
    let orientation = (flags & 8 == 8).then(|| 1 + r.below(8) as u16);
    let rows_per_strip = 1 + r.below(h as usize) as u32;
    let planes = if planar { spp } else { 1 };
    let per_px = if planar { 1 } else { spp };
    let row_bytes = (w as usize * per_px as usize * bits as usize).div_ceil(8);
    let mut strips: Vec<Vec<u8>> = Vec::new();
    for _ in 0..planes {
        let mut y = 0;
        while y < h {
            let rows = rows_per_strip.min(h - y) as usize;
            let mut raw = samples(r, rows * row_bytes);
            if predictor {
                for row in raw.chunks_mut(row_bytes) {
                    let step = per_px as usize;
                    for i in (step..row.len()).rev() {
                        row[i] = row[i].wrapping_sub(row[i - step]);
                    }
                }
            }
            strips.push(match compression {
                32773 => packbits(&raw),
                8 => miniz_oxide::deflate::compress_to_vec_zlib(&raw, 6),
                _ => raw,
            });
            y += rows as u32;
        }
    }
    let (u16b, u32b) = (
        |x: u16| if be { x.to_be_bytes() } else { x.to_le_bytes() },
        |x: u32| if be { x.to_be_bytes() } else { x.to_le_bytes() },
    );
    // the IFD's entries: (tag, type, values); 3 SHORT, 4 LONG
    let mut tags: Vec<(u16, u16, Vec<u32>)> = vec![
        (256, 4, vec![w]),
        (257, 4, vec![h]),
        (258, 3, vec![bits as u32; spp as usize]),
        (259, 3, vec![compression as u32]),
        (262, 3, vec![photometric as u32]),
        (273, 4, vec![0; strips.len()]),
        (277, 3, vec![spp]),
        (278, 4, vec![rows_per_strip]),
        (279, 4, strips.iter().map(|s| s.len() as u32).collect()),
    ];
    if let Some(o) = orientation {
        tags.push((274, 3, vec![o as u32]));
    }
    if planar {
        tags.push((284, 3, vec![2]));
    }
    if predictor {
        tags.push((317, 3, vec![2]));
    }
    if photometric == 3 {
        let n = 3 << bits;
        tags.push((
            320,
            3,
            samples(r, n).iter().map(|&v| v as u32 * 257).collect(),
        ));
    }
    if let Some(e) = extra {
        tags.push((338, 3, vec![e as u32]));
    }
    tags.sort_by_key(|t| t.0);
    let ifd_at = 8u32;
    let ifd_len = 2 + 12 * tags.len() as u32 + 4;
    let mut out_of_line = Vec::new();
    let mut extra_at = ifd_at + ifd_len;
    let data_len = |t: &(u16, u16, Vec<u32>)| t.2.len() as u32 * if t.1 == 3 { 2 } else { 4 };
    let ool_len: u32 = tags
        .iter()
        .map(data_len)
        .filter(|&l| l > 4)
        .map(|l| l + (l & 1))
        .sum();
    let mut strip_at = ifd_at + ifd_len + ool_len;
    let offsets: Vec<u32> = strips
        .iter()
        .map(|s| {
            let at = strip_at;
            strip_at += s.len() as u32;
            at
        })
        .collect();
    let mut v = if be {
        b"MM\0*".to_vec()
    } else {
        b"II*\0".to_vec()
    };
    v.extend_from_slice(&u32b(ifd_at));
    v.extend_from_slice(&u16b(tags.len() as u16));
    for t in &mut tags {
        if t.0 == 273 {
            t.2 = offsets.clone();
        }
        let enc: Vec<u8> =
            t.2.iter()
                .flat_map(|&x| {
                    if t.1 == 3 {
                        u16b(x as u16).to_vec()
                    } else {
                        u32b(x).to_vec()
                    }
                })
                .collect();
        v.extend_from_slice(&u16b(t.0));
        v.extend_from_slice(&u16b(t.1));
        v.extend_from_slice(&u32b(t.2.len() as u32));
        if enc.len() <= 4 {
            let mut field = enc.clone();
            field.resize(4, 0);
            v.extend_from_slice(&field);
        } else {
            v.extend_from_slice(&u32b(extra_at));
            extra_at += enc.len() as u32 + (enc.len() as u32 & 1);
            out_of_line.extend_from_slice(&enc);
            if enc.len() % 2 == 1 {
                out_of_line.push(0);
            }
        }
    }
    v.extend_from_slice(&u32b(0));
    v.extend_from_slice(&out_of_line);
    for s in &strips {
        v.extend_from_slice(s);
    }
    // the `tiff` crate (the `image` crate's decoder) against libtiff: 8-bit gray or RGB(A),
    // min-is-black, contiguous, unoriented; where PIL's rules and it agree
    let compare = bits == 8
        && matches!(
            (spp, photometric, extra),
            (1, 1, None) | (3, 2, None) | (4, 2, Some(2))
        )
        && !planar
        && orientation.is_none_or(|o| o == 1);
    let oriented = orientation.is_some_and(|o| o >= 5);
    Built {
        bytes: v,
        dims: Some(if oriented { (h, w) } else { (w, h) }),
        diff: compare.then_some(image::ImageFormat::Tiff),
        magic: None,
    }
}
