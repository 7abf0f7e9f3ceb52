//! QOI recipes: the 14-byte header (3 or 4 channels), ops of every kind from the recipe (runs
//! once it is exhausted), with or without the end marker.

use super::recipe::{Built, R};

pub(super) fn qoi(r: &mut R) -> Built {
    let w = 1 + r.below(40) as u32;
    let h = 1 + r.below(40) as u32;
    let channels = 3 + r.below(2) as u8;
    let flags = r.u8();
    let mut v = b"qoif".to_vec();
    v.extend_from_slice(&w.to_be_bytes());
    v.extend_from_slice(&h.to_be_bytes());
    v.push(channels);
    v.push(flags & 1);
    let mut left = (w * h) as usize;
    while left > 0 {
        if r.exhausted() {
            let run = left.min(62);
            v.push(0xc0 | (run - 1) as u8);
            left -= run;
            continue;
        }
        let op = r.u8();
        match op % 6 {
            0 => v.extend_from_slice(&[0xfe, r.u8(), r.u8(), r.u8()]),
            1 => v.extend_from_slice(&[0xff, r.u8(), r.u8(), r.u8(), r.u8()]),
            2 => v.push(r.u8() & 0x3f),
            3 => v.push(0x40 | (r.u8() & 0x3f)),
            4 => v.extend_from_slice(&[0x80 | (r.u8() & 0x3f), r.u8()]),
            _ => {
                let run = (1 + r.below(62)).min(left);
                v.push(0xc0 | (run - 1) as u8);
                left -= run;
                continue;
            }
        }
        left -= 1;
    }
    if flags & 2 == 0 {
        v.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 1]);
    }
    Built {
        bytes: v,
        dims: Some((w, h)),
        diff: Some(image::ImageFormat::Qoi),
        magic: None,
    }
}
