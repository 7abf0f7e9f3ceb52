//! One task of a panel product ([`group_task`]): its rows of the output columns of a group of
//! panels, blocked for L1 and L2, over the panel values as stored ([`Src`]), on either register
//! tile ([`Kernel`]: one loop, compiled once for AVX-512F and once for AVX2 + FMA).

#[cfg(target_arch = "x86_64")]
use super::tile::TileArgs;
#[cfg(target_arch = "x86_64")]
use super::{KC, KS, MC, MR, NP, RB, Tile};

/// What differs between the tiles inside a task: the widening of a bf16 sub-chunk and the
/// register tile. Implemented by [`Avx512`] and [`Avx2`](super::avx2::Avx2).
#[cfg(target_arch = "x86_64")]
pub(super) trait Kernel {
    /// Panel rows stored as bf16 pairs, as f32 in column order ([`super::bf16::widen`]).
    ///
    /// # Safety
    /// As [`super::bf16::widen`]; the CPU has the kernel's instructions.
    unsafe fn widen(src: &[u16], out: *mut f32);

    /// One R x 64 tile over one sub-chunk ([`super::tile::tile`]).
    ///
    /// # Safety
    /// As [`super::tile::tile`]; the CPU has the kernel's instructions.
    unsafe fn tile<const R: usize>(a: TileArgs<'_>);
}

/// The AVX-512F tile (`tile`) and widening (`bf16`).
#[cfg(target_arch = "x86_64")]
pub(super) struct Avx512;

#[cfg(target_arch = "x86_64")]
impl Kernel for Avx512 {
    #[inline(always)]
    unsafe fn widen(src: &[u16], out: *mut f32) {
        // SAFETY: the caller's contract.
        unsafe { super::bf16::widen(src, out) }
    }

    #[inline(always)]
    unsafe fn tile<const R: usize>(a: TileArgs<'_>) {
        // SAFETY: the caller's contract.
        unsafe { super::tile::tile::<R>(a) }
    }
}

/// The panel values a task reads.
#[derive(Clone, Copy)]
pub(super) enum Src<'a> {
    F32(&'a [f32]),
    Bf16(&'a [u16]),
}

impl Src<'_> {
    /// (first byte, bytes per value, values)
    pub(super) fn raw(self) -> (*const i8, usize, usize) {
        match self {
            Src::F32(d) => (d.as_ptr() as *const i8, 4, d.len()),
            Src::Bf16(d) => (d.as_ptr() as *const i8, 2, d.len()),
        }
    }
}

/// Values on cache-line boundaries: a row block's partial sums between sub-chunks, a widened
/// sub-chunk.
#[repr(align(64))]
struct Aligned<const N: usize>([f32; N]);

/// One task's operands: packed x, the panel values, the bias, y and the residual (null when
/// none), `(n, k)`, the task's panels and rows.
#[cfg(target_arch = "x86_64")]
pub(super) struct Task<'a> {
    pub(super) x: &'a [f32],
    pub(super) data: Src<'a>,
    pub(super) bias: Option<&'a [f32]>,
    pub(super) y: *mut f32,
    pub(super) resid: *const f32,
    pub(super) nk: (usize, usize),
    pub(super) panels: std::ops::Range<usize>,
    pub(super) rows: std::ops::Range<usize>,
}

/// [`group_body`] on `tile`.
///
/// # Safety
/// As [`group_body`], and the CPU has the tile's instructions ([`Tile::runs_here`]).
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn group_task(tile: Tile, t: Task<'_>) {
    // SAFETY: the caller's contract.
    unsafe {
        match tile {
            Tile::Avx512 => group_avx512(t),
            Tile::Avx2 => group_avx2(t),
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn group_avx512(t: Task<'_>) {
    // SAFETY: the caller's contract (AVX-512F is there).
    unsafe { group_body::<Avx512>(t) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn group_avx2(t: Task<'_>) {
    // SAFETY: the caller's contract (AVX2 and FMA are there).
    unsafe { group_body::<super::avx2::Avx2>(t) }
}

/// Rows `rows` of the output columns of panels `panels` (64 columns each, clipped to n).
///
/// Loop order: per summation chunk of [`KC`] inputs; per block of [`MC`] rows (x's rows of the
/// chunk stay in L2 while every panel of the group uses them; the group's panel chunks, 64 KiB
/// each, stay in L2 across the row blocks); per panel; per block of [`RB`] rows; per sub-chunk
/// of [`KS`] inputs (16 KiB of panel, kept in L1 while every row tile of the block runs over
/// it). A tile's partial sums wait in `scratch` between sub-chunks and the chain continues from
/// them, so each output still sums its chunk in one fused multiply-add chain from zero, in
/// order, then adds it to the running value: the bits do not depend on the blocking.
///
/// Inlined into [`group_avx512`] and [`group_avx2`], so that each compiles it (and inlines the
/// kernel's tile into it) with its own instructions.
///
/// # Safety
/// Rows `rows` exist in x (packed) and y, the panels in `data`; no other thread writes this
/// task's part of y meanwhile; `resid` null or y's shape; the CPU has `K`'s instructions.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn group_body<K: Kernel>(t: Task<'_>) {
    let Task {
        x,
        data,
        bias,
        y,
        resid,
        nk: (n, k),
        panels,
        rows,
    } = t;
    // All left unwritten here: a tile reads its partial sums only after writing them (`start`
    // is set on a chunk's first sub-chunk), and the tiles read widened values only after they
    // were written. Zeroing them on every call (34 KiB then, one widened buffer) took 0.7% of
    // an 8x8 forward (5000+ calls).
    let mut scratch = std::mem::MaybeUninit::<Aligned<{ RB * NP }>>::uninit();
    let scratch = scratch.as_mut_ptr() as *mut f32;
    // Two bf16 sub-chunks widened to f32, in L1: the one the row block's tiles run over
    // (buffer `cur`), and the one they widen on the way, a block of 32 values a step, when it
    // is the sub-chunk this task runs next (its position and length in `ahead`). Widened in a
    // pass of its own instead, before the tiles, with the FMA units idle meanwhile, the
    // sub-chunks took ~4% of a 64-row product and ~14% of a 16-row one (the merger's) on one
    // thread. With the second buffer, the partial sums and a row block's x, the working set
    // (~66 KiB at 64 rows) is past the 48 KiB L1d here; measured faster all the same.
    let mut wide = std::mem::MaybeUninit::<[Aligned<{ KS * NP }>; 2]>::uninit();
    let wide = wide.as_mut_ptr() as *mut f32;
    let wide_at = |b: usize| wide.wrapping_add(b * KS * NP);
    let mut ahead: Option<(usize, usize)> = None;
    let mut cur = 0;
    let mut bias_pad = [0.0f32; NP];
    let (base, esize, len) = data.raw();
    let chunk_at = |p: usize, kc0: usize| p * k * NP + kc0 * NP;
    let mut kc0 = 0;
    while kc0 < k {
        let kc1 = (kc0 + KC).min(k);
        let first = kc0 == 0;
        let mut a0 = rows.start;
        while a0 < rows.end {
            let a1 = (a0 + MC).min(rows.end);
            for p in panels.clone() {
                let j0 = p * NP;
                let width = NP.min(n - j0);
                if first {
                    bias_pad = [0.0; NP];
                    if let Some(b) = bias {
                        bias_pad[..width].copy_from_slice(&b[j0..j0 + width]);
                    }
                }
                // While the first row block runs over a panel chunk, the one this task needs
                // next (the next panel's same chunk, else the first panel's next chunk, else
                // what follows in memory, most likely where this thread goes next) is
                // prefetched into L2, one line per step of the first tile runs: the stream from
                // memory overlaps the arithmetic on the chunk already in cache. (Measured on a
                // 64-row product streaming its weight from memory: spreading the same
                // prefetches evenly over the chunk's runs took it from 4.2 to 9.9 ms, two lines
                // a step or a chunk further ahead were no better, none at all 5.9-6.3 ms.)
                let next = if a0 != rows.start {
                    None
                } else if p + 1 < panels.end {
                    Some(chunk_at(p + 1, kc0))
                } else if kc1 < k {
                    Some(chunk_at(panels.start, kc1))
                } else {
                    Some(chunk_at(p, kc1))
                };
                // in bytes from `base`
                let mut pf_at = next.unwrap_or(len) * esize;
                let pf_end = (pf_at + (kc1 - kc0) * NP * esize).min(len * esize);
                let panel = chunk_at(p, kc0);
                let mut b0 = a0;
                while b0 < a1 {
                    let b1 = (b0 + RB).min(a1);
                    let mut s0 = kc0;
                    while s0 < kc1 {
                        let s1 = (s0 + KS).min(kc1);
                        let at = panel + (s0 - kc0) * NP;
                        let sub_len = (s1 - s0) * NP;
                        let sub = match data {
                            Src::F32(d) => d[at..at + sub_len].as_ptr(),
                            Src::Bf16(d) => {
                                if ahead.take() == Some((at, sub_len)) {
                                    cur = 1 - cur;
                                } else {
                                    // SAFETY: K's instructions are there; each buffer holds
                                    // KS * NP values, s1 - s0 <= KS.
                                    unsafe { K::widen(&d[at..at + sub_len], wide_at(cur)) };
                                }
                                wide_at(cur) as *const f32
                            }
                        };
                        // What this task runs next, if it is the following sub-chunk of the
                        // panel: the next one of this chunk, or (one panel, one row block) the
                        // first of the next chunk.
                        let next_len = NP
                            * if s1 < kc1 {
                                KS.min(kc1 - s1)
                            } else if panels.len() == 1 && rows.len() <= RB && s1 < k {
                                KS.min(k - s1)
                            } else {
                                0
                            };
                        let (wsrc, wdst, blocks) = match data {
                            Src::Bf16(d) if next_len > 0 => {
                                let next = chunk_at(p, s1);
                                ahead = Some((next, next_len));
                                (
                                    d[next..next + next_len].as_ptr(),
                                    wide_at(1 - cur),
                                    next_len / 32,
                                )
                            }
                            _ => (std::ptr::null(), std::ptr::null_mut(), 0),
                        };
                        // blocks of 32 values to widen per tile, spread evenly
                        let per_tile = blocks.div_ceil((b1 - b0).div_ceil(MR));
                        let mut widened = 0;
                        let mut r = b0;
                        while r < b1 {
                            let rows = MR.min(b1 - r);
                            let lines = (s1 - s0).min(pf_end.saturating_sub(pf_at) / 64);
                            let pf = (lines > 0).then(|| {
                                pf_at += lines * 64;
                                pf_at - lines * 64
                            });
                            let wn = per_tile.min(blocks - widened);
                            // SAFETY (all arms): rows r..r+rows exist in x and y; the panel
                            // sub-chunk holds (s1 - s0) * NP values from its pointer; scratch
                            // holds RB rows of NP; the prefetched lines stay inside `data`
                            // (checked above) and cannot fault anyway; the blocks to widen lie
                            // inside the next sub-chunk and the other buffer (blocks * 32 =
                            // next_len <= KS * NP); K's instructions are there.
                            unsafe {
                                let a = TileArgs {
                                    widen_from: wsrc.wrapping_add(widened * 32),
                                    widen_to: wdst.wrapping_add(widened * 32),
                                    widen_blocks: wn,
                                    x: x.as_ptr().add(r * k),
                                    panel: sub,
                                    kk: s0..s1,
                                    y: y.add(r * n + j0),
                                    ldy: n,
                                    width,
                                    bias: first.then_some(&bias_pad),
                                    part: scratch.add((r - b0) * NP),
                                    start: s0 == kc0,
                                    end: s1 == kc1,
                                    resid: if kc1 == k && !resid.is_null() {
                                        resid.add(r * n + j0)
                                    } else {
                                        std::ptr::null()
                                    },
                                    pf: pf.map_or(std::ptr::null(), |o| base.add(o)),
                                    pf_lines: lines,
                                };
                                match rows {
                                    6 => K::tile::<6>(a),
                                    5 => K::tile::<5>(a),
                                    4 => K::tile::<4>(a),
                                    3 => K::tile::<3>(a),
                                    2 => K::tile::<2>(a),
                                    _ => K::tile::<1>(a),
                                }
                            }
                            widened += wn;
                            r += rows;
                        }
                        s0 = s1;
                    }
                    b0 = b1;
                }
            }
            a0 = a1;
        }
        kc0 = kc1;
    }
}
