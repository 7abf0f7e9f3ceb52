//! BC6H (BPTC float) blocks as Pillow 13.0.0's `BcnDecode.c` (`decode_bc6_block`) decodes them to
//! 8-bit RGB: the mode's endpoints gathered bit by bit through the specification's Table.F,
//! sign-extended and delta-applied (masked to the endpoint precision), unquantized, interpolated
//! with BC7's weights, scaled by 31/64 (unsigned) or 31/32 (signed) into a half float, widened to
//! f32 with the shift-and-multiply trick `half_to_float` uses, and clamped to `value * 255`
//! truncated (below 0: 0, above 1: 255). Reserved modes give black.

use super::dds::{BC7_A2, BC7_P2, bc7_weights, bits};

/// Per mode: subsets, delta-coded, partition bits, endpoint bits, red, green, blue delta bits.
const MODES: [[u8; 7]; 14] = [
    [2, 1, 5, 10, 5, 5, 5],
    [2, 1, 5, 7, 6, 6, 6],
    [2, 1, 5, 11, 5, 4, 4],
    [2, 1, 5, 11, 4, 5, 4],
    [2, 1, 5, 11, 4, 4, 5],
    [2, 1, 5, 9, 5, 5, 5],
    [2, 1, 5, 8, 6, 5, 5],
    [2, 1, 5, 8, 5, 6, 5],
    [2, 1, 5, 8, 5, 5, 6],
    [2, 0, 5, 6, 6, 6, 6],
    [1, 0, 0, 10, 10, 10, 10],
    [1, 1, 0, 11, 9, 9, 9],
    [1, 1, 0, 12, 8, 8, 8],
    [1, 1, 0, 16, 4, 4, 4],
];

/// Table.F: for each of the mode's endpoint bits, in block order, `endpoint << 4 | bit`.
#[rustfmt::skip]
const PACKINGS: [&[u8]; 14] = [
    &[116, 132, 180, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 48, 49, 50, 51, 52, 164, 112, 113, 114, 115, 64, 65, 66, 67, 68, 176, 160, 161, 162, 163, 80, 81, 82, 83, 84, 177, 128, 129, 130, 131, 96, 97, 98, 99, 100, 178, 144, 145, 146, 147, 148, 179],
    &[117, 164, 165, 0, 1, 2, 3, 4, 5, 6, 176, 177, 132, 16, 17, 18, 19, 20, 21, 22, 133, 178, 116, 32, 33, 34, 35, 36, 37, 38, 179, 181, 180, 48, 49, 50, 51, 52, 53, 112, 113, 114, 115, 64, 65, 66, 67, 68, 69, 160, 161, 162, 163, 80, 81, 82, 83, 84, 85, 128, 129, 130, 131, 96, 97, 98, 99, 100, 101, 144, 145, 146, 147, 148, 149],
    &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 48, 49, 50, 51, 52, 10, 112, 113, 114, 115, 64, 65, 66, 67, 26, 176, 160, 161, 162, 163, 80, 81, 82, 83, 42, 177, 128, 129, 130, 131, 96, 97, 98, 99, 100, 178, 144, 145, 146, 147, 148, 179],
    &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 48, 49, 50, 51, 10, 164, 112, 113, 114, 115, 64, 65, 66, 67, 68, 26, 160, 161, 162, 163, 80, 81, 82, 83, 42, 177, 128, 129, 130, 131, 96, 97, 98, 99, 176, 178, 144, 145, 146, 147, 116, 179],
    &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 48, 49, 50, 51, 10, 132, 112, 113, 114, 115, 64, 65, 66, 67, 26, 176, 160, 161, 162, 163, 80, 81, 82, 83, 84, 42, 128, 129, 130, 131, 96, 97, 98, 99, 177, 178, 144, 145, 146, 147, 180, 179],
    &[0, 1, 2, 3, 4, 5, 6, 7, 8, 132, 16, 17, 18, 19, 20, 21, 22, 23, 24, 116, 32, 33, 34, 35, 36, 37, 38, 39, 40, 180, 48, 49, 50, 51, 52, 164, 112, 113, 114, 115, 64, 65, 66, 67, 68, 176, 160, 161, 162, 163, 80, 81, 82, 83, 84, 177, 128, 129, 130, 131, 96, 97, 98, 99, 100, 178, 144, 145, 146, 147, 148, 179],
    &[0, 1, 2, 3, 4, 5, 6, 7, 164, 132, 16, 17, 18, 19, 20, 21, 22, 23, 178, 116, 32, 33, 34, 35, 36, 37, 38, 39, 179, 180, 48, 49, 50, 51, 52, 53, 112, 113, 114, 115, 64, 65, 66, 67, 68, 176, 160, 161, 162, 163, 80, 81, 82, 83, 84, 177, 128, 129, 130, 131, 96, 97, 98, 99, 100, 101, 144, 145, 146, 147, 148, 149],
    &[0, 1, 2, 3, 4, 5, 6, 7, 176, 132, 16, 17, 18, 19, 20, 21, 22, 23, 117, 116, 32, 33, 34, 35, 36, 37, 38, 39, 165, 180, 48, 49, 50, 51, 52, 164, 112, 113, 114, 115, 64, 65, 66, 67, 68, 69, 160, 161, 162, 163, 80, 81, 82, 83, 84, 177, 128, 129, 130, 131, 96, 97, 98, 99, 100, 178, 144, 145, 146, 147, 148, 179],
    &[0, 1, 2, 3, 4, 5, 6, 7, 177, 132, 16, 17, 18, 19, 20, 21, 22, 23, 133, 116, 32, 33, 34, 35, 36, 37, 38, 39, 181, 180, 48, 49, 50, 51, 52, 164, 112, 113, 114, 115, 64, 65, 66, 67, 68, 176, 160, 161, 162, 163, 80, 81, 82, 83, 84, 85, 128, 129, 130, 131, 96, 97, 98, 99, 100, 178, 144, 145, 146, 147, 148, 179],
    &[0, 1, 2, 3, 4, 5, 164, 176, 177, 132, 16, 17, 18, 19, 20, 21, 117, 133, 178, 116, 32, 33, 34, 35, 36, 37, 165, 179, 181, 180, 48, 49, 50, 51, 52, 53, 112, 113, 114, 115, 64, 65, 66, 67, 68, 69, 160, 161, 162, 163, 80, 81, 82, 83, 84, 85, 128, 129, 130, 131, 96, 97, 98, 99, 100, 101, 144, 145, 146, 147, 148, 149],
    &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 80, 81, 82, 83, 84, 85, 86, 87, 88, 89],
    &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 48, 49, 50, 51, 52, 53, 54, 55, 56, 10, 64, 65, 66, 67, 68, 69, 70, 71, 72, 26, 80, 81, 82, 83, 84, 85, 86, 87, 88, 42],
    &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 48, 49, 50, 51, 52, 53, 54, 55, 11, 10, 64, 65, 66, 67, 68, 69, 70, 71, 27, 26, 80, 81, 82, 83, 84, 85, 86, 87, 43, 42],
    &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 48, 49, 50, 51, 15, 14, 13, 12, 11, 10, 64, 65, 66, 67, 31, 30, 29, 28, 27, 26, 80, 81, 82, 83, 47, 46, 45, 44, 43, 42],
];

/// `bc6_sign_extend`, on the 16-bit storage.
fn sign_extend(v: u16, prec: u8) -> u16 {
    let x = v as i32;
    if x & (1 << (prec - 1)) != 0 {
        (x | -(1 << prec)) as u16
    } else {
        v
    }
}

/// `bc6_unquantize`.
fn unquantize(v: u16, prec: u8, signed: bool) -> i32 {
    let prec = prec as i32;
    if !signed {
        let x = v as i32;
        return if prec >= 15 || x == 0 {
            x
        } else if x == (1 << prec) - 1 {
            0xffff
        } else {
            ((x << 15) + 0x4000) >> (prec - 1)
        };
    }
    let mut x = v as i16 as i32;
    if prec >= 16 {
        return x;
    }
    let negative = x < 0;
    if negative {
        x = -x;
    }
    if x != 0 {
        x = if x >= (1 << (prec - 1)) - 1 {
            0x7fff
        } else {
            ((x << 15) + 0x4000) >> (prec - 1)
        };
    }
    if negative { -x } else { x }
}

/// `half_to_float`: the magnitude's bits shifted into an f32 and multiplied by 2^112; results
/// of 65536 and over become infinity/NaN bit patterns.
fn half_to_float(h: u16) -> f32 {
    let mut o = f32::from_bits(((h & 0x7fff) as u32) << 13) * f32::from_bits(0x7780_0000);
    if o >= f32::from_bits(0x4780_0000) {
        o = f32::from_bits(o.to_bits() | 255 << 23);
    }
    f32::from_bits(o.to_bits() | ((h & 0x8000) as u32) << 16)
}

/// `bc6_finalize`.
fn finalize(v: i32, signed: bool) -> f32 {
    if signed {
        if v < 0 {
            half_to_float((0x8000 | (((-v) * 31) / 32)) as u16)
        } else {
            half_to_float(((v * 31) / 32) as u16)
        }
    } else {
        half_to_float(((v * 31) / 64) as u16)
    }
}

/// `bc6_clamp`.
fn clamp(v: f32) -> u8 {
    if v < 0.0 {
        0
    } else if v > 1.0 {
        255
    } else {
        (v * 255.0) as u8
    }
}

/// `decode_bc6_block`: 16 RGB pixels from a 16-byte block.
pub(super) fn block(src: &[u8], signed: bool) -> [[u8; 3]; 16] {
    let bit_at = |b: usize| (src.get(b >> 3).copied().unwrap_or(0) >> (b & 7)) & 1;
    let m = (src.first().copied().unwrap_or(0) & 0x1f) as usize;
    let (mode, mut bit, epbits, ib) = match m & 3 {
        0 | 1 => (m & 3, 2, 75, 3u8),
        2 => (2 + (m >> 2), 5, 72, 3),
        _ => (10 + (m >> 2), 5, 60, 4),
    };
    if mode >= 14 {
        // PIL leaves the colour (and alpha) 0.
        return [[0; 3]; 16];
    }
    let [ns, tr, pb, epb, rb, gb, bb] = MODES[mode];
    let cw = bc7_weights(ib);
    let numep = if ns == 2 { 12 } else { 6 };
    let mut ep = [0u16; 12];
    for (i, &di) in PACKINGS[mode].iter().take(epbits).enumerate() {
        ep[(di >> 4) as usize] |= (bit_at(bit + i) as u16) << (di & 15);
    }
    bit += epbits;
    let partition = bits(src, bit, pb) as usize;
    bit += pb as usize;
    let mask = ((1u32 << epb) - 1) as i32;
    if signed {
        for e in &mut ep[..3] {
            *e = sign_extend(*e, epb);
        }
    }
    if signed || tr != 0 {
        for i in (3..numep).step_by(3) {
            ep[i] = sign_extend(ep[i], rb);
            ep[i + 1] = sign_extend(ep[i + 1], gb);
            ep[i + 2] = sign_extend(ep[i + 2], bb);
        }
    }
    if tr != 0 {
        for i in (3..numep).step_by(3) {
            for c in 0..3 {
                ep[i + c] = ((ep[i + c] as i32 + ep[c] as i32) & mask) as u16;
            }
        }
    }
    let mut ue = [0i32; 12];
    for i in 0..numep {
        ue[i] = unquantize(ep[i], epb, signed);
    }
    let partition = partition % 64;
    std::array::from_fn(|i| {
        let s = if ns == 2 {
            (1 & (BC7_P2[partition] >> i)) as usize * 6
        } else {
            0
        };
        let anchor = i == 0 || (ns == 2 && i == BC7_A2[partition] as usize);
        let n = if anchor { ib - 1 } else { ib };
        let w = cw[bits(src, bit, n) as usize] as i32;
        bit += n as usize;
        let t = 64 - w;
        std::array::from_fn(|c| {
            let v = (ue[s + c] * t + ue[s + 3 + c] * w) >> 6;
            clamp(finalize(v, signed))
        })
    })
}
