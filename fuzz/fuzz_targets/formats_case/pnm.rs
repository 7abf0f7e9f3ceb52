//! PNM recipes: P1 to P6, whitespace and comments of several kinds in the header, maxvals from
//! 1 to 65535, plain and raw samples.

use super::recipe::{Built, R, samples};

pub(super) fn pnm(r: &mut R) -> Built {
    let kind = 1 + r.below(6) as u8;
    let w = 1 + r.below(40);
    let h = 1 + r.below(40);
    let maxval: u32 = match r.below(8) {
        0 => 1,
        1 => 15,
        2 => 256,
        3 => 1000,
        4 => 65535,
        5 => ((r.u8() as u32) << 8) | r.u8() as u32,
        _ => 255,
    }
    .clamp(1, 65535);
    let flags = r.u8();
    let ws = |k: u8| -> &'static [u8] {
        [&b" "[..], b"\n", b"\t", b"  ", b"\n# c\n", b"\r\n"][k as usize % 6]
    };
    let mut v = format!("P{kind}").into_bytes();
    v.extend_from_slice(ws(flags));
    v.extend_from_slice(w.to_string().as_bytes());
    v.extend_from_slice(ws(flags >> 2));
    v.extend_from_slice(h.to_string().as_bytes());
    let bilevel = kind == 1 || kind == 4;
    if !bilevel {
        v.extend_from_slice(ws(flags >> 4));
        v.extend_from_slice(maxval.to_string().as_bytes());
    }
    v.push(b'\n');
    let per_px = if kind == 3 || kind == 6 { 3 } else { 1 };
    let n = w * h * per_px;
    match kind {
        1 => {
            for k in 0..n {
                v.push(b'0' + (r.u8() & 1));
                if flags & 64 == 0 || k % w == w - 1 {
                    v.push(if k % w == w - 1 { b'\n' } else { b' ' });
                }
            }
        }
        2 | 3 => {
            for k in 0..n {
                let x = (r.u8() as u32 * 257 + r.u8() as u32) % (maxval + 1);
                v.extend_from_slice(x.to_string().as_bytes());
                v.push(if k % (w * per_px) == w * per_px - 1 {
                    b'\n'
                } else {
                    b' '
                });
            }
        }
        4 => v.extend(samples(r, w.div_ceil(8) * h)),
        _ => {
            if maxval > 255 {
                for _ in 0..n {
                    let x = (r.u8() as u32 * 257 + r.u8() as u32) % (maxval + 1);
                    v.extend_from_slice(&(x as u16).to_be_bytes());
                }
            } else {
                v.extend(
                    samples(r, n)
                        .into_iter()
                        .map(|x| (x as u32 % (maxval + 1)) as u8),
                );
            }
        }
    }
    Built {
        bytes: v,
        dims: Some((w as u32, h as u32)),
        diff: Some(image::ImageFormat::Pnm),
        magic: None,
    }
}
