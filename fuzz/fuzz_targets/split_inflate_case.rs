//! The two-thread speculative inflate of the PNG decode (`prep/src/decode/inflate.rs`) against
//! miniz_oxide on zlib streams:
//!
//! - mode 0 (first byte even): the rest is taken as a zlib stream as it is;
//! - mode 1 (first byte odd): the rest is a program for a zlib stream built here: a run of
//!   stored, fixed-Huffman and dynamic-Huffman blocks (Huffman codes of fuzzer-chosen shapes up
//!   to 15 bits, code-length runs, literals and back-references up to 32 KiB back), so that block
//!   boundaries, long copies and false headers fall on both sides of the split point; then
//!   optionally one bit flipped, the stream cut short, or a wrong Adler-32.
//!
//! The split runs on streams from 16 bytes on (production: 128 KiB) and with the first part
//! both waiting for the second part's search and racing it. Invariant: when it accepts a stream,
//! miniz_oxide inflates the same stream to exactly those bytes (a false start found by the
//! search must never be accepted); when the reference inflates to `n` bytes, asking the split for
//! another length is refused.
//!
//! The check itself; `split_inflate.rs` is the cargo-fuzz target calling it, and
//! `prep/tests/fuzz_regressions.rs` replays the committed findings and seeds through it.

use glm5v_prep::decode::fuzz_hooks::split_inflate;
use std::sync::OnceLock;

fn pool() -> &'static rayon::ThreadPool {
    static POOL: OnceLock<rayon::ThreadPool> = OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .expect("a thread pool")
    })
}

/// Bytes of the fuzzer's input, then zeros.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    fn empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// LSB-first bit writer.
#[derive(Default)]
struct BitWriter {
    out: Vec<u8>,
    acc: u64,
    n: u32,
}

impl BitWriter {
    fn put(&mut self, v: u32, bits: u32) {
        debug_assert!(bits <= 32);
        self.acc |= ((v as u64) & ((1u64 << bits) - 1)) << self.n;
        self.n += bits;
        while self.n >= 8 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.n -= 8;
        }
    }
    /// A Huffman code `code` of `len` bits (written MSB first, as DEFLATE sends codes).
    fn code(&mut self, code: u32, len: u32) {
        let rev = code.reverse_bits() >> (32 - len);
        self.put(rev, len);
    }
    fn align(&mut self) {
        if self.n > 0 {
            self.put(0, 8 - self.n);
        }
    }
    fn finish(mut self) -> Vec<u8> {
        self.align();
        self.out
    }
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
const CL_ORDER: [usize; 19] = [
    16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15,
];

/// (symbol, extra bits, extra value) of a length or a distance.
fn split_value(v: usize, base: &[u16], extra: &[u8]) -> (usize, u32, u32) {
    let i = base
        .iter()
        .rposition(|&b| b as usize <= v)
        .expect("in range");
    (i, extra[i] as u32, (v - base[i] as usize) as u32)
}

/// Output the stream builder stops adding tokens at.
const MAX_OUT: usize = 384 << 10;

#[derive(Clone, Copy)]
enum Token {
    Lit(u8),
    Copy { len: usize, dist: usize },
}

/// Code lengths of a complete prefix code for `n >= 2` symbols, at most `max` bits: a binary
/// tree grown by splitting leaves the input picks (so the fuzzer chooses flat or skewed codes),
/// its leaf depths dealt to the symbols in an order the input picks.
fn code_lengths(inp: &mut Input<'_>, n: usize, max: u8) -> Vec<u8> {
    let mut leaves = vec![0u8];
    while leaves.len() < n {
        let open: Vec<usize> = (0..leaves.len()).filter(|&i| leaves[i] < max).collect();
        let i = open[inp.u8() as usize % open.len()];
        leaves[i] += 1;
        leaves.push(leaves[i]);
    }
    let r = inp.u8() as usize;
    leaves.rotate_left(r % n);
    leaves
}

/// Canonical codes for `lens` (RFC 1951 3.2.2).
fn canonical(lens: &[u8]) -> Vec<u32> {
    let mut count = [0u32; 16];
    for &l in lens {
        count[l as usize] += 1;
    }
    count[0] = 0;
    let mut next = [0u32; 16];
    let mut code = 0;
    for l in 1..16 {
        code = (code + count[l - 1]) << 1;
        next[l] = code;
    }
    lens.iter()
        .map(|&l| {
            if l == 0 {
                0
            } else {
                let c = next[l as usize];
                next[l as usize] += 1;
                c
            }
        })
        .collect()
}

/// Lengths for `used` symbols of an alphabet of `size` (every other symbol 0), plus sometimes a
/// few unused symbols with lengths too.
fn lengths_for(inp: &mut Input<'_>, used: &[bool], size: usize, max: u8) -> Vec<u8> {
    let mut syms: Vec<usize> = (0..size).filter(|&s| used[s]).collect();
    let extra = inp.u8() % 4;
    for _ in 0..extra {
        let s = inp.u16() as usize % size;
        if !syms.contains(&s) {
            syms.push(s);
        }
    }
    while syms.len() < 2 {
        let s = (0..size).find(|s| !syms.contains(s)).expect("room");
        syms.push(s);
    }
    syms.sort_unstable();
    let l = code_lengths(inp, syms.len(), max);
    let mut lens = vec![0u8; size];
    for (&s, &l) in syms.iter().zip(&l) {
        lens[s] = l;
    }
    lens
}

/// One Huffman block's tokens from the input: literals and copies, `out_pos` bytes already out.
fn tokens(inp: &mut Input<'_>, out_pos: &mut usize, data: &mut Vec<u8>) -> Vec<Token> {
    let n = 1 + inp.u16() as usize % 1024;
    let mut t = Vec::with_capacity(n);
    for _ in 0..n {
        // a few hundred KiB of output at most: enough for the second part to leave the 32 KiB
        // window behind, few enough for hundreds of executions a second
        if *out_pos >= MAX_OUT {
            break;
        }
        let tag = inp.u8();
        if tag < 100 || *out_pos == 0 {
            let b = inp.u8();
            t.push(Token::Lit(b));
            data.push(b);
            *out_pos += 1;
        } else {
            let len = match tag % 4 {
                0 => 258,
                _ => 3 + inp.u8() as usize,
            };
            let max_d = (*out_pos).min(32768);
            let dist = match tag % 8 {
                // the farthest back: across the split point when it is near
                1 => max_d,
                2 => 1,
                _ => 1 + inp.u16() as usize % max_d,
            };
            for _ in 0..len {
                let b = data[data.len() - dist];
                data.push(b);
            }
            *out_pos += len;
            t.push(Token::Copy { len, dist });
        }
    }
    t
}

fn put_tokens(w: &mut BitWriter, t: &[Token], lit: &[u8], dist: &[u8]) {
    let (lc, dc) = (canonical(lit), canonical(dist));
    for &tok in t {
        match tok {
            Token::Lit(b) => w.code(lc[b as usize], lit[b as usize] as u32),
            Token::Copy { len, dist: d } => {
                let (s, eb, ev) = split_value(len, &LEN_BASE, &LEN_EXTRA);
                w.code(lc[257 + s], lit[257 + s] as u32);
                w.put(ev, eb);
                let (s, eb, ev) = split_value(d, &DIST_BASE, &DIST_EXTRA);
                w.code(dc[s], dist[s] as u32);
                w.put(ev, eb);
            }
        }
    }
    w.code(lc[256], lit[256] as u32);
}

/// A zlib stream from the program in `inp` and the bytes it inflates to.
fn build(inp: &mut Input<'_>) -> (Vec<u8>, Vec<u8>) {
    let mut w = BitWriter::default();
    w.put(0x78, 8);
    w.put(0x01, 8);
    let mut data = Vec::new();
    let mut pos = 0usize;
    let blocks = 1 + inp.u8() as usize % 12;
    for b in 0..blocks {
        let fin = b + 1 == blocks || inp.empty();
        w.put(fin as u32, 1);
        match inp.u8() % 3 {
            0 => {
                w.put(0, 2);
                w.align();
                let len = inp.u16() as usize % 4096;
                w.put(len as u32, 16);
                w.put(!len as u32 & 0xffff, 16);
                for _ in 0..len {
                    let v = inp.u8();
                    w.put(v as u32, 8);
                    data.push(v);
                }
                pos += len;
            }
            1 => {
                w.put(1, 2);
                let t = tokens(inp, &mut pos, &mut data);
                let mut lit = [0u8; 288];
                lit[..144].fill(8);
                lit[144..256].fill(9);
                lit[256..280].fill(7);
                lit[280..].fill(8);
                put_tokens(&mut w, &t, &lit, &[5u8; 30]);
            }
            _ => {
                w.put(2, 2);
                let t = tokens(inp, &mut pos, &mut data);
                let (mut lu, mut du) = (vec![false; 286], vec![false; 30]);
                lu[256] = true;
                for &tok in &t {
                    match tok {
                        Token::Lit(b) => lu[b as usize] = true,
                        Token::Copy { len, dist } => {
                            lu[257 + split_value(len, &LEN_BASE, &LEN_EXTRA).0] = true;
                            du[split_value(dist, &DIST_BASE, &DIST_EXTRA).0] = true;
                        }
                    }
                }
                let lit = lengths_for(inp, &lu, 286, 15);
                let dist = lengths_for(inp, &du, 30, 15);
                let hlit = 1 + lit.iter().rposition(|&l| l > 0).expect("a code");
                let hlit = hlit.max(257);
                let hdist = 1 + dist.iter().rposition(|&l| l > 0).expect("a code");
                // the code lengths, with runs (16: repeat the last, 17/18: zeros) when asked
                let all: Vec<u8> = lit[..hlit].iter().chain(&dist[..hdist]).copied().collect();
                let runs = inp.u8() & 1 == 1;
                let mut cl: Vec<(usize, u32, u32)> = Vec::new(); // (symbol, extra bits, value)
                let mut i = 0;
                while i < all.len() {
                    let v = all[i];
                    let mut r = 1;
                    while i + r < all.len() && all[i + r] == v {
                        r += 1;
                    }
                    if runs && v == 0 && r >= 11 {
                        let k = r.min(138);
                        cl.push((18, 7, (k - 11) as u32));
                        i += k;
                    } else if runs && v == 0 && r >= 3 {
                        cl.push((17, 3, (r - 3) as u32));
                        i += r;
                    } else if runs && i > 0 && all[i - 1] == v && r >= 3 {
                        let k = r.min(6);
                        cl.push((16, 2, (k - 3) as u32));
                        i += k;
                    } else {
                        cl.push((v as usize, 0, 0));
                        i += 1;
                    }
                }
                let mut clu = [false; 19];
                for &(s, _, _) in &cl {
                    clu[s] = true;
                }
                let cll = lengths_for(inp, &clu, 19, 7);
                let hclen =
                    (1 + CL_ORDER.iter().rposition(|&s| cll[s] > 0).expect("a code")).max(4);
                w.put((hlit - 257) as u32, 5);
                w.put((hdist - 1) as u32, 5);
                w.put((hclen - 4) as u32, 4);
                for &s in &CL_ORDER[..hclen] {
                    w.put(cll[s] as u32, 3);
                }
                let clc = canonical(&cll);
                for &(s, eb, ev) in &cl {
                    w.code(clc[s], cll[s] as u32);
                    w.put(ev, eb);
                }
                put_tokens(&mut w, &t, &lit, &dist);
            }
        }
        if fin {
            break;
        }
    }
    let mut z = w.finish();
    let mut a = simd_adler32::Adler32::new();
    a.write(&data);
    z.extend_from_slice(&a.finish().to_be_bytes());
    (z, data)
}

/// miniz_oxide's inflate of `z`, up to 4 MiB (more: `Err`, the input is skipped).
fn reference(z: &[u8]) -> Result<Option<Vec<u8>>, ()> {
    use miniz_oxide::inflate::TINFLStatus;
    match miniz_oxide::inflate::decompress_to_vec_zlib_with_limit(z, 4 << 20) {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.status == TINFLStatus::HasMoreOutput => Err(()),
        Err(_) => Ok(None),
    }
}

/// One execution of the `split_inflate` fuzz target (also replayed by `prep/tests/fuzz_regressions.rs`):
/// panics when an invariant fails.
pub fn check(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let (z, built) = if mode & 1 == 0 {
        (rest.to_vec(), None)
    } else {
        let mut inp = Input(rest);
        let (mut z, d) = build(&mut inp);
        let Ok(built) = reference(&z) else {
            return;
        };
        // the built stream is valid: the reference must agree with the builder
        assert!(
            built.as_deref() == Some(&d[..]),
            "the stream builder is wrong"
        );
        match inp.u8() % 8 {
            1 if z.len() > 2 => {
                let at = 2 + inp.u16() as usize % (z.len() - 2);
                z[at] ^= 1 << (inp.u8() % 8);
            }
            2 => z.truncate(z.len() - 1 - inp.u16() as usize % z.len()),
            3 => {
                let n = z.len();
                z[n - 1] ^= 1;
            }
            _ => {}
        }
        (z, Some(d))
    };
    let Ok(want) = reference(&z) else {
        return;
    };
    let n = match &want {
        Some(w) => w.len(),
        None => built.as_ref().map_or(rest.len() * 4, Vec::len),
    };
    // racing (production's policy) on one input in four: it mostly ends as a one-thread inflate
    let policies: &[bool] = if mode & 6 == 0 {
        &[true, false]
    } else {
        &[true]
    };
    for &wait in policies {
        let got = pool().install(|| split_inflate(&z, n, wait, 16));
        if let Some((out, second)) = got {
            match &want {
                Some(w) => assert!(
                    &out == w,
                    "wait {wait}: the split gave other bytes (second part ran: {second})"
                ),
                None => panic!(
                    "wait {wait}: the split accepted a stream miniz_oxide refuses (second part ran: {second})"
                ),
            }
        }
    }
    if want.is_some() && mode & 8 != 0 {
        let other = if mode & 16 == 0 {
            n + 1
        } else {
            n.saturating_sub(1)
        };
        if other != n {
            let got = pool().install(|| split_inflate(&z, other, true, 16));
            assert!(got.is_none(), "a length of {other} accepted for {n} bytes");
        }
    }
}
