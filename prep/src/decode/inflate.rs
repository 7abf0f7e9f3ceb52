//! Inflate (RFC 1950/1951) of one large zlib stream on two threads, for the PNG decode.
//!
//! A deflate stream is one chain of blocks, each free to copy from the 32 KiB of output before it,
//! so an inflater runs on one core; a PNG's image data is one such stream. The speculative method
//! of pugz (Kerbiriou & Chikhi, 2019) and rapidgzip (Knespel & Brunst, 2023) splits it anyway:
//!
//! - the second thread looks for a non-final dynamic-Huffman block header from a point in the
//!   compressed data on (a cheap test of the header's first bits, then the full header, then the
//!   whole block must decode and be followed by another plausible header), and decodes from there
//!   with the output before that point unknown: a back-reference into it becomes a marker naming
//!   the window position (`256 + index` in 16-bit symbols, bytes below 256). Once the last 32 KiB
//!   it decoded hold no marker, the rest needs nothing from before: from the next block boundary on
//!   it is handed to the `fdeflate` crate (the `png` crate's own inflater, faster than ours), the
//!   remaining input shifted to start at a byte behind a zlib header, that 32 KiB in front of its
//!   output as the window;
//! - the first thread (the caller's) runs `fdeflate` from the start, given the input up to the
//!   byte holding the second thread's start bit and no further: a streaming inflater decodes
//!   every symbol whose bits it has, so it ends exactly where the second thread began. It never
//!   waits for the other thread: if no start has been published when it reaches the point where
//!   the search began (the other thread was slow to take its job, or found nothing), it cancels
//!   the second part and inflates the whole stream itself;
//! - the first thread hands its last 32 KiB over, and the second replaces its markers from them
//!   (the bits after a block boundary decode to the same symbols whatever came before; only the
//!   bytes a back-reference copies depend on it). Each part's output then goes to a callback on
//!   its own thread (the PNG decode unfilters its rows there and writes their bands), so the
//!   two threads stay busy to the end.
//!
//! Nothing is trusted on faith: the two parts must add up to the expected length exactly and the
//! whole output must match the stream's Adler-32 (taken as its last four bytes when `fdeflate`
//! ended the second part); any failure, a header the second thread cannot find, or a stream it
//! cannot parse returns `None`, and the caller decodes as before (the `png` crate, one thread).
//! So a stream this code cannot split costs time, never a different answer.
//!
//! Kept for what it measured on a quiet machine (the GPU machine's Xeon, 2 of its cores pinned,
//! `prep/examples/split_inflate_ab` on `glm5v bench prep`'s 640x480 PNG, 6 alternations of 200
//! calls, 2026-12-02): one image 2.49-2.92 ms median with the split against 3.30-3.80 ms without
//! (1.25-1.35x); a batch of 8 prepared at once, where one image per thread already fills the
//! cores, 19.4-23.6 against 21.8-24.4 ms (no difference beyond the noise). It has been fuzzed
//! against miniz_oxide (`cargo xtask fuzz split_inflate`; finding F5 fixed).

use std::sync::atomic::{AtomicU64, Ordering};

/// Compressed streams shorter than this are inflated on one thread (the split saves less than
/// it costs).
pub(crate) const MIN_SPLIT_BYTES: usize = 128 * 1024;

/// Where in the compressed data the second thread starts looking, as a share of it. The first
/// thread starts at once and writes its rows' bands when its part is done; the second first has
/// to be taken up by another thread and find a block header. Whole PNG preps of the bench's
/// 640x480 image in alternating loops (medians): 0.50 2.16 ms, 0.55 2.00-2.02, 0.60 2.00, 0.65
/// 2.13 (one thread's inflate and the streamed path: 2.20-2.27).
const SPLIT: f64 = 0.55;

/// Primary table bits; longer codes go through subtables.
const LIT_BITS: u32 = 12;
const DIST_BITS: u32 = 8;
const CL_BITS: u32 = 7;
/// Table lengths (primary part and room for subtables): masked indices need no bounds checks.
const LIT_TABLE: usize = 8192;
const DIST_TABLE: usize = 4096;
const CL_TABLE: usize = 1 << CL_BITS;

// A table entry: bits to consume in bits 0..5 (bit 5 clear), kind in 6..8, extra bits (or the
// literal count of a literal entry, 1 or 2) in 8..13, value in 16..32.
const K_LIT: u32 = 0;
const K_BASE: u32 = 1;
const K_EOB: u32 = 2;
const K_SUB: u32 = 3;
/// A bit pattern no code has.
const INVALID: u32 = entry(1, K_EOB, 0, 0);

const fn entry(value: u32, kind: u32, extra: u32, len: u32) -> u32 {
    value << 16 | extra << 8 | kind << 6 | len
}

#[inline(always)]
const fn kind(e: u32) -> u32 {
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
/// Order of the code length code lengths in a dynamic block header.
const CL_ORDER: [usize; 19] = [
    16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15,
];
const WINDOW: usize = 32768;

/// A stream (or a false header) this decoder rejects.
#[derive(Debug)]
struct Bad;

type R<T> = Result<T, Bad>;

/// Little-endian bit reader over the whole compressed buffer.
#[derive(Clone, Copy)]
struct Bits<'a> {
    d: &'a [u8],
    pos: usize,
    /// Zero bytes fed past the end.
    over: usize,
    buf: u64,
    n: u32,
}

impl<'a> Bits<'a> {
    fn at(d: &'a [u8], bit: usize) -> Self {
        let mut b = Bits {
            d,
            pos: bit / 8,
            over: 0,
            buf: 0,
            n: 0,
        };
        b.refill();
        b.consume((bit % 8) as u32);
        b
    }

    /// At least 56 bits in `buf` (past the end: zeros, counted in `over`).
    #[inline(always)]
    fn refill(&mut self) {
        if self.pos + 8 <= self.d.len() {
            let w = u64::from_le_bytes(self.d[self.pos..self.pos + 8].try_into().unwrap());
            // the bits above n may already hold the same bytes: OR leaves them as they are
            self.buf |= w << self.n;
            self.pos += (63 - self.n as usize) >> 3;
            self.n |= 56;
        } else {
            *self = self.refill_slow();
        }
    }

    #[cold]
    #[inline(never)]
    fn refill_slow(mut self) -> Self {
        while self.n <= 56 {
            let b = if self.pos < self.d.len() {
                self.pos += 1;
                self.d[self.pos - 1]
            } else {
                self.over += 1;
                0
            };
            self.buf |= (b as u64) << self.n;
            self.n += 8;
        }
        self
    }

    /// Drops `k & 63` bits (callers pass whole table entries: their low bits are the length).
    #[inline(always)]
    fn consume(&mut self, k: u32) {
        self.buf >>= k & 63;
        self.n -= k & 63;
    }

    #[inline(always)]
    fn take(&mut self, k: u32) -> u32 {
        let v = (self.buf & ((1u64 << k) - 1)) as u32;
        self.consume(k);
        v
    }

    fn bitpos(&self) -> usize {
        (self.pos + self.over) * 8 - self.n as usize
    }

    fn overrun(&self) -> bool {
        self.bitpos() > self.d.len() * 8
    }
}

/// A canonical Huffman decoding table (codes read LSB first) for `lens`, into `t` (`size`
/// entries). `sym` gives a symbol's entry without its length. zlib's rules: an over-subscribed
/// set fails; an incomplete one only as a single code of length 1 or no codes at all, unless
/// `complete` is asked for.
fn build(
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
fn pair_literals(t: &mut [u32]) {
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

fn lit_sym(s: usize) -> u32 {
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

fn dist_sym(s: usize) -> u32 {
    if s < 30 {
        entry(DIST_BASE[s] as u32, K_BASE, DIST_EXTRA[s] as u32, 0)
    } else {
        INVALID
    }
}

/// Output symbols: bytes, or 16-bit symbols (bytes, and window markers `256 + index` for bytes
/// before the start that back-references copy).
trait Sym: Copy + Send {
    const MARKERS: bool;
    fn lit(b: u32) -> Self;
    fn marker(window_index: usize) -> Self;
}

impl Sym for u8 {
    const MARKERS: bool = false;
    #[inline(always)]
    fn lit(b: u32) -> Self {
        b as u8
    }
    fn marker(_: usize) -> Self {
        unreachable!("bytes have no markers")
    }
}

impl Sym for u16 {
    const MARKERS: bool = true;
    #[inline(always)]
    fn lit(b: u32) -> Self {
        b as u16
    }
    #[inline(always)]
    fn marker(window_index: usize) -> Self {
        (256 + window_index) as u16
    }
}

/// The second thread's inflater (into bytes, or into 16-bit symbols with markers).
struct Inflater<'a> {
    bits: Bits<'a>,
    lit: Vec<u32>,
    dist: Vec<u32>,
    cl: Vec<u32>,
}

impl<'a> Inflater<'a> {
    fn new(d: &'a [u8], bit: usize) -> Self {
        Inflater {
            bits: Bits::at(d, bit),
            lit: Vec::with_capacity(LIT_TABLE),
            dist: Vec::with_capacity(DIST_TABLE),
            cl: Vec::with_capacity(CL_TABLE),
        }
    }

    /// A dynamic block's code lengths and tables (after BFINAL and BTYPE).
    fn dynamic_header(&mut self) -> R<()> {
        let b = &mut self.bits;
        b.refill();
        let hlit = b.take(5) as usize + 257;
        let hdist = b.take(5) as usize + 1;
        let hclen = b.take(4) as usize + 4;
        if hlit > 286 || hdist > 30 {
            return Err(Bad);
        }
        let mut cl_lens = [0u8; 19];
        for &i in &CL_ORDER[..hclen] {
            b.refill();
            cl_lens[i] = b.take(3) as u8;
        }
        build(&mut self.cl, CL_TABLE, &cl_lens, CL_BITS, true, |s| {
            entry(s as u32, K_LIT, 0, 0)
        })?;
        let mut lens = [0u8; 286 + 30];
        let n = hlit + hdist;
        let mut i = 0;
        while i < n {
            b.refill();
            let e = self.cl[(b.buf & ((1 << CL_BITS) - 1)) as usize];
            if e == INVALID {
                return Err(Bad);
            }
            b.consume(e);
            let (v, rep) = match e >> 16 {
                s @ 0..=15 => (s as u8, 1),
                16 if i > 0 => (lens[i - 1], 3 + b.take(2) as usize),
                16 => return Err(Bad),
                17 => (0, 3 + b.take(3) as usize),
                _ => (0, 11 + b.take(7) as usize),
            };
            if i + rep > n {
                return Err(Bad);
            }
            lens[i..i + rep].fill(v);
            i += rep;
        }
        if lens[256] == 0 || b.overrun() {
            return Err(Bad);
        }
        build(
            &mut self.lit,
            LIT_TABLE,
            &lens[..hlit],
            LIT_BITS,
            false,
            lit_sym,
        )?;
        pair_literals(&mut self.lit);
        build(
            &mut self.dist,
            DIST_TABLE,
            &lens[hlit..n],
            DIST_BITS,
            false,
            dist_sym,
        )
    }

    fn fixed_tables(&mut self) {
        let mut lens = [0u8; 288];
        lens[..144].fill(8);
        lens[144..256].fill(9);
        lens[256..280].fill(7);
        lens[280..].fill(8);
        build(&mut self.lit, LIT_TABLE, &lens, LIT_BITS, true, lit_sym)
            .expect("the fixed code is complete");
        pair_literals(&mut self.lit);
        // 32 codes of 5 bits, a complete code; distance symbols 30 and 31 are invalid
        // (`dist_sym`). 30 lengths alone are an incomplete code, which `build` refuses.
        build(
            &mut self.dist,
            DIST_TABLE,
            &[5u8; 32],
            DIST_BITS,
            true,
            dist_sym,
        )
        .expect("the fixed distance code is complete");
    }

    /// A stored block's bytes (after BFINAL and BTYPE).
    fn stored<T: Sym>(&mut self, out: &mut [T], o: &mut usize) -> R<()> {
        let b = &mut self.bits;
        b.consume(b.n % 8);
        // whole bytes still in the buffer go back to the input
        let at = b.pos + b.over - (b.n / 8) as usize;
        if at + 4 > b.d.len() {
            return Err(Bad);
        }
        let len = u16::from_le_bytes([b.d[at], b.d[at + 1]]) as usize;
        let nlen = u16::from_le_bytes([b.d[at + 2], b.d[at + 3]]) as usize;
        if len != !nlen & 0xffff || at + 4 + len > b.d.len() || *o + len > out.len() {
            return Err(Bad);
        }
        for (dst, &s) in out[*o..*o + len].iter_mut().zip(&b.d[at + 4..at + 4 + len]) {
            *dst = T::lit(s as u32);
        }
        *o += len;
        *b = Bits::at(b.d, (at + 4 + len) * 8);
        Ok(())
    }

    /// The symbols of one Huffman block (tables built), up to and including its end code.
    #[inline(never)]
    fn codes<T: Sym>(&mut self, out: &mut [T], o: &mut usize) -> R<()> {
        // the reader's state in registers for the loop
        let mut b = self.bits;
        let lit: &[u32; LIT_TABLE] = self.lit[..].try_into().expect("a full table");
        let dist: &[u32; DIST_TABLE] = self.dist[..].try_into().expect("a full table");
        const LM: u64 = (1 << LIT_BITS) - 1;
        let mut p = *o;
        let end = out.len();
        loop {
            b.refill();
            let mut e = lit[(b.buf & LM) as usize];
            // Up to three literal entries (one or two literals each) per refill, 45 bits at
            // most, all looked up from the same buffer.
            if kind(e) == K_LIT && p + 6 <= end {
                let buf = b.buf;
                let s1 = e & 31;
                let e2 = lit[((buf >> s1) & LM) as usize];
                let s2 = s1 + (e2 & 31);
                let e3 = lit[((buf >> s2) & LM) as usize];
                p = put_literals(out, p, e);
                if kind(e2) != K_LIT {
                    b.consume(s1);
                    continue;
                }
                p = put_literals(out, p, e2);
                if kind(e3) != K_LIT {
                    b.consume(s2);
                    continue;
                }
                p = put_literals(out, p, e3);
                b.consume(s2 + (e3 & 31));
                continue;
            }
            if kind(e) == K_SUB {
                b.consume(LIT_BITS);
                let i = (e >> 16) as usize + (b.buf & ((1 << ((e >> 8) & 31)) - 1)) as usize;
                e = lit[i & (LIT_TABLE - 1)];
            }
            b.consume(e);
            match kind(e) {
                K_LIT => {
                    let c = ((e >> 8) & 3) as usize;
                    if p + c > end {
                        return Err(Bad);
                    }
                    out[p] = T::lit((e >> 16) & 255);
                    if c == 2 {
                        out[p + 1] = T::lit(e >> 24);
                    }
                    p += c;
                }
                // an invalid symbol (its entry has INVALID's value, 1, and a length: the fixed
                // code's literal/length symbols 286 and 287), or no code at all
                K_EOB if e >> 16 != 0 => return Err(Bad),
                K_EOB => break,
                _ => {
                    let len = (e >> 16) as usize + b.take((e >> 8) & 31) as usize;
                    let mut d = dist[(b.buf & ((1 << DIST_BITS) - 1)) as usize];
                    if kind(d) == K_SUB {
                        b.consume(DIST_BITS);
                        let i =
                            (d >> 16) as usize + (b.buf & ((1 << ((d >> 8) & 31)) - 1)) as usize;
                        d = dist[i & (DIST_TABLE - 1)];
                    }
                    if kind(d) != K_BASE {
                        return Err(Bad);
                    }
                    b.consume(d);
                    let dd = (d >> 16) as usize + b.take((d >> 8) & 31) as usize;
                    if p + len > end || dd > p + if T::MARKERS { WINDOW } else { 0 } {
                        return Err(Bad);
                    }
                    if dd <= p {
                        if dd >= len {
                            out.copy_within(p - dd..p - dd + len, p);
                        } else {
                            for q in p..p + len {
                                out[q] = out[q - dd];
                            }
                        }
                    } else {
                        // reaches before this thread's start: markers for the unknown bytes
                        for q in p..p + len {
                            out[q] = if dd <= q {
                                out[q - dd]
                            } else {
                                T::marker(WINDOW + q - dd)
                            };
                        }
                    }
                    p += len;
                }
            }
        }
        *o = p;
        self.bits = b;
        if b.overrun() { Err(Bad) } else { Ok(()) }
    }

    /// One block, header and contents; returns BFINAL.
    fn block<T: Sym>(&mut self, out: &mut [T], o: &mut usize) -> R<bool> {
        self.bits.refill();
        let fin = self.bits.take(1) == 1;
        match self.bits.take(2) {
            0 => self.stored(out, o)?,
            1 => {
                self.fixed_tables();
                self.codes(out, o)?
            }
            2 => {
                self.dynamic_header()?;
                self.codes(out, o)?
            }
            _ => return Err(Bad),
        }
        Ok(fin)
    }
}

/// Writes a literal entry's literals at `p` (both slots, whether it holds one or two: the
/// caller has checked there is room for two) and returns the position after its literals.
#[inline(always)]
fn put_literals<T: Sym>(out: &mut [T], p: usize, e: u32) -> usize {
    out[p] = T::lit((e >> 16) & 255);
    out[p + 1] = T::lit(e >> 24);
    p + ((e >> 8) & 3) as usize
}

/// The 16 bits of `z` from bit `bit` on (a block header's first bits; two bytes must follow).
#[inline(always)]
fn bits16(z: &[u8], bit: usize) -> u32 {
    (z[bit / 8] as u32 | (z[bit / 8 + 1] as u32) << 8) >> (bit % 8)
}

/// Kraft sums (in 1/128) of four 3-bit code length code lengths, by their 12 bits.
static KRAFT4: [u16; 4096] = {
    let mut t = [0u16; 4096];
    let mut i = 0;
    while i < 4096 {
        let (mut k, mut sum) = (0, 0);
        while k < 4 {
            let l = (i >> (3 * k)) & 7;
            if l > 0 {
                sum += 128 >> l;
            }
            k += 1;
        }
        t[i] = sum;
        i += 1;
    }
    t
};

/// Whether a dynamic block header could start at `bit` (16 bytes must follow): BTYPE 2, counts
/// in range, a complete code length code.
#[inline(always)]
fn plausible(z: &[u8], bit: usize) -> bool {
    let at = bit / 8;
    let w = u128::from_le_bytes(z[at..at + 16].try_into().unwrap()) >> (bit % 8);
    let w0 = w as u64;
    if (w0 >> 1) & 3 != 2 || (w0 >> 3) & 31 > 29 || (w0 >> 8) & 31 > 29 {
        return false;
    }
    let n = ((w0 >> 13) & 15) as usize + 4;
    // lengths past the n-th count as 0; the set is complete when the sum is exactly 1
    let c = (w >> 17) as u64 & ((1u64 << (3 * n)) - 1);
    let sum = KRAFT4[(c & 4095) as usize]
        + KRAFT4[((c >> 12) & 4095) as usize]
        + KRAFT4[((c >> 24) & 4095) as usize]
        + KRAFT4[((c >> 36) & 4095) as usize]
        + KRAFT4[((c >> 48) & 511) as usize];
    sum == 128
}

/// The first bit at or after `from` (below `to`) where [`plausible`] holds and BFINAL is clear,
/// testing BFINAL, BTYPE and the HLIT / HDIST ranges of 8 positions at a time first.
///
/// Only non-final blocks are looked for: a split at the last block saves little, and the test
/// halves the false starts the search must try (each costs 1-7 us: a precode that passed
/// [`plausible`], then code lengths decoded until they fail). On the bench's 640x480 PNG the
/// search went from 90 tries to 44 and from ~470 to ~270 us (the real block's decode, ~150 us,
/// included); whole preps in interleaved calls 5% faster.
fn next_candidate(z: &[u8], from: usize, to: usize) -> Option<usize> {
    let (mut k, mut skip) = (from / 8, from % 8);
    while k * 8 < to && k + 24 <= z.len() {
        let w = u64::from_le_bytes(z[k..k + 8].try_into().unwrap());
        let c = !w
            & !(w >> 1)
            & (w >> 2)
            & !(w >> 4 & w >> 5 & w >> 6 & w >> 7)
            & !(w >> 9 & w >> 10 & w >> 11 & w >> 12);
        let mut m = (c & 0xff) >> skip << skip;
        skip = 0;
        while m != 0 {
            let bit = k * 8 + m.trailing_zeros() as usize;
            if bit >= to {
                return None;
            }
            if plausible(z, bit) {
                return Some(bit);
            }
            m &= m - 1;
        }
        k += 1;
    }
    None
}

/// Whether any block's header could start at `bit`: a final block, a stored block with a
/// consistent length, or a plausible dynamic one.
fn plausible_next(z: &[u8], bit: usize) -> bool {
    if bit / 8 + 24 > z.len() {
        return true;
    }
    let w = bits16(z, bit);
    if w & 1 == 1 {
        return true;
    }
    match (w >> 1) & 3 {
        0 => {
            let at = (bit + 3).div_ceil(8);
            u16::from_le_bytes([z[at], z[at + 1]]) == !u16::from_le_bytes([z[at + 2], z[at + 3]])
        }
        2 => plausible(z, bit),
        _ => false,
    }
}

/// A zlib header (deflate, 32 KiB window, no dictionary) and then the bits of `z` from `bit` on,
/// shifted to start at a byte, then 8 zero bytes (room for the checksum a reader looks for).
fn realign(z: &[u8], bit: usize) -> Vec<u8> {
    let (p, k) = (bit / 8, (bit % 8) as u32);
    let mut out = Vec::with_capacity(z.len() - p + 10);
    out.extend_from_slice(&[0x78, 0x01]);
    if k == 0 {
        out.extend_from_slice(&z[p..]);
    } else {
        let src = &z[p..];
        let n = src.len();
        out.resize(2 + n, 0);
        let dst = &mut out[2..];
        let words = (n - 1) / 8;
        for i in 0..words {
            let w = u64::from_le_bytes(src[8 * i..8 * i + 8].try_into().unwrap());
            let next = src[8 * i + 8] as u64;
            let v = (w >> k) | (next << (64 - k));
            dst[8 * i..8 * i + 8].copy_from_slice(&v.to_le_bytes());
        }
        for i in 8 * words..n {
            let next = src.get(i + 1).map_or(0, |&b| b);
            dst[i] = (src[i] >> k) | (next << (8 - k));
        }
    }
    out.extend_from_slice(&[0; 8]);
    out
}

/// Buffers kept per thread from one split to the next (output, symbols), up to this many bytes
/// each: taken zeroed from the allocator every time (`memset`, page faults), they made the
/// bench's 640x480 PNG prep 4-6% slower (interleaved calls, 2.73 / 2.74 against 2.57 / 2.64
/// ms). Nothing is read from them before it is written in the same split (the inflaters copy
/// only from output they wrote; markers stand for the rest). The cap bounds what stays allocated
/// on each thread that ran a split (3 MiB: output of images up to ~700k pixels, 1 MiB of
/// symbols); larger images allocate per call as before.
const SPARE_MAX_BYTES: usize = 2 << 20;

thread_local! {
    static SPARE_BYTES: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
    static SPARE_SYMBOLS: std::cell::Cell<Vec<u16>> = const { std::cell::Cell::new(Vec::new()) };
}

/// This thread's spare buffer of `T`, at least `len` long (contents unspecified).
fn spare<T: Copy + Default>(
    key: &'static std::thread::LocalKey<std::cell::Cell<Vec<T>>>,
    len: usize,
) -> Vec<T> {
    let v = key.take();
    if v.len() >= len {
        v
    } else {
        vec![T::default(); len]
    }
}

/// Keeps `v` as this thread's spare buffer of `T` unless it is larger than [`SPARE_MAX_BYTES`].
fn keep<T>(key: &'static std::thread::LocalKey<std::cell::Cell<Vec<T>>>, v: Vec<T>) {
    if std::mem::size_of_val(&v[..]) <= SPARE_MAX_BYTES {
        key.set(v);
    }
}

const UNKNOWN: u64 = u64::MAX;
const NONE: u64 = u64::MAX - 1;
const CANCELLED: u64 = u64::MAX - 2;

/// What the second thread decoded: `n` bytes in `bytes`, of which the first `n_symbols` are
/// still to be taken from `symbols` (16-bit: bytes and window markers; once its last 32 KiB held
/// no marker the rest was inflated into `bytes` straight after them).
struct Tail {
    symbols: Vec<u16>,
    n_symbols: usize,
    bytes: Vec<u8>,
    n: usize,
    /// The bit after the final block (`None`: the Adler-32 is taken as the stream's last 4 bytes).
    end_bit: Option<usize>,
}

/// The second thread: the first block header at or after bit `from` whose block decodes and is
/// followed by a plausible header, published in `start` (or NONE), then everything from there to
/// the end of the stream (at most `max_out` bytes).
fn second(z: &[u8], from: usize, max_out: usize, start: &AtomicU64) -> Option<Tail> {
    if start.load(Ordering::Acquire) != UNKNOWN {
        return None;
    }
    let last = z.len().saturating_sub(24) * 8;
    let cap = max_out.min(1 << 19);
    let mut symbols = spare(&SPARE_SYMBOLS, cap);
    let mut bit = from;
    let mut inf = Inflater::new(z, from);
    while let Some(b) = next_candidate(z, bit, last) {
        // the first part has cancelled this one (it got to the search point first)
        if start.load(Ordering::Relaxed) != UNKNOWN {
            return None;
        }
        bit = b;
        inf.bits = Bits::at(z, bit);
        let mut o = 0;
        if let Ok(mut fin) = inf.block(&mut symbols[..cap], &mut o)
            && o > 0
            && (fin || plausible_next(z, inf.bits.bitpos()))
        {
            // published unless the first part has given up on this one
            start
                .compare_exchange(UNKNOWN, bit as u64, Ordering::AcqRel, Ordering::Relaxed)
                .ok()?;
            // symbols while the last 32 KiB may hold markers
            while !fin && (o < WINDOW || symbols[o - WINDOW..o].iter().any(|&v| v > 255)) {
                fin = inf.block(&mut symbols[..cap], &mut o).ok()?;
            }
            if fin {
                return Some(Tail {
                    symbols,
                    n_symbols: o,
                    bytes: spare(&SPARE_BYTES, o),
                    n: o,
                    end_bit: Some(inf.bits.bitpos()),
                });
            }
            // The rest by fdeflate, which reads a zlib stream from a byte: the input from this
            // block boundary on, moved to a byte boundary behind a zlib header; its output
            // follows the (marker-free) 32 KiB it may copy from.
            let len = max_out.max(o);
            let mut bytes = spare(&SPARE_BYTES, len);
            for (d, &v) in bytes[o - WINDOW..o].iter_mut().zip(&symbols[o - WINDOW..o]) {
                *d = v as u8;
            }
            let input = realign(z, inf.bits.bitpos());
            let mut d = fdeflate::Decompressor::new();
            d.ignore_adler32();
            let (_, k) = d.read(&input, &mut bytes[..len], o, true).ok()?;
            if !d.is_done() {
                return None;
            }
            return Some(Tail {
                symbols,
                n_symbols: o,
                bytes,
                n: o + k,
                end_bit: None,
            });
        }
        bit += 1;
    }
    let _ = start.compare_exchange(UNKNOWN, NONE, Ordering::AcqRel, Ordering::Relaxed);
    None
}

fn zlib_header(z: &[u8]) -> Option<()> {
    let (cmf, flg) = (*z.first()?, *z.get(1)?);
    // deflate, window <= 32 KiB, check bits, no preset dictionary
    (cmf & 15 == 8
        && cmf >> 4 <= 7
        && (u16::from(cmf) << 8 | u16::from(flg)) % 31 == 0
        && flg & 0x20 == 0)
        .then_some(())
}

/// Inflates the zlib stream `z`, whose output must be exactly `out_len` bytes, on two threads
/// (see the module text), handing each part's output to a callback on that part's thread:
///
/// - `first(part)` on this thread with the first part's output (`out[..o0]`, free to change),
///   returning what the second part's callback needs (`P`) and what `first_after` needs (`Q`)
///   (`None`: give up);
/// - `P` goes to the other thread, then `first_after(q, part)` runs here (the part as `first`
///   left it);
/// - `second(p, o0, rest)` on the other thread with the second part's output (`out[o0..]`, its
///   markers resolved) once `first` has returned (`None`: give up).
///
/// When the second part is cancelled (see the module text) or never starts, this thread inflates
/// everything and `first` gets the whole output. Returns `Some(())` when every check passed
/// (the parts' lengths add up, the Adler-32 matches) and every callback ran; `None` when it
/// cannot split (too short, one thread in the pool, a zlib header it does not take) or any check
/// failed: then some callbacks may have run on wrong data, and the caller must redo their work.
pub(crate) fn inflate_zlib_split<P: Send, Q>(
    z: &[u8],
    out_len: usize,
    first: impl FnOnce(&mut [u8]) -> Option<(P, Q)> + Send,
    first_after: impl FnOnce(Q, &[u8]) + Send,
    second: impl FnOnce(P, usize, &mut [u8]) -> Option<()> + Send,
) -> Option<()> {
    #[cfg(test)]
    let policy = match WAIT_FOR_SECOND.load(Ordering::Relaxed) {
        0 => Policy::Race,
        _ => Policy::Wait,
    };
    #[cfg(not(test))]
    let policy = Policy::Race;
    if !split_enabled() {
        return None;
    }
    split_with(
        policy,
        z,
        out_len,
        MIN_SPLIT_BYTES,
        first,
        first_after,
        second,
    )
}

/// Whether [`inflate_zlib_split`] runs at all: `GLM5V_PREP_SPLIT_INFLATE=0` in the environment
/// (read once) turns it off, leaving every PNG to the one-thread paths (for measuring what the
/// split buys; the pixels are the same either way).
fn split_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("GLM5V_PREP_SPLIT_INFLATE").as_deref() != Ok("0"))
}

/// Tests that need the second part to run count themselves here while they run:
/// [`Policy::Wait`] for every split meanwhile.
#[cfg(test)]
pub(crate) static WAIT_FOR_SECOND: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

/// What the first part does about the second part's start: the race of
/// [`inflate_zlib_split`], or (for tests and the fuzz hook, which must take each path for sure)
/// wait for the search's answer (up to a second: two first parts on the two threads of a pool
/// would otherwise wait for each other's second part forever), or always inflate everything.
#[derive(Clone, Copy, PartialEq, Debug)]
pub(crate) enum Policy {
    Race,
    Wait,
    #[cfg(test)]
    Alone,
}

/// [`inflate_zlib_split`] with a [`Policy`], splitting streams of at least `min_bytes`.
pub(crate) fn split_with<P: Send, Q>(
    policy: Policy,
    z: &[u8],
    out_len: usize,
    min_bytes: usize,
    first: impl FnOnce(&mut [u8]) -> Option<(P, Q)> + Send,
    first_after: impl FnOnce(Q, &[u8]) + Send,
    second: impl FnOnce(P, usize, &mut [u8]) -> Option<()> + Send,
) -> Option<()> {
    zlib_header(z)?;
    if z.len() < min_bytes || rayon::current_num_threads() < 2 {
        return None;
    }
    let from = (2 + ((z.len() - 2) as f64 * SPLIT) as usize) * 8;
    let handover = AtomicU64::new(UNKNOWN);
    #[cfg(test)]
    if policy == Policy::Alone {
        handover.store(CANCELLED, Ordering::Relaxed);
    }
    // the first part's hand-over to the second: (o0, its last 32 KiB, P), or None when it failed
    let handed: Handoff<P> = Handoff::new();
    // The first part runs on this thread, the search and the second part wherever rayon puts
    // them. The first part never waits: when it reaches the point where the search begins and
    // the search has not published a start yet (another thread was slow to take it, or there is
    // none), it cancels the second part and inflates everything itself. The second part waits
    // for the first part's hand-over only once it has published its start, so it is running on
    // another thread and the first part is not waiting for it.
    let first_part = |out: &mut [u8]| -> Option<(usize, u32)> {
        let mut d = fdeflate::Decompressor::new();
        let (mut used, mut o) = (0usize, 0usize);
        let mut feed = |end: usize, last: bool, used: &mut usize, o: &mut usize| -> Option<()> {
            loop {
                let (c, n) = d.read(&z[*used..end], &mut *out, *o, last).ok()?;
                *used += c;
                *o += n;
                if c == 0 && n == 0 {
                    return Some(());
                }
            }
        };
        feed(from / 8, false, &mut used, &mut o)?;
        if policy == Policy::Wait {
            let t0 = std::time::Instant::now();
            while handover.load(Ordering::Acquire) == UNKNOWN && t0.elapsed().as_secs() < 1 {
                std::hint::spin_loop();
            }
        }
        match handover.compare_exchange(UNKNOWN, CANCELLED, Ordering::AcqRel, Ordering::Acquire) {
            Err(h) if h != NONE && h != CANCELLED => {
                // up to the byte holding the second part's first bit
                feed((h as usize).div_ceil(8), false, &mut used, &mut o)?;
                // what the rest needs of this part before `first` may change it: its checksum
                // and its last 32 KiB (the markers' bytes)
                let mut a = simd_adler32::Adler32::new();
                a.write(&out[..o]);
                let window = out[o.saturating_sub(WINDOW)..o].to_vec();
                let (p, q) = first(&mut out[..o])?;
                handed.give(Some((o, window, p)));
                first_after(q, &out[..o]);
                Some((o, a.finish()))
            }
            _ => {
                // everything here (fdeflate checks the Adler-32)
                feed(z.len(), true, &mut used, &mut o)?;
                if !(d.is_done() && o == out_len) {
                    return None;
                }
                let (_, q) = first(out)?;
                first_after(q, out);
                Some((out_len, 0))
            }
        }
    };
    let first_thread = || {
        let mut buf = spare(&SPARE_BYTES, out_len);
        let r = first_part(&mut buf[..out_len]);
        keep(&SPARE_BYTES, buf);
        r
    };
    let (first_done, second_done) = rayon::join(
        || {
            let r = first_thread();
            // (a no-op when the hand-over was given)
            handed.give(None);
            r
        },
        || second_part(z, from, out_len, &handover, &handed, second),
    );
    let (o0, adler0) = first_done?;
    if o0 == out_len {
        return Some(());
    }
    let (adler1, end_bit) = second_done?;
    // the Adler-32 follows the final block, byte-aligned
    let at = match end_bit {
        Some(b) => b.div_ceil(8),
        None => z.len().checked_sub(4)?,
    };
    let want = u32::from_be_bytes(z.get(at..at + 4)?.try_into().ok()?);
    (adler32_combine(adler0, adler1, out_len - o0) == want).then_some(())
}

/// The first part's hand-over: its length, its last 32 KiB and the callbacks' `P`.
type Given<P> = Option<(usize, Vec<u8>, P)>;

/// A value given once by one thread and taken by another, which spins until it is given.
struct Handoff<P> {
    given: std::sync::atomic::AtomicBool,
    value: std::sync::Mutex<Option<Given<P>>>,
}

impl<P> Handoff<P> {
    fn new() -> Self {
        Handoff {
            given: std::sync::atomic::AtomicBool::new(false),
            value: std::sync::Mutex::new(None),
        }
    }

    /// Gives `v` unless something was given before.
    fn give(&self, v: Given<P>) {
        let mut slot = self.value.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Some(v);
            self.given.store(true, Ordering::Release);
        }
    }

    /// Waits for the value (`None`: the giver failed).
    fn take(&self) -> Given<P> {
        while !self.given.load(Ordering::Acquire) {
            std::hint::spin_loop();
        }
        let mut slot = self.value.lock().unwrap_or_else(|e| e.into_inner());
        slot.as_mut().and_then(Option::take)
    }
}

/// The second thread's whole share: [`second`], then (once the first part is handed over) the
/// markers resolved, the checksum of this part, and `cb` with this part's bytes. Returns this
/// part's Adler-32 and, when known, the bit after the final block.
fn second_part<P>(
    z: &[u8],
    from: usize,
    out_len: usize,
    handover: &AtomicU64,
    handed: &Handoff<P>,
    cb: impl FnOnce(P, usize, &mut [u8]) -> Option<()>,
) -> Option<(u32, Option<usize>)> {
    let t = second(z, from, out_len, handover)?;
    let (o0, window, p) = handed.take()?;
    let mut rest = t.bytes;
    let n = t.n;
    if o0 + n != out_len {
        return None;
    }
    // the markers from the first part's last 32 KiB
    let missing = WINDOW - window.len();
    let marked = t.n_symbols;
    for (dst, src) in rest[..marked]
        .chunks_mut(64)
        .zip(t.symbols[..marked].chunks(64))
    {
        if src.iter().all(|&v| v < 256) {
            for (d, &v) in dst.iter_mut().zip(src) {
                *d = v as u8;
            }
        } else {
            for (d, &v) in dst.iter_mut().zip(src) {
                *d = match v.checked_sub(256) {
                    None => v as u8,
                    Some(i) => *window.get((i as usize).checked_sub(missing)?)?,
                };
            }
        }
    }
    let mut a = simd_adler32::Adler32::new();
    a.write(&rest[..n]);
    cb(p, o0, &mut rest[..n])?;
    keep(&SPARE_BYTES, rest);
    keep(&SPARE_SYMBOLS, t.symbols);
    Some((a.finish(), t.end_bit))
}

/// The Adler-32 of `A` then `B` from those of `A` and of `B` (`len_b` bytes), as zlib's
/// `adler32_combine` computes it: the second sum gains `len_b` times the first part's first sum.
fn adler32_combine(a: u32, b: u32, len_b: usize) -> u32 {
    const BASE: u64 = 65521;
    let rem = len_b as u64 % BASE;
    let (a1, a2) = ((a & 0xffff) as u64, (a >> 16) as u64);
    let (b1, b2) = ((b & 0xffff) as u64, (b >> 16) as u64);
    let sum1 = (a1 + b1 + BASE - 1) % BASE;
    let sum2 = (rem * a1 % BASE + a2 + b2 + BASE - rem) % BASE;
    (sum2 << 16 | sum1) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xorshift(s: &mut u64) -> u64 {
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        *s
    }

    /// Data of a few kinds: noise, a small alphabet, runs with rare changes, copies of recent
    /// bytes (long matches), and filtered-photo-like residuals.
    fn data(kind: u64, n: usize, s: &mut u64) -> Vec<u8> {
        let mut d = vec![0u8; n];
        for i in 0..n {
            d[i] = match kind % 5 {
                0 => xorshift(s) as u8,
                1 => b'a' + (xorshift(s) % 4) as u8,
                2 => ((i / 7) % 251) as u8 ^ xorshift(s).is_multiple_of(16) as u8,
                3 if i > 300 && !xorshift(s).is_multiple_of(3) => {
                    d[i - 1 - (xorshift(s) % 280) as usize]
                }
                3 => xorshift(s) as u8,
                _ => ((xorshift(s) % 25) as i32 - 12) as u8,
            };
        }
        d
    }

    /// `realign` moves the bits from any bit on to the start of a byte, behind a zlib header
    /// (deflate, 32 KiB window, valid check bits), with 8 zero bytes after.
    #[test]
    fn realign_moves_every_bit() {
        let mut s = 0x1234_5678_9abc_def1u64;
        let z: Vec<u8> = (0..77).map(|_| xorshift(&mut s) as u8).collect();
        let bit_of = |d: &[u8], i: usize| d[i / 8] >> (i % 8) & 1;
        for from in 0..z.len() * 8 {
            let r = realign(&z, from);
            assert!(zlib_header(&r).is_some(), "{from}: a zlib header");
            let n = z.len() * 8 - from;
            for i in 0..n {
                assert_eq!(
                    bit_of(&r[2..], i),
                    bit_of(&z, from + i),
                    "bit {i} from {from}"
                );
            }
            assert!(
                r[2 + n.div_ceil(8)..].iter().all(|&b| b == 0),
                "{from}: zeros after"
            );
            assert!(r.len() >= 2 + n.div_ceil(8) + 8, "{from}: 8 bytes after");
        }
    }

    /// [`split_with`] into one buffer: the output and whether the second part ran.
    fn split_to_vec(policy: Policy, z: &[u8], n: usize) -> Option<(Vec<u8>, bool)> {
        let out = std::sync::Mutex::new(vec![0u8; n]);
        let second_ran = std::sync::atomic::AtomicBool::new(false);
        let put = |at: usize, b: &[u8]| out.lock().unwrap()[at..at + b.len()].copy_from_slice(b);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        pool.install(|| {
            split_with(
                policy,
                z,
                n,
                MIN_SPLIT_BYTES,
                |part| {
                    put(0, part);
                    Some(((), ()))
                },
                |_, _| {},
                |_, o0, rest| {
                    put(o0, rest);
                    second_ran.store(true, Ordering::Relaxed);
                    Some(())
                },
            )
        })?;
        Some((out.into_inner().unwrap(), second_ran.into_inner()))
    }

    /// Whether the stream `z` splits at bit `from`, found by inflating it from the start: a
    /// non-final dynamic block starts at or after `from` (where the search can start the second
    /// part), and no stored block follows it (a stored block's contents start at a byte
    /// boundary, so the rest cannot be moved to a byte boundary for fdeflate: those streams are
    /// refused).
    fn splittable(z: &[u8], from: usize, n: usize) -> bool {
        let mut inf = Inflater::new(z, 16);
        let mut out = vec![0u8; n];
        let (mut o, mut dynamic, mut stored) = (0, false, false);
        loop {
            let at = inf.bits.bitpos();
            let head = bits16(z, at);
            if dynamic {
                stored |= head & 6 == 0;
            }
            dynamic |= at >= from && head & 7 == 4;
            if inf.block(&mut out, &mut o).expect("a valid stream") {
                return dynamic && !stored;
            }
        }
    }

    /// Streams made by miniz_oxide at every level from every kind of data inflate to the same
    /// bytes as the input, and the split is taken exactly when [`splittable`] says it can be
    /// (not at level 0 or on noise, which give stored blocks, nor when the last block is the
    /// first to start past the split point).
    #[test]
    fn split_inflate_equals_input() {
        let mut s = 0x2545_f491_4f6c_dd1du64;
        let (mut split, mut can) = (0, 0);
        for case in 0..40u64 {
            let n = 200_000 + (xorshift(&mut s) % 500_000) as usize;
            let d = data(case, n, &mut s);
            let level = (case % 10) as u8;
            let z = miniz_oxide::deflate::compress_to_vec_zlib(&d, level);
            // inflated alone: the same bytes
            if z.len() >= MIN_SPLIT_BYTES {
                let (out, second) = split_to_vec(Policy::Alone, &z, n).expect("inflated alone");
                assert!(out == d, "case {case}: level {level}, alone: other bytes");
                assert!(
                    !second,
                    "case {case}: level {level}, alone: the second part ran"
                );
            }
            let expect = z.len() >= MIN_SPLIT_BYTES
                && splittable(&z, (2 + ((z.len() - 2) as f64 * SPLIT) as usize) * 8, n);
            can += expect as usize;
            match split_to_vec(Policy::Wait, &z, n) {
                Some((out, second)) => {
                    assert!(
                        out == d,
                        "case {case}: level {level}, {n} bytes: wrong output"
                    );
                    assert_eq!(
                        second, expect,
                        "case {case}: level {level}, {n} bytes: split taken / expected"
                    );
                    split += second as usize;
                }
                // incompressible data and level 0 give stored blocks: no header to find, or a
                // false one in the stored bytes that fails later
                None => assert!(
                    z.len() < MIN_SPLIT_BYTES || level == 0 || z.len() * 100 >= n * 99,
                    "case {case}: level {level}, {n} bytes, {} compressed: not split",
                    z.len()
                ),
            }
            // another length is refused
            assert!(split_to_vec(Policy::Wait, &z, n + 1).is_none());
            assert!(split_to_vec(Policy::Alone, &z, n + 1).is_none());
        }
        assert_eq!(split, can, "{split} of 40 streams split, {can} could");
        assert!(split >= 15, "only {split} of 40 streams were split");
    }

    /// Fixed-Huffman blocks decode on the second thread's inflater (found by the `split_inflate`
    /// fuzz target: its fixed distance table was built from 30 lengths, an incomplete code
    /// `build` refuses, so the first fixed block after a split point panicked), and the fixed
    /// code's invalid symbols (literal/length 286 and 287, distance 30 and 31) are refused
    /// rather than taken for the end of the block.
    #[test]
    fn fixed_blocks_decode_and_their_invalid_symbols_are_refused() {
        // BFINAL, BTYPE 01, then codes (value, bits) written MSB first, then zeros (the 7-bit
        // code 0 is the end of the block)
        let fixed = |codes: &[(u32, u32)]| {
            let mut bits: Vec<u32> = vec![1, 1, 0];
            for &(c, n) in codes {
                bits.extend((0..n).rev().map(|i| c >> i & 1));
            }
            bits.extend([0u32; 7 + 64]);
            let mut z = vec![0x78, 0x01];
            z.extend(bits.chunks(8).map(|c| {
                c.iter()
                    .enumerate()
                    .fold(0u8, |b, (i, &v)| b | (v as u8) << i)
            }));
            z
        };
        let lit_a = (0x30 + 0x61, 8);
        let len3 = (1, 7); // length symbol 257: 3 bytes, no extra bits
        let decode = |z: &[u8]| {
            let (mut out, mut o) = (vec![0u8; 64], 0);
            Inflater::new(z, 16)
                .block(&mut out, &mut o)
                .map(|fin| (fin, out[..o].to_vec()))
        };
        // 'a', then 3 bytes from 1 back (distance code 0)
        let ok = decode(&fixed(&[lit_a, len3, (0, 5)])).expect("a valid fixed block");
        assert_eq!(ok, (true, b"aaaa".to_vec()));
        for (what, codes) in [
            ("literal/length 286", vec![lit_a, (0b1100_0110, 8)]),
            ("literal/length 287", vec![lit_a, (0b1100_0111, 8)]),
            ("distance 30", vec![lit_a, len3, (30, 5)]),
            ("distance 31", vec![lit_a, len3, (31, 5)]),
        ] {
            assert!(decode(&fixed(&codes)).is_err(), "{what}: not refused");
        }
    }

    /// The combined checksum is the checksum of the concatenation, at every split point.
    #[test]
    fn adler32_combine_is_concatenation() {
        let mut s = 7u64;
        let d: Vec<u8> = (0..200_000).map(|_| xorshift(&mut s) as u8).collect();
        let adler = |b: &[u8]| {
            let mut a = simd_adler32::Adler32::new();
            a.write(b);
            a.finish()
        };
        for cut in [0, 1, 5552, 65521, 65522, 100_000, 199_999, 200_000] {
            let (x, y) = d.split_at(cut);
            assert_eq!(
                adler32_combine(adler(x), adler(y), y.len()),
                adler(&d),
                "cut {cut}"
            );
        }
    }

    /// A corrupted stream gives `None` (the caller's one-thread decode then reports it), never
    /// other bytes: a flipped bit that still decodes changes the output, which the Adler-32 then
    /// rejects; one in the padding before the Adler-32 changes nothing.
    #[test]
    fn corrupt_streams_are_refused() {
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let d = data(4, 600_000, &mut s);
        let z = miniz_oxide::deflate::compress_to_vec_zlib(&d, 6);
        let (out, second) = split_to_vec(Policy::Wait, &z, d.len()).unwrap();
        assert!(out == d && second, "the intact stream splits");
        let mut refused = 0;
        for _ in 0..60 {
            let mut bad = z.clone();
            let at = 2 + (xorshift(&mut s) as usize) % (bad.len() - 2);
            bad[at] ^= 1 << (xorshift(&mut s) % 8);
            match split_to_vec(Policy::Wait, &bad, d.len()) {
                None => refused += 1,
                Some((out, _)) => assert!(out == d, "a bit flipped at byte {at} gave other bytes"),
            }
        }
        assert!(
            refused >= 55,
            "only {refused} of 60 corrupted streams refused"
        );
        // truncated
        assert!(split_to_vec(Policy::Wait, &z[..z.len() - 9], d.len()).is_none());
        assert!(split_to_vec(Policy::Alone, &z[..z.len() - 9], d.len()).is_none());
    }
}
