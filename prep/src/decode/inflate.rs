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
//!
//! This file runs the two parts and checks them; the second thread's inflater is in
//! `inflate/inflater.rs` (its tables in `inflate/huffman.rs`), its search for a block header in
//! `inflate/search.rs`.

use std::sync::atomic::{AtomicU64, Ordering};

mod huffman;
mod inflater;
mod search;

use inflater::{Bits, Inflater};
use search::{next_candidate, plausible_next};

/// Compressed streams shorter than this are inflated on one thread (the split saves less than
/// it costs).
pub(crate) const MIN_SPLIT_BYTES: usize = 128 * 1024;

/// Where in the compressed data the second thread starts looking, as a share of it. The first
/// thread starts at once and writes its rows' bands when its part is done; the second first has
/// to be taken up by another thread and find a block header. Whole PNG preps of the bench's
/// 640x480 image in alternating loops (medians): 0.50 2.16 ms, 0.55 2.00-2.02, 0.60 2.00, 0.65
/// 2.13 (one thread's inflate and the streamed path: 2.20-2.27).
const SPLIT: f64 = 0.55;

const WINDOW: usize = 32768;

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
    use super::search::bits16;
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
