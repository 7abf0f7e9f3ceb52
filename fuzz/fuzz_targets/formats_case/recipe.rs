//! The structured mode's recipes: the reader of a recipe's bytes, the helpers every format's
//! recipe writes with, and [`build`], which picks the family, damages the file it gets back
//! (cut short, a byte flipped) or writes one of the magic bytes of a format glm5v does not
//! decode.

use super::bmp::bmp;
use super::dds::dds;
use super::ico::ico;
use super::pnm::pnm;
use super::qoi::qoi;
use super::tga::tga;
use super::tiff::tiff;

/// A file built from a recipe, and what the recipe knows about it.
pub struct Built {
    pub bytes: Vec<u8>,
    /// The size the header states (width, height), when the recipe is sure of it.
    pub dims: Option<(u32, u32)>,
    /// The `image` crate's format to compare pixels with, when PIL's rules and it agree.
    pub diff: Option<image::ImageFormat>,
    /// The format the magic bytes name (family 5).
    pub magic: Option<&'static str>,
}

/// Reads a recipe: bytes, then zeros once it is exhausted.
pub(super) struct R<'a> {
    d: &'a [u8],
    i: usize,
}

impl R<'_> {
    pub(super) fn u8(&mut self) -> u8 {
        let v = self.d.get(self.i).copied().unwrap_or(0);
        self.i += 1;
        v
    }
    pub(super) fn below(&mut self, n: usize) -> usize {
        self.u8() as usize % n
    }
    pub(super) fn rest(&self) -> &[u8] {
        self.d.get(self.i..).unwrap_or(&[])
    }
    pub(super) fn exhausted(&self) -> bool {
        self.i >= self.d.len()
    }
}

pub(super) fn le16(v: &mut Vec<u8>, x: u16) {
    v.extend_from_slice(&x.to_le_bytes());
}
pub(super) fn le32(v: &mut Vec<u8>, x: u32) {
    v.extend_from_slice(&x.to_le_bytes());
}

/// Bytes for `n` samples: the recipe's, then a pattern.
pub(super) fn samples(r: &mut R, n: usize) -> Vec<u8> {
    (0..n)
        .map(|k| {
            if r.exhausted() {
                (k * 37 % 251) as u8
            } else {
                r.u8()
            }
        })
        .collect()
}

/// Formats PIL opens and glm5v (at the time of writing) does not decode, by leading bytes that
/// name them whatever follows (`prep/src/decode/other.rs` tries its table before the tests that
/// read later bytes; SGI, SUN and PFM are left out: a GBR or FLI header can start like them).
const MAGIC: &[(&[u8], &str)] = &[
    (b"\0\0\0\x1cftypavif", "AVIF"),
    (b"\0\0\0\x18ftypavis", "AVIF"),
    (b"BLP1", "BLP"),
    (b"BLP2", "BLP"),
    (b"DDS ", "DDS"),
    (b"%!PS", "EPS"),
    (b"SIMPLE", "FITS"),
    (b"icns", "ICNS"),
    (b"\xff\x4f\xff\x51", "JPEG2000"),
    (b"\0\0\0\x0cjP  \r\n\x87\n", "JPEG2000"),
    (b"DanM", "MSP"),
    (b"8BPS", "PSD"),
    (b"/* XPM */", "XPM"),
    (b"#define", "XBM"),
    (b"II+\0", "BigTIFF"),
    (b"MM\0+", "BigTIFF"),
    (b"\0\0\x02\0\x01\0", "CUR"),
    (b"\xb1\x68\xde\x3a", "DCX"),
];

/// Turns a recipe into a file of family `family` (see the module text).
pub fn build(family: u8, recipe: &[u8]) -> Built {
    let mut r = R { d: recipe, i: 0 };
    // one byte: sometimes cut the file short, sometimes flip a byte after the header
    let damage = r.u8();
    let mut b = match family % 8 {
        0 => bmp(&mut r),
        1 => qoi(&mut r),
        2 => pnm(&mut r),
        3 => tga(&mut r),
        4 => ico(&mut r),
        6 => tiff(&mut r),
        7 => dds(&mut r),
        _ => {
            let (m, name) = MAGIC[r.below(MAGIC.len())];
            let mut bytes = m.to_vec();
            bytes.extend_from_slice(r.rest());
            return Built {
                bytes,
                dims: None,
                diff: None,
                magic: Some(name),
            };
        }
    };
    match damage {
        0..=7 if b.bytes.len() > 2 => {
            // cut: the header stays (its size is still stated), the data ends early
            let keep = b.bytes.len() * (damage as usize + 1) / 9;
            b.bytes.truncate(keep.max(1));
            b.diff = None;
            if keep < 64 {
                b.dims = None;
            }
        }
        8..=15 if b.bytes.len() > 64 => {
            let at = 32 + (r.u8() as usize * 7 + damage as usize) % (b.bytes.len() - 32);
            b.bytes[at] ^= 1 << (damage % 8);
            b.diff = None;
            b.dims = None;
        }
        _ => {}
    }
    b
}
