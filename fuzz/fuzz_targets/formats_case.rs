//! The decoders added after the first fuzz round (BMP in all of PIL's variants, QOI, PNM P1-P6,
//! TGA, ICO, TIFF through libtiff, DDS; PSD in the raw mode from Pillow's files) and the
//! "unsupported format: NAME" sniffing, through `plan_image`, `load_image` +
//! `preprocess_rgb` and `prep_images`.
//!
//! The first byte: bits 0-3 pick a family (0 BMP, 1 QOI, 2 PNM, 3 TGA, 4 ICO, 5 the magic bytes
//! of a format PIL opens and glm5v does not decode, followed by the rest, 6 TIFF (read through
//! libtiff since 5a46635), 7 DDS (33410c2); modulo 8), bit 4 the
//! structured mode (the rest of the input is a recipe [`build`] turns into a file whose header is
//! valid, so that the fuzzer gets past it; otherwise the rest is the file itself), bit 5 the alpha
//! mode, bit 6 a small decode budget (1024 pixels, under the recipes' largest sizes), bit 7 the
//! thread count of `prep_images` (1 or 2).
//!
//! Invariants, on every input:
//! - plan/prep agreement (today's `image` target's): when `load_image` succeeds, `plan_image`
//!   succeeds with its width and height, `preprocess_rgb` gives the plan's grid and
//!   `plan.patches * 1176` finite values, and `prep_images` gives the same bits and grid;
//! - the same typed error class (`PrepError` variant): `prep_images` fails exactly when
//!   `load_image` does, with the same variant; when `plan_image` fails, `load_image` fails with
//!   the same variant (the header check is a prefix of the decode); when only the decode fails,
//!   its error is not one of the header's (budget, zero size, unknown format);
//! - decode budget before decode: a file whose header plans under the large budget but promises
//!   more than the small one is refused as `DecodeBudget` by all three entry points;
//! - sniffing: a file never named by its format in an "unsupported format: NAME" error other than
//!   the one its magic bytes name, and a format's magic bytes are never an unknown format.
//!
//! In the structured mode also:
//! - the header's size is the recipe's (`plan`'s width and height);
//! - differential against the `image` crate's decoder of the same format, where PIL's rules and
//!   the `image` crate agree: 8-bit results (`L`, `LA`, `RGB`, `RGBA` in the `image` crate) with
//!   the alpha dropped; for BMP (our own decoder, `prep/src/decode/bmp.rs`) only uncompressed
//!   files of 1, 4, 8 bits with a complete palette that is not a gray ramp (PIL reads those as
//!   mode L with 8-bit samples whatever the depth), or of 24 / 32 bits, at the offset right after
//!   the palette. QOI, PNM, TGA and ICO are decoded by the `image` crate in prep too
//!   (`prep/src/decode/foreign.rs`), so there the differential checks prep's mode handling and
//!   QOI's end-marker padding, not a second decoder. TIFF (libtiff in prep) is compared with the
//!   `tiff` crate (the `image` crate's decoder, prep's before libtiff) on 8-bit min-is-black gray,
//!   RGB and RGB with unassociated alpha, contiguous, without an orientation other than 1. DDS
//!   (no second decoder here: the `image` crate reads no DDS) has the invariants only.
//!
//! The check itself; `formats.rs` is the cargo-fuzz target calling it, and
//! `prep/tests/fuzz_regressions.rs` replays the committed findings and seeds through it.

use glm5v_prep::{
    AlphaMode, ImageSource, PrepError, PrepOptions, load_image, plan_image, prep_images,
    preprocess_rgb,
};
use std::sync::OnceLock;

fn pool(n: usize) -> &'static rayon::ThreadPool {
    static POOLS: [OnceLock<rayon::ThreadPool>; 2] = [OnceLock::new(), OnceLock::new()];
    POOLS[n - 1].get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .expect("a thread pool")
    })
}

fn kind(e: &PrepError) -> String {
    let d = format!("{e:?}");
    d.split([' ', '{', '(']).next().unwrap_or("").to_string()
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
struct R<'a> {
    d: &'a [u8],
    i: usize,
}

impl R<'_> {
    fn u8(&mut self) -> u8 {
        let v = self.d.get(self.i).copied().unwrap_or(0);
        self.i += 1;
        v
    }
    fn below(&mut self, n: usize) -> usize {
        self.u8() as usize % n
    }
    fn rest(&self) -> &[u8] {
        self.d.get(self.i..).unwrap_or(&[])
    }
    fn exhausted(&self) -> bool {
        self.i >= self.d.len()
    }
}

fn le16(v: &mut Vec<u8>, x: u16) {
    v.extend_from_slice(&x.to_le_bytes());
}
fn le32(v: &mut Vec<u8>, x: u32) {
    v.extend_from_slice(&x.to_le_bytes());
}

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

/// Bytes for `n` samples: the recipe's, then a pattern.
fn samples(r: &mut R, n: usize) -> Vec<u8> {
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

fn bmp(r: &mut R) -> Built {
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

fn qoi(r: &mut R) -> Built {
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

fn pnm(r: &mut R) -> Built {
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

fn tga(r: &mut R) -> Built {
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

fn ico(r: &mut R) -> Built {
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
fn tiff(r: &mut R) -> Built {
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

/// A DDS: the 128-byte header (and the DX10 one), a pixel format of those Pillow reads (BC1-BC5 by
/// FourCC or DXGI format, bitmask RGB(A) of 16, 24 or 32 bits, luminance, luminance + alpha, an
/// 8-bit palette, DX10 R8G8B8A8) or sometimes one it refuses (BC6H, BC7, others), then blocks or
/// rows from the recipe.
fn dds(r: &mut R) -> Built {
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

/// One execution of the `formats` fuzz target (also replayed by `prep/tests/fuzz_regressions.rs`):
/// panics when an invariant fails.
pub fn check(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let built = if mode & 16 == 0 {
        Built {
            bytes: rest.to_vec(),
            dims: None,
            diff: None,
            magic: None,
        }
    } else {
        build(mode & 15, rest)
    };
    let mut opts = PrepOptions::default();
    opts.image.min_tokens = 4;
    opts.image.max_tokens = 64;
    let small_budget = mode & 64 != 0;
    opts.decode.max_pixels = if small_budget { 1 << 10 } else { 1 << 20 };
    opts.decode.alpha = if mode & 32 == 0 {
        AlphaMode::Drop
    } else {
        AlphaMode::White
    };
    let threads = 1 + (mode >> 7) as usize;
    let src = ImageSource::Bytes {
        name: "fuzz".into(),
        bytes: built.bytes.clone(),
    };
    let plan = plan_image(&src, &opts);
    let load = load_image(&src, &opts.decode);
    let prep = pool(threads).install(|| prep_images(std::slice::from_ref(&src), &opts));

    // sniffing
    for e in [plan.as_ref().err(), load.as_ref().err()]
        .into_iter()
        .flatten()
    {
        let text = e.to_string();
        if let Some(name) = built.magic {
            assert!(
                !matches!(e, PrepError::UnknownFormat { .. }),
                "{name}'s magic bytes: an unknown format: {text}"
            );
            if let Some(at) = text.find("unsupported format: ") {
                let said = &text[at + 20..];
                assert!(
                    said.starts_with(name),
                    "{name}'s magic bytes named otherwise: {text}"
                );
            }
        }
    }

    // the same error class
    match (&plan, &load) {
        (Err(p), Err(l)) => assert_eq!(
            kind(p),
            kind(l),
            "plan and load fail with other kinds: `{p}` against `{l}`"
        ),
        (Err(p), Ok(_)) => panic!("load_image succeeded but plan_image failed: {p}"),
        (Ok(_), Err(l)) => assert!(
            !matches!(
                l,
                PrepError::DecodeBudget { .. }
                    | PrepError::ZeroSize { .. }
                    | PrepError::UnknownFormat { .. }
                    | PrepError::Empty { .. }
            ) && !l.to_string().contains("unsupported format: "),
            "plan_image succeeded but load_image failed with a header error: {l}"
        ),
        (Ok(_), Ok(_)) => {}
    }
    match (&load, &prep) {
        (Err(l), Err(p)) => assert_eq!(
            kind(l),
            kind(p),
            "load and prep_images fail with other kinds: `{l}` against `{p}`"
        ),
        (Err(l), Ok(_)) => panic!("prep_images succeeded but load_image failed: {l}"),
        (Ok(_), Err(p)) => panic!("load_image succeeded but prep_images failed: {p}"),
        (Ok(_), Ok(_)) => {}
    }

    // the header's size is the recipe's
    if let (Some((w, h)), Ok(p)) = (built.dims, &plan) {
        assert_eq!(
            (p.width, p.height),
            (w as usize, h as usize),
            "the header's size is not the recipe's"
        );
    }

    // the budget is checked before the decode
    if small_budget {
        let mut big = opts.clone();
        big.decode.max_pixels = 1 << 20;
        if let Ok(p) = plan_image(&src, &big)
            && (p.width as u64 * p.height as u64) > opts.decode.max_pixels
        {
            for (what, e) in [
                ("plan_image", plan.as_ref().err()),
                ("load_image", load.as_ref().err()),
                ("prep_images", prep.as_ref().err()),
            ] {
                assert!(
                    matches!(e, Some(PrepError::DecodeBudget { .. })),
                    "{}x{} over a budget of {}: {what} gave {e:?}, not DecodeBudget",
                    p.width,
                    p.height,
                    opts.decode.max_pixels
                );
            }
        }
    }

    let Ok(img) = load else {
        return;
    };
    let plan = plan.expect("checked above");
    assert_eq!(
        (plan.width, plan.height),
        (img.width() as usize, img.height() as usize),
        "plan and load disagree on the size"
    );
    let prepared = preprocess_rgb(&img, &opts).expect("a decoded image preprocesses");
    assert_eq!(
        prepared.grid_thw, plan.grid_thw,
        "plan and prep disagree on the grid"
    );
    assert!(plan.tokens <= 64, "token budget exceeded: {}", plan.tokens);
    assert_eq!(prepared.pixel_values.len(), plan.patches * 1176);
    assert!(prepared.pixel_values.iter().all(|v| v.is_finite()));
    let batch = prep.expect("checked above");
    assert_eq!(
        batch.image_grid_thw,
        [prepared.grid_thw.map(|d| d as i64)],
        "prep_images gave another grid"
    );
    if let Some(i) = (prepared.pixel_values.iter().zip(&batch.pixel_values))
        .position(|(a, b)| a.to_bits() != b.to_bits())
    {
        panic!(
            "value {i}: {} (load_image + preprocess_rgb) against {} (prep_images)",
            prepared.pixel_values[i], batch.pixel_values[i]
        );
    }
    assert_eq!(prepared.pixel_values.len(), batch.pixel_values.len());

    // differential against the image crate
    let Some(fmt) = built.diff else {
        return;
    };
    if !matches!(opts.decode.alpha, AlphaMode::Drop) {
        return;
    }
    // 16-bit true-colour TGA (types 2 and 10) is prep's own reader of PIL's rule, 5-bit
    // channels widened as v * 255 / 31, where the image crate (which reads some of them)
    // widens as (v << 3) | (v >> 2): the two differ by design (8 gives 65 against 66), and
    // upstream's pixels check this reader (fixtures/misc, the corpus's 16-bit TGAs)
    let b = &built.bytes;
    if fmt == image::ImageFormat::Tga && b.len() >= 18 && b[2] & 7 == 2 && b[16] == 16 {
        return;
    }
    // An ICO whose largest entries tie: PIL (and prep) open the earliest of them, the image
    // crate another (finding F11, `foreign.rs` `ico_entry`; prep's side checked by
    // `decode_more_formats.rs` against Pillow's pixels)
    if fmt == image::ImageFormat::Ico && ico_largest_tie(b) {
        return;
    }
    let Ok(theirs) = image::load_from_memory_with_format(&built.bytes, fmt) else {
        return;
    };
    use image::ColorType as C;
    if !matches!(theirs.color(), C::L8 | C::La8 | C::Rgb8 | C::Rgba8) {
        return;
    }
    let theirs = theirs.to_rgb8();
    assert_eq!(
        theirs.dimensions(),
        img.dimensions(),
        "{fmt:?}: the image crate decodes another size"
    );
    if let Some((k, (a, b))) = img
        .as_raw()
        .iter()
        .zip(theirs.as_raw())
        .enumerate()
        .find(|(_, (a, b))| a != b)
    {
        let px = k / 3;
        panic!(
            "{fmt:?}: pixel ({}, {}) channel {}: {a} (load_image) against {b} (the image crate)",
            px as u32 % img.width(),
            px as u32 / img.width(),
            k % 3
        );
    }
}

/// Whether two or more ICO directory entries share the largest width x height.
fn ico_largest_tie(b: &[u8]) -> bool {
    let count = b
        .get(4..6)
        .map_or(0, |c| u16::from_le_bytes([c[0], c[1]]) as usize);
    let side = |v: u8| if v == 0 { 256u32 } else { v as u32 };
    let squares: Vec<u32> = (0..count)
        .map_while(|i| b.get(6 + 16 * i..8 + 16 * i))
        .map(|e| side(e[0]) * side(e[1]))
        .collect();
    let max = squares.iter().copied().max().unwrap_or(0);
    squares.iter().filter(|&&s| s == max).count() > 1
}
