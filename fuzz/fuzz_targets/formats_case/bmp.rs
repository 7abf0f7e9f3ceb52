//! BMP recipes: every header size PIL reads (OS/2 to V5), 1 to 32 bits, palettes (sometimes
//! short or a gray ramp), bit-field masks, RLE8 / RLE4 data, top-down rows, odd data offsets.

use super::recipe::{Built, R, le16, le32, samples};

pub(super) fn bmp(r: &mut R) -> Built {
    let hs = [12u32, 40, 52, 56, 64, 108, 124][r.below(7)];
    let w = 1 + r.below(48) as u32;
    let h = 1 + r.below(48) as u32;
    let flags = r.u8();
    let top_down = hs != 12 && flags & 1 == 1;
    let bits: u16 = [1, 4, 8, 16, 24, 32][r.below(6)];
    let comp: u32 = if hs == 12 {
        0
    } else {
        match (r.below(8), bits) {
            (5, 8) => 1,
            (6, 4) => 2,
            (7 | 6, 16 | 24 | 32) => 3,
            (7, _) => r.below(6) as u32, // sometimes a mismatched one
            _ => 0,
        }
    };
    let full = 1u32 << bits.min(8);
    let colors = if bits <= 8 && flags & 2 == 2 {
        1 + r.below(full as usize) as u32
    } else {
        0
    };
    let entries = if bits <= 8 {
        if colors == 0 { full } else { colors }
    } else {
        0
    };
    let pad = if hs == 12 { 3 } else { 4 };
    let mut palette = samples(r, entries as usize * pad);
    if flags & 4 == 4 && entries == 2 {
        palette[..pad].fill(0);
        palette[pad..2 * pad].fill(255);
    }
    let gray = (0..entries as usize).all(|k| {
        let v = if entries == 2 { [0u8, 255][k] } else { k as u8 };
        palette[k * pad..k * pad + 3] == [v, v, v]
    });
    const MASKS32: [[u32; 4]; 4] = [
        [0xff0000, 0xff00, 0xff, 0],
        [0xff0000, 0xff00, 0xff, 0xff000000],
        [0xff, 0xff00, 0xff0000, 0xff000000],
        [0xff000000, 0xff0000, 0xff00, 0],
    ];
    let masks: [u32; 4] = match bits {
        _ if comp != 3 => [0; 4],
        16 if flags & 8 == 0 => [0xf800, 0x7e0, 0x1f, 0],
        16 => [0x7c00, 0x3e0, 0x1f, 0],
        _ if flags & 16 == 16 => {
            let m = samples(r, 16);
            std::array::from_fn(|k| u32::from_le_bytes(m[4 * k..4 * k + 4].try_into().unwrap()))
        }
        _ => MASKS32[r.below(4)],
    };
    let masks_after = if comp == 3 && hs == 40 { 12 } else { 0 };
    let data_at = 14 + hs as usize + masks_after + palette.len();
    let stride = (w as usize * bits as usize).div_ceil(32) * 4;
    let data = if comp == 1 || comp == 2 {
        rle(r, w as usize, h as usize, comp == 2)
    } else {
        samples(r, stride * h as usize)
    };
    let offset = if flags & 32 == 32 {
        r.u8() as u32 * 4
    } else {
        data_at as u32
    };
    let mut v = b"BM".to_vec();
    le32(&mut v, (data_at + data.len()) as u32);
    le32(&mut v, 0);
    le32(&mut v, offset);
    le32(&mut v, hs);
    if hs == 12 {
        le16(&mut v, w as u16);
        le16(&mut v, h as u16);
        le16(&mut v, 1);
        le16(&mut v, bits);
    } else {
        le32(&mut v, w);
        le32(&mut v, if top_down { h.wrapping_neg() } else { h });
        le16(&mut v, 1);
        le16(&mut v, bits);
        le32(&mut v, comp);
        le32(&mut v, data.len() as u32);
        le32(&mut v, 2835);
        le32(&mut v, 2835);
        le32(&mut v, colors);
        le32(&mut v, 0);
        if hs >= 52 {
            for m in &masks[..if hs >= 56 { 4 } else { 3 }] {
                le32(&mut v, *m);
            }
        }
        v.resize(14 + hs as usize, 0);
        if masks_after > 0 {
            for m in &masks[..3] {
                le32(&mut v, *m);
            }
        }
    }
    v.extend_from_slice(&palette);
    v.extend_from_slice(&data);
    let compare = comp == 0
        && offset as usize == data_at
        && match bits {
            1 | 4 | 8 => colors == 0 && !gray,
            24 | 32 => true,
            _ => false,
        };
    Built {
        bytes: v,
        dims: Some((w, h)),
        diff: compare.then_some(image::ImageFormat::Bmp),
        magic: None,
    }
}

/// RLE8 / RLE4 data for a `w x h` image: encoded runs, absolute runs (word-aligned), ends of
/// line, deltas, and the end of bitmap.
fn rle(r: &mut R, w: usize, h: usize, four: bool) -> Vec<u8> {
    let mut v = Vec::new();
    for _ in 0..(2 * h + 4) {
        if r.exhausted() {
            break;
        }
        match r.below(8) {
            0..=3 => {
                v.push(1 + r.below(w.max(1) + 2) as u8);
                v.push(r.u8());
            }
            4 | 5 => {
                let n = 3 + r.below(w.max(1));
                v.extend_from_slice(&[0, n as u8]);
                let bytes = if four { n.div_ceil(2) } else { n };
                v.extend(samples(r, bytes));
                if bytes % 2 == 1 {
                    v.push(0);
                }
            }
            6 => v.extend_from_slice(&[0, 0]),
            _ => v.extend_from_slice(&[0, 2, r.below(4) as u8, r.below(3) as u8]),
        }
    }
    v.extend_from_slice(&[0, 1]);
    v
}
