//! The second thread's decoding tables: the format of a table entry, canonical Huffman
//! tables built from code lengths (zlib's rules, subtables for codes longer than the primary
//! bits, literal pairs), and the entries of the literal/length and distance symbols.

use super::inflater::{Bad, R};

/// Primary table bits; longer codes go through subtables.
pub(super) const LIT_BITS: u32 = 12;
pub(super) const DIST_BITS: u32 = 8;
pub(super) const CL_BITS: u32 = 7;
/// Table lengths (primary part and room for subtables): masked indices need no bounds checks.
pub(super) const LIT_TABLE: usize = 8192;
pub(super) const DIST_TABLE: usize = 4096;
pub(super) const CL_TABLE: usize = 1 << CL_BITS;

// A table entry: bits to consume in bits 0..5 (bit 5 clear), kind in 6..8, extra bits (or the
// literal count of a literal entry, 1 or 2) in 8..13, value in 16..32.
pub(super) const K_LIT: u32 = 0;
pub(super) const K_BASE: u32 = 1;
pub(super) const K_EOB: u32 = 2;
pub(super) const K_SUB: u32 = 3;
/// A bit pattern no code has.
pub(super) const INVALID: u32 = entry(1, K_EOB, 0, 0);

pub(super) const fn entry(value: u32, kind: u32, extra: u32, len: u32) -> u32 {
    value << 16 | extra << 8 | kind << 6 | len
}

#[inline(always)]
pub(super) const fn kind(e: u32) -> u32 {
    (e >> 6) & 3
}

const LEN_BASE: [u16; 29] = [
    3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131,
    163, 195, 227, 258,
];
const LEN_EXTRA: [u8; 29] = [
    0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0,
];
const DIST_BASE: [u16; 30] = [
    1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537,
    2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577,
];
const DIST_EXTRA: [u8; 30] = [
    0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13,
    13,
];

/// A canonical Huffman decoding table (codes read LSB first) for `lens`, into `t` (`size`
/// entries). `sym` gives a symbol's entry without its length. zlib's rules: an over-subscribed
/// set fails; an incomplete one only as a single code of length 1 or no codes at all, unless
/// `complete` is asked for.
pub(super) fn build(
    t: &mut Vec<u32>,
    size: usize,
    lens: &[u8],
    primary: u32,
    complete: bool,
    sym: impl Fn(usize) -> u32,
) -> R<()> {
    let mut count = [0u32; 16];
    for &l in lens {
        count[l as usize] += 1;
    }
    count[0] = 0;
    let (mut left, mut max) = (1i32, 0usize);
    for (l, &c) in count.iter().enumerate().skip(1) {
        left = (left << 1) - c as i32;
        if left < 0 {
            return Err(Bad);
        }
        if c > 0 {
            max = l;
        }
    }
    if left > 0 && (complete || max > 1) {
        return Err(Bad);
    }
    let mut next = [0u32; 16];
    let mut code = 0;
    for l in 1..16 {
        code = (code + count[l - 1]) << 1;
        next[l] = code;
    }
    t.clear();
    t.resize(size, INVALID);
    let mut free = 1usize << primary;
    let sub_bits = (max as u32).saturating_sub(primary);
    for (s, &l) in lens.iter().enumerate() {
        let l = l as u32;
        if l == 0 {
            continue;
        }
        let c = next[l as usize];
        next[l as usize] += 1;
        let rev = c.reverse_bits() >> (32 - l);
        if l <= primary {
            let e = sym(s) | l;
            let mut i = rev as usize;
            while i < 1 << primary {
                t[i] = e;
                i += 1 << l;
            }
        } else {
            let prefix = (rev & ((1 << primary) - 1)) as usize;
            let start = if kind(t[prefix]) == K_SUB {
                (t[prefix] >> 16) as usize
            } else {
                let start = free;
                free += 1 << sub_bits;
                if free > size {
                    return Err(Bad);
                }
                t[prefix] = entry(start as u32, K_SUB, sub_bits, primary);
                start
            };
            let l2 = l - primary;
            let e = sym(s) | l2;
            let mut i = (rev >> primary) as usize;
            while i < 1 << sub_bits {
                t[start + i] = e;
                i += 1 << l2;
            }
        }
    }
    Ok(())
}

/// Turns each primary entry of a literal whose remaining index bits hold a whole literal code
/// too into one entry of both literals.
pub(super) fn pair_literals(t: &mut [u32]) {
    // downwards: `i >> l1` is below `i` (or `i` is 0) and still holds its single entry
    for i in (0..1usize << LIT_BITS).rev() {
        let e = t[i];
        if kind(e) != K_LIT {
            continue;
        }
        let l1 = e & 31;
        let e2 = t[i >> l1];
        if kind(e2) == K_LIT && (e2 >> 8) & 31 == 1 && l1 + (e2 & 31) <= LIT_BITS {
            t[i] = entry((e >> 16) | (e2 >> 16) << 8, K_LIT, 2, l1 + (e2 & 31));
        }
    }
}

pub(super) fn lit_sym(s: usize) -> u32 {
    match s {
        0..=255 => entry(s as u32, K_LIT, 1, 0),
        256 => entry(0, K_EOB, 0, 0),
        257..=285 => {
            let i = s - 257;
            entry(LEN_BASE[i] as u32, K_BASE, LEN_EXTRA[i] as u32, 0)
        }
        _ => INVALID,
    }
}

pub(super) fn dist_sym(s: usize) -> u32 {
    if s < 30 {
        entry(DIST_BASE[s] as u32, K_BASE, DIST_EXTRA[s] as u32, 0)
    } else {
        INVALID
    }
}
