//! DDS (DirectDraw Surface), the first surface, read as Pillow 13.0.0's `DdsImagePlugin` reads
//! it: the header's pixel format picks the mode and decoder; BC1-BC5 blocks are decoded with
//! `BcnDecode.c`'s integer formulas (BC5 signed lifts each value by 128 and leaves blue at 128,
//! unsigned leaves it at 0); uncompressed bitmask layouts are scaled as `DdsRgbDecoder` scales
//! them (`int(v / max * 255)` in double precision); luminance, luminance + alpha, 8-bit palette
//! (RGBA, 1024 bytes) and DX10 R8G8B8A8 are raw rows; BC7 with `decode_bc7_block`'s rules, BC6H
//! (unsigned and signed) with `decode_bc6_block`'s (`bc6h.rs`). Only the RGB bands matter
//! downstream (`convert("RGB")` drops alpha).

use super::Fail;
use super::bytes::le32;
use super::modes::{Pixels, Raster, Transparency, blank_palette};

const HEADER: usize = 128;
const DDPF_ALPHAPIXELS: u32 = 0x1;
const DDPF_FOURCC: u32 = 0x4;
const DDPF_PALETTEINDEXED8: u32 = 0x20;
const DDPF_RGB: u32 = 0x40;
const DDPF_LUMINANCE: u32 = 0x20000;

/// How the pixels after the header are stored.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Layout {
    /// `dds_rgb`: `bits` per pixel, one mask per band (3: RGB, 4: RGBA).
    Masks {
        bits: u32,
        masks: Vec<u32>,
    },
    L,
    La,
    P,
    Rgba,
    /// BC1 (DXT1), BC2 (DXT3), BC3 (DXT5), BC4, BC5 (`signed`: BC5S / BC5_SNORM).
    Bc {
        n: u8,
        signed: bool,
    },
}

fn fourcc(s: &[u8; 4]) -> u32 {
    u32::from_le_bytes(*s)
}

/// `_open`: size, layout and where the pixel data starts.
fn open(d: &[u8]) -> Result<(u32, u32, Layout, usize), Fail> {
    let short = || Fail::Corrupt("the file ends inside the DDS header (truncated)".into());
    let size = le32(d, 4).ok_or_else(short)?;
    if size != 124 {
        return Err(Fail::Corrupt(format!(
            "DDS header size {size} (PIL reads 124 only)"
        )));
    }
    if d.len() < HEADER {
        return Err(short());
    }
    let (height, width) = (
        le32(d, 12).ok_or_else(short)?,
        le32(d, 16).ok_or_else(short)?,
    );
    let (pfflags, fcc, bitcount) = (
        le32(d, 80).ok_or_else(short)?,
        le32(d, 84).ok_or_else(short)?,
        le32(d, 88).ok_or_else(short)?,
    );
    let unsupported = |what: String| Err(Fail::Unsupported(what));
    let mut start = HEADER;
    let layout = if pfflags & DDPF_RGB != 0 {
        let k = if pfflags & DDPF_ALPHAPIXELS != 0 {
            4
        } else {
            3
        };
        let masks = (0..k)
            .map(|i| le32(d, 92 + 4 * i).ok_or_else(short))
            .collect::<Result<Vec<_>, _>>()?;
        Layout::Masks {
            bits: bitcount,
            masks,
        }
    } else if pfflags & DDPF_LUMINANCE != 0 {
        match bitcount {
            8 => Layout::L,
            16 if pfflags & DDPF_ALPHAPIXELS != 0 => Layout::La,
            _ => {
                return unsupported(format!(
                    "DDS luminance of {bitcount} bits (PIL refuses it too)"
                ));
            }
        }
    } else if pfflags & DDPF_PALETTEINDEXED8 != 0 {
        start += 1024;
        Layout::P
    } else if pfflags & DDPF_FOURCC != 0 {
        let bc = |n, signed| Layout::Bc { n, signed };
        match fcc {
            f if f == fourcc(b"DXT1") => bc(1, false),
            f if f == fourcc(b"DXT3") => bc(2, false),
            f if f == fourcc(b"DXT5") => bc(3, false),
            f if f == fourcc(b"BC4U") || f == fourcc(b"ATI1") => bc(4, false),
            f if f == fourcc(b"BC5S") => bc(5, true),
            f if f == fourcc(b"BC5U") || f == fourcc(b"ATI2") => bc(5, false),
            f if f == fourcc(b"DX10") => {
                start += 20;
                let dxgi = le32(d, HEADER).ok_or_else(short)?;
                match dxgi {
                    70 | 71 => bc(1, false),
                    73 | 74 => bc(2, false),
                    76 | 77 => bc(3, false),
                    79 | 80 => bc(4, false),
                    82 | 83 => bc(5, false),
                    84 => bc(5, true),
                    27..=29 => Layout::Rgba,
                    95 => bc(6, false),
                    96 => bc(6, true),
                    97..=99 => bc(7, false),
                    _ => {
                        return unsupported(format!(
                            "DXGI format {dxgi} (PIL: unimplemented DXGI format)"
                        ));
                    }
                }
            }
            _ => {
                return unsupported(format!(
                    "DDS pixel format {:?} (PIL: unimplemented pixel format)",
                    String::from_utf8_lossy(&fcc.to_le_bytes())
                ));
            }
        }
    } else {
        return unsupported(format!(
            "DDS pixel format flags {pfflags:#x} (PIL: unknown pixel format flags)"
        ));
    };
    Ok((width, height, layout, start))
}

/// The size from the header, after the checks `Image.open` makes.
pub(crate) fn dims(d: &[u8]) -> Result<(u32, u32), Fail> {
    open(d).map(|(w, h, _, _)| (w, h))
}

pub(crate) fn decode(d: &[u8], max_bytes: usize) -> Result<Raster, Fail> {
    let (w, h, layout, start) = open(d)?;
    let data = d.get(start..).unwrap_or(&[]);
    let (wu, hu) = (w as usize, h as usize);
    let n = wu * hu;
    if n.saturating_mul(4) > max_bytes {
        return Err(Fail::Limits);
    }
    let truncated =
        || Fail::Corrupt("the pixel data ends before the image does (truncated)".into());
    let raw = |bpp: usize| data.get(..n * bpp).ok_or_else(truncated);
    let pixels = match layout {
        Layout::L => Pixels::L(raw(1)?.to_vec()),
        Layout::La => Pixels::La(raw(2)?.to_vec()),
        Layout::Rgba => Pixels::Rgba(raw(4)?.to_vec()),
        Layout::P => {
            let pal_bytes = d.get(HEADER..HEADER + 1024).ok_or_else(truncated)?;
            let mut pal = blank_palette();
            for (p, c) in pal.iter_mut().zip(pal_bytes.chunks_exact(4)) {
                // PIL's "RGBA" palette; `convert("RGB")` uses the first three bytes.
                *p = [c[0], c[1], c[2], 255];
            }
            Pixels::P(raw(1)?.to_vec(), pal)
        }
        Layout::Masks { bits, masks } => Pixels::Rgb(masked(data, n, bits, &masks)?),
        Layout::Bc { n: kind, signed } => bcn(data, wu, hu, kind, signed)?,
    };
    Ok(Raster {
        width: w,
        height: h,
        pixels,
        transparency: Transparency::None,
    })
}

/// `DdsRgbDecoder`: each band `int(((v & mask) >> shift) / (mask >> shift) * 255)`, 0 for an
/// empty mask; RGB bands only.
fn masked(data: &[u8], n: usize, bits: u32, masks: &[u32]) -> Result<Vec<u8>, Fail> {
    let bytes = (bits / 8) as usize;
    if bytes == 0 {
        return Err(Fail::Corrupt(format!(
            "{bits} bits per pixel (PIL: not enough image data)"
        )));
    }
    if data.len() / bytes < n {
        return Err(Fail::Corrupt(
            "the pixel data ends before the image does (PIL: not enough image data)".into(),
        ));
    }
    let bands: Vec<(u32, u32, f64)> = masks
        .iter()
        .take(3)
        .map(|&m| {
            let shift = if m == 0 { 0 } else { m.trailing_zeros() };
            (m, shift, (m >> shift) as f64)
        })
        .collect();
    let mut out = Vec::with_capacity(n * 3);
    for px in data.chunks_exact(bytes).take(n) {
        let mut v: u64 = 0;
        for (i, b) in px.iter().enumerate().take(8) {
            v |= (*b as u64) << (8 * i);
        }
        // Python's mask arithmetic is on the whole integer; the masks are 32-bit.
        let v = v as u32;
        for &(m, shift, total) in &bands {
            out.push(if total == 0.0 {
                0
            } else {
                ((((v & m) >> shift) as f64 / total) * 255.0) as u8
            });
        }
    }
    Ok(out)
}

/// `decode_565`.
fn rgb565(x: u16) -> [u16; 3] {
    let mut r = (x & 0xf800) >> 8;
    r |= r >> 5;
    let mut g = (x & 0x7e0) >> 3;
    g |= g >> 6;
    let mut b = (x & 0x1f) << 3;
    b |= b >> 5;
    [r, g, b]
}

/// `decode_bc1_color`: 16 RGB pixels (the alpha of BC1's fourth colour is dropped later anyway).
fn bc1_color(src: &[u8], separate_alpha: bool) -> [[u8; 3]; 16] {
    let c0 = u16::from_le_bytes([src[0], src[1]]);
    let c1 = u16::from_le_bytes([src[2], src[3]]);
    let (p0, p1) = (rgb565(c0), rgb565(c1));
    let mix = |a: u16, b: u16, d: u16| -> [u8; 3] {
        [0, 1, 2].map(|i| ((a * p0[i] + b * p1[i]) / d) as u8)
    };
    let p: [[u8; 3]; 4] = if c0 > c1 || separate_alpha {
        [
            p0.map(|v| v as u8),
            p1.map(|v| v as u8),
            mix(2, 1, 3),
            mix(1, 2, 3),
        ]
    } else {
        [
            p0.map(|v| v as u8),
            p1.map(|v| v as u8),
            mix(1, 1, 2),
            [0; 3],
        ]
    };
    let mut out = [[0u8; 3]; 16];
    for n in 0..4 {
        for o in 0..4 {
            out[n * 4 + o] = p[(3 & (src[4 + n] >> (2 * o))) as usize];
        }
    }
    out
}

/// `decode_bc3_alpha`: 16 values of a BC3 alpha / BC4 / BC5 channel block.
fn bc3_alpha(src: &[u8], signed: bool) -> [u8; 16] {
    let (a0, a1) = if signed {
        (
            (src[0] as i8 as i16 + 128) as u16,
            (src[1] as i8 as i16 + 128) as u16,
        )
    } else {
        (src[0] as u16, src[1] as u16)
    };
    let mut a = [a0 as u8, a1 as u8, 0, 0, 0, 0, 0, 0];
    if a0 > a1 {
        for i in 0..6u16 {
            a[2 + i as usize] = (((6 - i) * a0 + (1 + i) * a1) / 7) as u8;
        }
    } else {
        for i in 0..4u16 {
            a[2 + i as usize] = (((4 - i) * a0 + (1 + i) * a1) / 5) as u8;
        }
        a[6] = 0;
        a[7] = 0xff;
    }
    let lut1 = src[2] as u32 | (src[3] as u32) << 8 | (src[4] as u32) << 16;
    let lut2 = src[5] as u32 | (src[6] as u32) << 8 | (src[7] as u32) << 16;
    let mut out = [0u8; 16];
    for n in 0..8 {
        out[n] = a[(7 & (lut1 >> (3 * n))) as usize];
        out[8 + n] = a[(7 & (lut2 >> (3 * n))) as usize];
    }
    out
}

/// BC1 blocks as another plugin (FTEX) hands them to `BcnDecode.c`: an RGB raster.
pub(super) fn bc1(data: &[u8], w: u32, h: u32, max_bytes: usize) -> Result<Raster, Fail> {
    if (w as usize).saturating_mul(h as usize).saturating_mul(3) > max_bytes {
        return Err(Fail::Limits);
    }
    Ok(Raster {
        width: w,
        height: h,
        pixels: bcn(data, w as usize, h as usize, 1, false)?,
        transparency: Transparency::None,
    })
}

/// BC1-BC5 blocks, left to right, top to bottom (`decode_bcn`, `put_block`), into RGB or L.
fn bcn(data: &[u8], w: usize, h: usize, kind: u8, signed: bool) -> Result<Pixels, Fail> {
    let block = if matches!(kind, 1 | 4) { 8 } else { 16 };
    // `get_bits` may look one byte past a block (never for the bits a mode uses).
    let (bw, bh) = (w.div_ceil(4), h.div_ceil(4));
    if data.len() / block < bw * bh {
        return Err(Fail::Corrupt(
            "the block data ends before the image does (truncated)".into(),
        ));
    }
    let gray = kind == 4;
    let mut out = vec![0u8; w * h * if gray { 1 } else { 3 }];
    for (i, src) in data.chunks_exact(block).take(bw * bh).enumerate() {
        let (bx, by) = (i % bw * 4, i / bw * 4);
        let px: [[u8; 3]; 16] = match kind {
            1 => bc1_color(src, false),
            2 | 3 => bc1_color(&src[8..], true),
            4 => bc3_alpha(src, false).map(|l| [l, 0, 0]),
            6 => super::bc6h::block(src, signed),
            7 => bc7_block(src).map(|p| [p[0], p[1], p[2]]),
            _ => {
                let (r, g) = (bc3_alpha(src, signed), bc3_alpha(&src[8..], signed));
                let b = if signed { 128 } else { 0 };
                std::array::from_fn(|k| [r[k], g[k], b])
            }
        };
        for j in 0..4 {
            let y = by + j;
            if y >= h {
                continue;
            }
            for k in 0..4 {
                let x = bx + k;
                if x >= w {
                    continue;
                }
                let p = px[j * 4 + k];
                if gray {
                    out[y * w + x] = p[0];
                } else {
                    out[(y * w + x) * 3..(y * w + x) * 3 + 3].copy_from_slice(&p);
                }
            }
        }
    }
    Ok(if gray {
        Pixels::L(out)
    } else {
        Pixels::Rgb(out)
    })
}

/// BPTC (BC7) mode table: subsets, partition bits, rotation bits, index-selection bits, colour
/// bits, alpha bits, per-endpoint and shared p-bits, index bits, secondary index bits.
const BC7_MODES: [[u8; 10]; 8] = [
    [3, 4, 0, 0, 4, 0, 1, 0, 3, 0],
    [2, 6, 0, 0, 6, 0, 0, 1, 3, 0],
    [3, 6, 0, 0, 5, 0, 0, 0, 2, 0],
    [2, 6, 0, 0, 7, 0, 1, 0, 2, 0],
    [1, 0, 2, 1, 5, 6, 0, 0, 2, 3],
    [1, 0, 2, 0, 7, 8, 0, 0, 2, 2],
    [1, 0, 0, 0, 7, 7, 1, 0, 4, 0],
    [2, 6, 0, 0, 5, 5, 1, 0, 2, 0],
];
/// The specification's partition tables (two subsets, one bit per pixel; three subsets, two bits)
/// and anchor indices.
pub(super) const BC7_P2: [u16; 64] = [
    0xcccc, 0x8888, 0xeeee, 0xecc8, 0xc880, 0xfeec, 0xfec8, 0xec80, 0xc800, 0xffec, 0xfe80, 0xe800,
    0xffe8, 0xff00, 0xfff0, 0xf000, 0xf710, 0x008e, 0x7100, 0x08ce, 0x008c, 0x7310, 0x3100, 0x8cce,
    0x088c, 0x3110, 0x6666, 0x366c, 0x17e8, 0x0ff0, 0x718e, 0x399c, 0xaaaa, 0xf0f0, 0x5a5a, 0x33cc,
    0x3c3c, 0x55aa, 0x9696, 0xa55a, 0x73ce, 0x13c8, 0x324c, 0x3bdc, 0x6996, 0xc33c, 0x9966, 0x0660,
    0x0272, 0x04e4, 0x4e40, 0x2720, 0xc936, 0x936c, 0x39c6, 0x639c, 0x9336, 0x9cc6, 0x817e, 0xe718,
    0xccf0, 0x0fcc, 0x7744, 0xee22,
];
const BC7_P3: [u32; 64] = [
    0xaa685050, 0x6a5a5040, 0x5a5a4200, 0x5450a0a8, 0xa5a50000, 0xa0a05050, 0x5555a0a0, 0x5a5a5050,
    0xaa550000, 0xaa555500, 0xaaaa5500, 0x90909090, 0x94949494, 0xa4a4a4a4, 0xa9a59450, 0x2a0a4250,
    0xa5945040, 0x0a425054, 0xa5a5a500, 0x55a0a0a0, 0xa8a85454, 0x6a6a4040, 0xa4a45000, 0x1a1a0500,
    0x0050a4a4, 0xaaa59090, 0x14696914, 0x69691400, 0xa08585a0, 0xaa821414, 0x50a4a450, 0x6a5a0200,
    0xa9a58000, 0x5090a0a8, 0xa8a09050, 0x24242424, 0x00aa5500, 0x24924924, 0x24499224, 0x50a50a50,
    0x500aa550, 0xaaaa4444, 0x66660000, 0xa5a0a5a0, 0x50a050a0, 0x69286928, 0x44aaaa44, 0x66666600,
    0xaa444444, 0x54a854a8, 0x95809580, 0x96969600, 0xa85454a8, 0x80959580, 0xaa141414, 0x96960000,
    0xaaaa1414, 0xa05050a0, 0xa0a5a5a0, 0x96000000, 0x40804080, 0xa9a8a9a8, 0xaaaaaa44, 0x2a4a5254,
];
pub(super) const BC7_A2: [u8; 64] = [
    15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 2, 8, 2, 2, 8, 8, 15, 2, 8,
    2, 2, 8, 8, 2, 2, 15, 15, 6, 8, 2, 8, 15, 15, 2, 8, 2, 2, 2, 15, 15, 6, 6, 2, 6, 8, 15, 15, 2,
    2, 15, 15, 15, 15, 15, 2, 2, 15,
];
const BC7_A3A: [u8; 64] = [
    3, 3, 15, 15, 8, 3, 15, 15, 8, 8, 6, 6, 6, 5, 3, 3, 3, 3, 8, 15, 3, 3, 6, 10, 5, 8, 8, 6, 8, 5,
    15, 15, 8, 15, 3, 5, 6, 10, 8, 15, 15, 3, 15, 5, 15, 15, 15, 15, 3, 15, 5, 5, 5, 8, 5, 10, 5,
    10, 8, 13, 15, 12, 3, 3,
];
const BC7_A3B: [u8; 64] = [
    15, 8, 8, 3, 15, 15, 3, 8, 15, 15, 15, 15, 15, 15, 15, 8, 15, 8, 15, 3, 15, 8, 15, 8, 3, 15, 6,
    10, 15, 15, 10, 8, 15, 3, 15, 10, 10, 8, 9, 10, 6, 15, 8, 15, 3, 6, 6, 8, 15, 3, 15, 15, 15,
    15, 15, 15, 15, 15, 15, 15, 3, 15, 15, 8,
];
const BC7_W2: [u32; 4] = [0, 21, 43, 64];
const BC7_W3: [u32; 8] = [0, 9, 18, 27, 37, 46, 55, 64];
const BC7_W4: [u32; 16] = [0, 4, 9, 13, 17, 21, 26, 30, 34, 38, 43, 47, 51, 55, 60, 64];

pub(super) fn bc7_weights(n: u8) -> &'static [u32] {
    match n {
        2 => &BC7_W2,
        3 => &BC7_W3,
        _ => &BC7_W4,
    }
}

/// `get_bits`: up to 8 bits from bit `bit` of the block (which may reach into the next byte).
pub(super) fn bits(src: &[u8], bit: usize, count: u8) -> u8 {
    if count == 0 {
        return 0;
    }
    let (by, b) = (bit >> 3, bit & 7);
    let lo = src.get(by).copied().unwrap_or(0) as u32;
    let x = if b + count as usize <= 8 {
        lo
    } else {
        lo | (src.get(by + 1).copied().unwrap_or(0) as u32) << 8
    };
    ((x >> b) & ((1u32 << count) - 1)) as u8
}

/// `expand_quantized`, with C's promotion to int: for 8-bit values (BC7 modes 4-7) `v >> 8` is
/// 0, where a shift of the u8 overflowed (a panic with overflow checks, finding F10; release
/// builds masked it to `v >> 0`, the same value by chance).
fn expand(v: u8, bits: u8) -> u8 {
    let v = ((v as u32) << (8 - bits)) as u8;
    v | ((v as u32) >> bits) as u8
}

/// `decode_bc7_block`: 16 RGBA pixels.
fn bc7_block(src: &[u8]) -> [[u8; 4]; 16] {
    if src[0] == 0 {
        return [[0, 0, 0, 255]; 16];
    }
    let mode = src[0].trailing_zeros() as usize;
    let mut bit = mode + 1;
    let [ns, pb, rb, isb, cb0, ab0, epb, spb, ib0, ib2_0] = BC7_MODES[mode];
    let (mut cb, mut ab) = (cb0, ab0);
    let cw = bc7_weights(ib0);
    let aw = bc7_weights(if ab != 0 && ib2_0 != 0 { ib2_0 } else { ib0 });
    let mut load = |n: u8| {
        let v = bits(src, bit, n);
        bit += n as usize;
        v
    };
    let partition = load(pb) as usize;
    let rotation = load(rb);
    let index_sel = load(isb);
    let numep = (ns as usize) << 1;
    let mut ep = [[0u8; 4]; 6];
    for c in 0..3 {
        for e in ep.iter_mut().take(numep) {
            e[c] = load(cb);
        }
    }
    for e in ep.iter_mut().take(numep) {
        e[3] = if ab != 0 { load(ab) } else { 255 };
    }
    let with_p = |e: &mut [u8; 4], val: u8, ab: u8| {
        for c in e.iter_mut().take(3) {
            *c = (*c << 1) | val;
        }
        if ab != 0 {
            e[3] = (e[3] << 1) | val;
        }
    };
    if epb != 0 {
        cb += 1;
        if ab != 0 {
            ab += 1;
        }
        for e in ep.iter_mut().take(numep) {
            let val = load(1);
            with_p(e, val, ab);
        }
    }
    if spb != 0 {
        cb += 1;
        if ab != 0 {
            ab += 1;
        }
        for i in (0..numep).step_by(2) {
            let val = load(1);
            for e in &mut ep[i..i + 2] {
                with_p(e, val, ab);
            }
        }
    }
    for e in ep.iter_mut().take(numep) {
        for c in e.iter_mut().take(3) {
            *c = expand(*c, cb);
        }
        if ab != 0 {
            e[3] = expand(e[3], ab);
        }
    }
    let mut cibit = bit;
    let mut aibit = cibit + 16 * ib0 as usize - ns as usize;
    let mut out = [[0u8; 4]; 16];
    let lerp = |e0: [u8; 4], e1: [u8; 4], s0: u32, s1: u32| -> [u8; 4] {
        let m = |a: u8, b: u8, s: u32| (((64 - s) * a as u32 + s * b as u32 + 32) >> 6) as u8;
        [
            m(e0[0], e1[0], s0),
            m(e0[1], e1[1], s0),
            m(e0[2], e1[2], s0),
            m(e0[3], e1[3], s1),
        ]
    };
    for (i, px) in out.iter_mut().enumerate() {
        let s = match ns {
            2 => (1 & (BC7_P2[partition] >> i)) as usize,
            3 => (3 & (BC7_P3[partition] >> (2 * i))) as usize,
            _ => 0,
        } << 1;
        let mut ib = ib0;
        if i == 0
            || (ns == 2 && i == BC7_A2[partition] as usize)
            || (ns == 3 && (i == BC7_A3A[partition] as usize || i == BC7_A3B[partition] as usize))
        {
            ib -= 1;
        }
        let i0 = bits(src, cibit, ib) as usize;
        cibit += ib as usize;
        let mut c = if ab != 0 && ib2_0 != 0 {
            let ib2 = if i == 0 { ib2_0 - 1 } else { ib2_0 };
            let i1 = bits(src, aibit, ib2) as usize;
            aibit += ib2 as usize;
            if index_sel != 0 {
                lerp(ep[s], ep[s + 1], aw[i1], cw[i0])
            } else {
                lerp(ep[s], ep[s + 1], cw[i0], aw[i1])
            }
        } else {
            lerp(ep[s], ep[s + 1], cw[i0], cw[i0])
        };
        match rotation {
            1 => c.swap(0, 3),
            2 => c.swap(1, 3),
            3 => c.swap(2, 3),
            _ => {}
        }
        *px = c;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pillow's `expand_quantized` (C: UINT8 promoted to int before `>>`) for every value and
    /// width BC7 uses, 8 bits included (finding F10: overflowed in Rust's u8 shift).
    #[test]
    fn expand_quantized_as_c_computes_it() {
        for bits in [4u8, 5, 6, 7, 8] {
            for v in 0..(1u32 << bits) {
                let shifted = (v << (8 - bits)) & 0xff;
                let want = (shifted | (shifted >> bits)) as u8;
                assert_eq!(expand(v as u8, bits), want, "v {v}, {bits} bits");
            }
        }
        assert_eq!(expand(0xab, 8), 0xab);
    }

    #[test]
    fn bc1_block_interpolates_as_pillow() {
        // c0 = pure red (0xf800), c1 = pure blue (0x001f); indices 0,1,2,3 on the first row.
        let block = [0x00, 0xf8, 0x1f, 0x00, 0b11_10_01_00, 0, 0, 0];
        let px = bc1_color(&block, false);
        assert_eq!(px[0], [255, 0, 0]);
        assert_eq!(px[1], [0, 0, 255]);
        // (2 * 255 + 0) / 3 = 170, (0 + 2 * 255) / 3 = 170.
        assert_eq!(px[2], [170, 0, 85]);
        assert_eq!(px[3], [85, 0, 170]);
        assert_eq!(px[4], [255, 0, 0]);
    }

    #[test]
    fn bc7_mode_6_and_the_empty_mode() {
        // Mode 6 (bit 6 first): every other bit set gives endpoints 0x7f with p-bit 1 -> 255.
        let mut b = [0xffu8; 16];
        b[0] = 0xc0;
        assert_eq!(bc7_block(&b), [[255; 4]; 16]);
        // Mode 6, endpoint 0 all zero bits, endpoint 1 all ones: index 15 on every pixel but the
        // anchor (3 bits: index 7 -> weight 30 of 64) blends: ((64 - w) * 0 + w * 255 + 32) >> 6.
        let mut b = [0u8; 16];
        b[0] = 0x40;
        // Bits 7.. : R0 R1 G0 G1 B0 B1 A0 A1 (7 bits each), then p0 p1, then the indices.
        let mut set = |bit: usize| b[bit / 8] |= 1 << (bit % 8);
        for e in 0..8 {
            if e % 2 == 1 {
                (0..7).for_each(|k| set(7 + e * 7 + k));
            }
        }
        set(7 + 56 + 1);
        (65..128).for_each(set);
        let px = bc7_block(&b);
        assert_eq!(px[0], [120; 4]); // (30 * 255 + 32) >> 6
        assert_eq!(px[1], [255; 4]);
        assert_eq!(bc7_block(&[0u8; 16]), [[0, 0, 0, 255]; 16]);
    }

    #[test]
    fn bc4_block_uses_seven_step_ramp() {
        // a0 = 200 > a1 = 10: value 2 is (6 * 200 + 10) / 7 = 172; index 7 is (200 + 60) / 7 = 37.
        let block = [
            200,
            10,
            0b111_010_001_000u32 as u8,
            (0b111_010_001_000u32 >> 8) as u8,
            0,
            0,
            0,
            0,
        ];
        let v = bc3_alpha(&block, false);
        assert_eq!(&v[..4], &[200, 10, 172, 37]);
        // Signed: -128 and 127 become 0 and 255.
        let v = bc3_alpha(&[0x80, 0x7f, 0, 0, 0, 0, 0, 0], true);
        assert_eq!(v[0], 0);
    }
}
