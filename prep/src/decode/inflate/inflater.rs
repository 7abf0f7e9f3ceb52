//! The second thread's own inflater (RFC 1951): a little-endian bit reader over the whole
//! compressed buffer and a block decoder (stored, fixed and dynamic blocks) into bytes, or into
//! 16-bit symbols where a back-reference into the unknown output before its start becomes a
//! window marker.

use super::WINDOW;
use super::huffman::{
    CL_BITS, CL_TABLE, DIST_BITS, DIST_TABLE, INVALID, K_BASE, K_EOB, K_LIT, K_SUB, LIT_BITS,
    LIT_TABLE, build, dist_sym, entry, kind, lit_sym, pair_literals,
};

/// Order of the code length code lengths in a dynamic block header.
const CL_ORDER: [usize; 19] = [
    16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15,
];

/// A stream (or a false header) this decoder rejects.
#[derive(Debug)]
pub(super) struct Bad;

pub(super) type R<T> = Result<T, Bad>;

/// Little-endian bit reader over the whole compressed buffer.
#[derive(Clone, Copy)]
pub(super) struct Bits<'a> {
    d: &'a [u8],
    pos: usize,
    /// Zero bytes fed past the end.
    over: usize,
    buf: u64,
    n: u32,
}

impl<'a> Bits<'a> {
    pub(super) fn at(d: &'a [u8], bit: usize) -> Self {
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

    pub(super) fn bitpos(&self) -> usize {
        (self.pos + self.over) * 8 - self.n as usize
    }

    fn overrun(&self) -> bool {
        self.bitpos() > self.d.len() * 8
    }
}

/// Output symbols: bytes, or 16-bit symbols (bytes, and window markers `256 + index` for bytes
/// before the start that back-references copy).
pub(super) trait Sym: Copy + Send {
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
pub(super) struct Inflater<'a> {
    pub(super) bits: Bits<'a>,
    lit: Vec<u32>,
    dist: Vec<u32>,
    cl: Vec<u32>,
}

impl<'a> Inflater<'a> {
    pub(super) fn new(d: &'a [u8], bit: usize) -> Self {
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
    pub(super) fn block<T: Sym>(&mut self, out: &mut [T], o: &mut usize) -> R<bool> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
