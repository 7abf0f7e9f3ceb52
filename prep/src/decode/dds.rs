//! DDS (DirectDraw Surface), the first surface, read as Pillow 13.0.0's `DdsImagePlugin` reads
//! it: the header's pixel format picks the mode and decoder; BC1-BC5 blocks are decoded with
//! `BcnDecode.c`'s integer formulas (BC5 signed lifts each value by 128 and leaves blue at 128,
//! unsigned leaves it at 0); uncompressed bitmask layouts are scaled as `DdsRgbDecoder` scales
//! them (`int(v / max * 255)` in double precision); luminance, luminance + alpha, 8-bit palette
//! (RGBA, 1024 bytes) and DX10 R8G8B8A8 are raw rows. Only the RGB bands matter downstream
//! (`convert("RGB")` drops alpha). BC6H and BC7 are refused by name (not reproduced yet).

use super::Fail;
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

fn le32(d: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(d.get(at..at + 4)?.try_into().ok()?))
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
                    95 | 96 => return unsupported("DDS BC6H (not reproduced yet)".into()),
                    97..=99 => return unsupported("DDS BC7 (not reproduced yet)".into()),
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

/// BC1-BC5 blocks, left to right, top to bottom (`decode_bcn`, `put_block`), into RGB or L.
fn bcn(data: &[u8], w: usize, h: usize, kind: u8, signed: bool) -> Result<Pixels, Fail> {
    let block = if matches!(kind, 1 | 4) { 8 } else { 16 };
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

#[cfg(test)]
mod tests {
    use super::*;

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
