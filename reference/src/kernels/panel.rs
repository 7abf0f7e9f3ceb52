//! f32 `Linear` products over a weight repacked once at load (AVX-512): `W` `[n, k]` stored as
//! 64-column panels of its transpose, panel `p` holding `W[64p + c][kk]` at `kk * 64 + c`.
//!
//! Why not the `gemm` crate here: it packs the weight on every call (the transpose read through
//! strides), which on this 2-core machine cost 10-30% of a 1024-row product and most of a 64-row
//! one, where the product is a stream over the weight. With the panels in memory the kernel reads
//! each weight once per call in address order and needs no packing: per `kk`, four 16-lane loads
//! of the panel row and one broadcast per input row feed 6 x 4 accumulators (the classic 6 x 64
//! register tile). Cache blocking (see `group_task`): a 16 KiB slice of the panel stays in L1
//! while a block of 72 rows runs over it (their partial sums wait in an L1 scratch), the panel's
//! 64 KiB chunk in L2 across the row blocks, and when x outgrows L2, a block of x rows in L2
//! across a group of panels. Measured with the full geometry on this machine (three A/B pairs
//! each, best-of forwards): an 8x8 image 0.281-0.338 s -> 0.236-0.265 s, a 32x32 image
//! 5.27-6.19 s -> 4.31-5.12 s.
//!
//! Summation, blocked as in packed GEMMs: each output sums the products of a chunk of [`KC`]
//! inputs in order (`kk` ascending, one fused multiply-add each, from zero), then adds the chunk's
//! sum to the running value, which starts at the bias. With one long chain instead (a 10240-input
//! merger row), the full-geometry fixture's worst tap against upstream went from 0.51 to 0.92 of
//! its tolerance.

use ndarray::ArrayView2;
use rayon::prelude::*;

/// Columns per panel (four AVX-512 vectors).
pub const NP: usize = 64;
/// Rows of the register tile.
const MR: usize = 6;
/// `k` per summation block: a panel chunk of `KC * NP * 4` bytes (64 KiB) stays in L2.
pub const KC: usize = 256;
/// `k` per pass of a row block over the chunk: `KS * NP * 4` bytes (16 KiB) stay in L1.
const KS: usize = 64;
/// Rows per block (12 tiles): their partial sums, `RB * NP * 4` bytes (18 KiB), stay in L1 too.
const RB: usize = 72;
/// Rows of x per pass over a group of panels: `MC * KC * 4` bytes (288 KiB) stay in L2.
const MC: usize = 4 * RB;
/// Panels per task at most when x does not fit in L2 (their chunks: 512 KiB of L2).
const GROUP: usize = 8;
/// Inputs up to this size (per task) stay in L2 (2 MiB a core here) across panels anyway.
const X_L2_BYTES: usize = 1 << 20;

/// Whether this CPU runs the panel kernel (AVX-512F).
pub fn available() -> bool {
    super::isa::isa() >= super::isa::Isa::Avx512
}

/// A `Linear` weight `[n, k]` in panel layout (the last panel zero-padded to 64 columns).
#[derive(Debug, Clone)]
pub struct Panels {
    data: Store,
    n: usize,
    k: usize,
}

/// The panel values: f32, or the upper halves of f32 values whose lower halves are all zero
/// (every weight of a bf16 checkpoint), widened back to the same f32 values exactly in the
/// kernel: half the bytes to stream, the same products bit for bit. The bf16 values of a panel
/// row are stored in pairs ([`paired_pos`]), which widen with one instruction per 16 values
/// instead of two.
#[derive(Debug, Clone)]
enum Store {
    F32(PanelBuf<f32>),
    Bf16(PanelBuf<u16>),
}

impl Panels {
    /// Repacks `w` `[n, k]` (any strides); bf16 storage when that is exact for every value
    /// (unless `GLM5V_CPU_PANELS_BF16=0`).
    pub fn pack(w: ArrayView2<f32>) -> Self {
        let short = std::env::var("GLM5V_CPU_PANELS_BF16").as_deref() != Ok("0")
            && w.iter().all(|v| v.to_bits() & 0xffff == 0);
        if short {
            Self::pack_as(w, |v| (v.to_bits() >> 16) as u16, paired_pos, Store::Bf16)
        } else {
            Self::pack_as(w, |v| v, |c| c, Store::F32)
        }
    }

    fn pack_as<T: bytemuck::Pod + Send + Sync>(
        w: ArrayView2<f32>,
        conv: impl Fn(f32) -> T + Sync,
        pos: impl Fn(usize) -> usize + Sync,
        store: impl FnOnce(PanelBuf<T>) -> Store,
    ) -> Self {
        let (n, k) = w.dim();
        let np = n.div_ceil(NP);
        let mut data = PanelBuf::<T>::zeroed(np * k * NP);
        data.as_mut_slice()
            .par_chunks_mut((k * NP).max(1))
            .enumerate()
            .for_each(|(p, panel)| {
                for c in 0..NP.min(n - p * NP) {
                    let row = w.row(p * NP + c);
                    let c = pos(c);
                    for (kk, &v) in row.iter().enumerate() {
                        panel[kk * NP + c] = conv(v);
                    }
                }
            });
        Self {
            data: store(data),
            n,
            k,
        }
    }

    /// Whether the values are stored as bf16 (exactly; see [`Panels::pack`]).
    pub fn is_bf16(&self) -> bool {
        matches!(self.data, Store::Bf16(_))
    }

    /// Output features.
    pub fn rows(&self) -> usize {
        self.n
    }
    /// Input features.
    pub fn cols(&self) -> usize {
        self.k
    }

    /// `y = x · wᵀ + bias` with `x` `[m, k]` (row-major, contiguous), `y` `[m, n]` (overwritten),
    /// parallel over panels ([`super::team::for_each`]: the team's threads inside a forward,
    /// else the current rayon pool).
    ///
    /// # Panics
    /// If the lengths disagree with the shapes or the CPU lacks AVX-512 ([`available`]).
    pub fn linear_into(&self, x: &[f32], m: usize, bias: Option<&[f32]>, y: &mut [f32]) {
        self.linear_impl(x, m, bias, None, y)
    }

    /// [`Self::linear_into`] plus `residual` `[m, n]`: `y = (x · wᵀ + bias) + residual`, the
    /// residual added to each finished output as the last step of the kernel (the same bits as
    /// adding it in a pass of its own, without that pass over y).
    ///
    /// # Panics
    /// As [`Self::linear_into`], and if `residual` is not `m * n` long.
    pub fn linear_add_into(
        &self,
        x: &[f32],
        m: usize,
        bias: Option<&[f32]>,
        residual: &[f32],
        y: &mut [f32],
    ) {
        assert_eq!(residual.len(), m * self.n, "panel linear: residual length");
        self.linear_impl(x, m, bias, Some(residual), y)
    }

    fn linear_impl(
        &self,
        x: &[f32],
        m: usize,
        bias: Option<&[f32]>,
        residual: Option<&[f32]>,
        y: &mut [f32],
    ) {
        let (n, k) = (self.n, self.k);
        assert_eq!(x.len(), m * k, "panel linear: input length");
        assert_eq!(y.len(), m * n, "panel linear: output length");
        assert!(
            bias.is_none_or(|b| b.len() == n),
            "panel linear: bias length"
        );
        assert!(available(), "panel linear needs AVX-512F");
        if m == 0 || n == 0 {
            return;
        }
        if k == 0 {
            // no inputs: the bias (or zero), plus the residual
            for (i, v) in y.iter_mut().enumerate() {
                *v = bias.map_or(0.0, |b| b[i % n]);
                if let Some(r) = residual {
                    *v += r[i];
                }
            }
            return;
        }
        let resid_addr = residual.map_or(0, |r| r.as_ptr() as usize);
        let y_addr = y.as_mut_ptr() as usize;
        let np = n.div_ceil(NP);
        let threads = rayon::current_num_threads();
        // Rows split too when there are few panels for the threads.
        let row_tasks = if np >= 4 * threads {
            1
        } else {
            m.div_ceil(MR * 8).clamp(1, 8)
        };
        let rows_per = m.div_ceil(row_tasks).div_ceil(MR) * MR;
        // When x outgrows L2, a task takes a group of panels and runs each block of MC rows of
        // x over all of them while that block is in cache (else x would stream from L3 once
        // per panel); a small x stays in cache anyway and one panel a task balances best.
        let group = if rows_per * k * 4 > X_L2_BYTES {
            (np / (4 * threads)).clamp(1, GROUP)
        } else {
            1
        };
        let groups = np.div_ceil(group);
        let xp = pack_rows(x, m, k);
        let x = &xp[..];
        super::team::for_each(groups * row_tasks, |t| {
            let (g, rt) = (t / row_tasks, t % row_tasks);
            let r0 = rt * rows_per;
            let r1 = (r0 + rows_per).min(m);
            if r0 >= r1 {
                return;
            }
            #[cfg(target_arch = "x86_64")]
            // SAFETY: AVX-512F was checked; each task writes rows r0..r1 of the columns of its
            // panels (clipped to n) of `y`, disjoint from every other task's; reads stay inside
            // `x`, the panels, `bias` and `residual` (null when none; lengths asserted above).
            unsafe {
                group_task(
                    x,
                    match &self.data {
                        Store::F32(d) => Src::F32(d.as_slice()),
                        Store::Bf16(d) => Src::Bf16(d.as_slice()),
                    },
                    bias,
                    y_addr as *mut f32,
                    resid_addr as *const f32,
                    (n, k),
                    g * group..((g + 1) * group).min(np),
                    r0..r1,
                );
            }
        });
    }
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
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn group_task(
    x: &[f32],
    data: Src<'_>,
    bias: Option<&[f32]>,
    y: *mut f32,
    resid: *const f32,
    (n, k): (usize, usize),
    panels: std::ops::Range<usize>,
    rows: std::ops::Range<usize>,
) {
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
                                    // SAFETY: AVX-512F is enabled in this function; each
                                    // buffer holds KS * NP values, s1 - s0 <= KS.
                                    unsafe { widen(&d[at..at + sub_len], wide_at(cur)) };
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
                            // next_len <= KS * NP); AVX-512F is enabled in this function.
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
                                    6 => tile::<6>(a),
                                    5 => tile::<5>(a),
                                    4 => tile::<4>(a),
                                    3 => tile::<3>(a),
                                    2 => tile::<2>(a),
                                    _ => tile::<1>(a),
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

/// Panel values in memory of their own: an anonymous mapping whose whole 2 MiB pages Linux is
/// asked to back with huge pages (`madvise(MADV_HUGEPAGE)`, transparent huge pages). A forward
/// streams every weight from memory once; with 4 KiB pages each 4 KiB of it also costs a page
/// walk whose table entries come from memory too. (A `Vec` of this size would mostly reuse heap
/// pages already faulted in as 4 KiB ones, where the advice no longer applies.) Below one huge
/// page, or where the mapping cannot be made, a `Vec`.
pub(crate) struct PanelBuf<T> {
    mem: Mem<T>,
    len: usize,
}

enum Mem<T> {
    /// The mapping and the byte offset of value 0 in it (2 MiB-aligned).
    Map(memmap2::MmapMut, usize),
    Heap(Vec<T>),
}

const HUGE_PAGE: usize = 2 << 20;

impl<T: bytemuck::Pod> PanelBuf<T> {
    /// `len` zero values.
    pub(crate) fn zeroed(len: usize) -> Self {
        let bytes = len * std::mem::size_of::<T>();
        let map = if bytes >= HUGE_PAGE {
            memmap2::MmapMut::map_anon(bytes + HUGE_PAGE).ok()
        } else {
            None
        };
        let mem = match map {
            Some(map) => {
                let offset =
                    (map.as_ptr() as usize).next_multiple_of(HUGE_PAGE) - map.as_ptr() as usize;
                #[cfg(unix)]
                if std::env::var("GLM5V_CPU_HUGE_PAGES").as_deref() != Ok("0") {
                    // whole huge pages only: a partly used one would add up to 2 MiB of
                    // resident zeros per weight. Advice only: where it is refused the pages
                    // stay 4 KiB.
                    let whole = bytes / HUGE_PAGE * HUGE_PAGE;
                    let _ = map.advise_range(memmap2::Advice::HugePage, offset, whole);
                }
                Mem::Map(map, offset)
            }
            None => Mem::Heap(vec![T::zeroed(); len]),
        };
        Self { mem, len }
    }

    pub(crate) fn as_slice(&self) -> &[T] {
        match &self.mem {
            Mem::Map(map, off) => {
                bytemuck::cast_slice(&map[*off..*off + self.len * std::mem::size_of::<T>()])
            }
            Mem::Heap(v) => v,
        }
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [T] {
        let len = self.len;
        match &mut self.mem {
            Mem::Map(map, off) => {
                bytemuck::cast_slice_mut(&mut map[*off..*off + len * std::mem::size_of::<T>()])
            }
            Mem::Heap(v) => v,
        }
    }
}

impl<T: bytemuck::Pod> Clone for PanelBuf<T> {
    fn clone(&self) -> Self {
        let mut c = Self::zeroed(self.len);
        c.as_mut_slice().copy_from_slice(self.as_slice());
        c
    }
}

impl<T> std::fmt::Debug for PanelBuf<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.mem {
            Mem::Map(..) => "mapped",
            Mem::Heap(_) => "heap",
        };
        write!(f, "PanelBuf({} values, {kind})", self.len)
    }
}

/// The panel values a task reads.
#[derive(Clone, Copy)]
enum Src<'a> {
    F32(&'a [f32]),
    Bf16(&'a [u16]),
}

impl Src<'_> {
    /// (first byte, bytes per value, values)
    fn raw(self) -> (*const i8, usize, usize) {
        match self {
            Src::F32(d) => (d.as_ptr() as *const i8, 4, d.len()),
            Src::Bf16(d) => (d.as_ptr() as *const i8, 2, d.len()),
        }
    }
}

/// Whole panel rows stored as bf16 pairs ([`paired_pos`]) as f32 in column order: the value
/// whose upper half is stored at `paired_pos(c)` of row `kk` goes to `out[kk * NP + c]`.
///
/// # Safety
/// `out` must be valid for writing `src.len()` values (it may be uninitialised) and aligned to
/// 64 bytes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn widen(src: &[u16], out: *mut f32) {
    debug_assert!(src.len().is_multiple_of(32), "whole panel rows");
    // SAFETY: 32 values read from src and written to out per block, inside both (the caller's
    // contract for out).
    unsafe {
        for i in (0..src.len() / 32 * 32).step_by(32) {
            widen_block(src.as_ptr().add(i), out.add(i));
        }
    }
}

/// Where column `c` of a panel row sits in bf16 storage: each 32 columns as 16 pairs, column
/// `j` in the low half of pair `j` and column `16 + j` in its high half, so that one 64-byte
/// load widens to two f32 vectors with one shift and one mask ([`widen_block`]).
fn paired_pos(c: usize) -> usize {
    c / 32 * 32 + 2 * (c % 16) + c % 32 / 16
}

/// One 32-value block of [`widen`]: 16 pairs in one 64-byte load, their lower halves shifted
/// up (columns 0..16 of the block) and their upper halves masked (columns 16..32).
///
/// # Safety
/// 32 values readable at `src`, 32 writable at `out` (64-byte aligned); AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn widen_block(src: *const u16, out: *mut f32) {
    use std::arch::x86_64::*;
    // SAFETY: the caller's contract.
    unsafe {
        let d = _mm512_loadu_si512(src as *const _);
        _mm512_store_ps(out, _mm512_castsi512_ps(_mm512_slli_epi32::<16>(d)));
        let hi = _mm512_and_si512(d, _mm512_set1_epi32(0xffff_0000u32 as i32));
        _mm512_store_ps(out.add(16), _mm512_castsi512_ps(hi));
    }
}

/// Values on cache-line boundaries: a row block's partial sums between sub-chunks, a widened
/// sub-chunk.
#[repr(align(64))]
struct Aligned<const N: usize>([f32; N]);

/// One tile's run over a sub-chunk.
struct TileArgs<'a> {
    /// Blocks of 32 bf16 values (paired, see [`paired_pos`]) to widen from `widen_from` into
    /// `widen_to` along the way: one a step over the first steps, the rest after the last.
    widen_from: *const u16,
    widen_to: *mut f32,
    widen_blocks: usize,
    /// The tile's rows of x, packed (see [`pack_rows`]).
    x: *const f32,
    /// Row `kk.start` of the panel.
    panel: *const f32,
    kk: std::ops::Range<usize>,
    /// Row 0 of the tile in y (row stride `ldy`), `width` valid columns.
    y: *mut f32,
    ldy: usize,
    width: usize,
    /// On the first chunk the sums are added to the bias, else to y.
    bias: Option<&'a [f32; NP]>,
    /// The tile's rows of the partial sums (row stride NP).
    part: *mut f32,
    /// The sub-chunk starts its summation chunk (the chain starts from zero) / ends it (the
    /// chunk sum goes into y).
    start: bool,
    end: bool,
    /// Unless null (only at the end of the last chunk): the tile's rows of a residual with y's
    /// layout, added to the finished outputs.
    resid: *const f32,
    /// `pf_lines` lines (one per step of the first steps) are prefetched into L2 from here,
    /// unless null.
    pf: *const i8,
    pf_lines: usize,
}

/// One R x 64 tile over one sub-chunk: the fused multiply-add chains start from zero or from
/// the partial sums, and end in `part` or (at the chunk's end) added to the bias or to `y`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn tile<const R: usize>(a: TileArgs<'_>) {
    use std::arch::x86_64::*;
    // lanes of the last (partial) panel that exist in y
    let masks: [__mmask16; 4] = std::array::from_fn(|c| {
        let have = a.width.saturating_sub(16 * c).min(16);
        if have == 16 {
            0xffff
        } else {
            ((1u32 << have) - 1) as __mmask16
        }
    });
    // SAFETY: the caller's contract (R rows of x from `x` with stride ldx over kk, the panel
    // sub-chunk from `panel`, R rows of `part`, R rows of `width` columns of y); AVX-512F is
    // enabled here.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); 4]; R];
        if !a.start {
            for (r, row) in acc.iter_mut().enumerate() {
                for (c, v) in row.iter_mut().enumerate() {
                    *v = _mm512_load_ps(a.part.add(r * NP + 16 * c));
                }
            }
        }
        // y's rows, read at the end of a later chunk: fetched while the steps run.
        if a.end && a.bias.is_none() {
            for r in 0..R {
                for c in 0..4 {
                    _mm_prefetch::<_MM_HINT_T0>(a.y.wrapping_add(r * a.ldy + 16 * c) as *const i8);
                }
            }
        }
        let k0 = a.kk.start;
        let mut kk = k0;
        // blocks widened so far
        let mut wi = 0;
        if !a.pf.is_null() {
            let mut q = a.pf;
            for _ in 0..a.pf_lines.min(a.kk.len()) {
                _mm_prefetch::<_MM_HINT_T1>(q);
                q = q.add(64);
                if wi < a.widen_blocks {
                    widen_block(a.widen_from.add(32 * wi), a.widen_to.add(32 * wi));
                    wi += 1;
                }
                step::<R>(&mut acc, a.x.add(kk * MR), a.panel.add((kk - k0) * NP));
                kk += 1;
            }
        }
        while wi < a.widen_blocks && kk < a.kk.end {
            widen_block(a.widen_from.add(32 * wi), a.widen_to.add(32 * wi));
            wi += 1;
            step::<R>(&mut acc, a.x.add(kk * MR), a.panel.add((kk - k0) * NP));
            kk += 1;
        }
        for kk in kk..a.kk.end {
            step::<R>(&mut acc, a.x.add(kk * MR), a.panel.add((kk - k0) * NP));
        }
        for b in wi..a.widen_blocks {
            widen_block(a.widen_from.add(32 * b), a.widen_to.add(32 * b));
        }
        for (r, row) in acc.iter().enumerate() {
            for (c, v) in row.iter().enumerate() {
                if !a.end {
                    _mm512_store_ps(a.part.add(r * NP + 16 * c), *v);
                    continue;
                }
                // (past y's end for the masked-off lanes of a partial last panel: not read)
                let yp = a.y.wrapping_add(r * a.ldy + 16 * c);
                let base = match a.bias {
                    Some(b) => _mm512_loadu_ps(b.as_ptr().add(16 * c)),
                    None => _mm512_maskz_loadu_ps(masks[c], yp),
                };
                let mut out = _mm512_add_ps(base, *v);
                if !a.resid.is_null() {
                    let rp = a.resid.wrapping_add(r * a.ldy + 16 * c);
                    out = _mm512_add_ps(out, _mm512_maskz_loadu_ps(masks[c], rp));
                }
                _mm512_mask_storeu_ps(yp, masks[c], out);
            }
        }
    }
}

/// One `kk` of an R x 64 tile: four 16-lane loads of the panel row `p`, one broadcast of
/// `x[r, kk]` (at `x + r`, packed) per row, 4R fused multiply-adds.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn step<const R: usize>(
    acc: &mut [[std::arch::x86_64::__m512; 4]; R],
    x: *const f32,
    p: *const f32,
) {
    use std::arch::x86_64::*;
    // SAFETY: the caller's (tile's) contract: 64 values from p, R values from x.
    unsafe {
        let w0 = _mm512_loadu_ps(p);
        let w1 = _mm512_loadu_ps(p.add(16));
        let w2 = _mm512_loadu_ps(p.add(32));
        let w3 = _mm512_loadu_ps(p.add(48));
        for (r, row) in acc.iter_mut().enumerate() {
            let xb = _mm512_set1_ps(*x.add(r));
            row[0] = _mm512_fmadd_ps(xb, w0, row[0]);
            row[1] = _mm512_fmadd_ps(xb, w1, row[1]);
            row[2] = _mm512_fmadd_ps(xb, w2, row[2]);
            row[3] = _mm512_fmadd_ps(xb, w3, row[3]);
        }
    }
}

/// x `[m, k]` as tiles of [`MR`] rows, each `[k][MR]` (rows past m zero): a step of a tile
/// reads its MR inputs from one place instead of MR rows k apart (which with k a multiple of
/// 1024 fall into one L1 set). Written once, not zeroed first: a forward's products pack
/// 0.25-1 MiB each at 8x8, and zeroing that on the calling thread kept the others waiting.
fn pack_rows(x: &[f32], m: usize, k: usize) -> Vec<f32> {
    use std::mem::MaybeUninit;
    let len = m.div_ceil(MR) * k * MR;
    let mut xp: Vec<f32> = Vec::with_capacity(len);
    if len == 0 {
        return xp;
    }
    let spare = &mut xp.spare_capacity_mut()[..len];
    super::team::for_each_chunk_mut(spare, k * MR, |t, tile| {
        let rows = MR.min(m - t * MR);
        let src = &x[t * MR * k..(t * MR + rows) * k];
        if rows == MR {
            let r: [&[f32]; MR] = std::array::from_fn(|i| &src[i * k..(i + 1) * k]);
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the tile holds k * MR values (MaybeUninit<f32> has f32's layout), every
            // row k; AVX-512F is there (`linear_into` asserted it).
            unsafe {
                interleave6(r, tile.as_mut_ptr() as *mut f32, k);
            }
            #[cfg(not(target_arch = "x86_64"))]
            for (kk, out) in tile.chunks_exact_mut(MR).enumerate() {
                for (o, row) in out.iter_mut().zip(&r) {
                    o.write(row[kk]);
                }
            }
            return;
        }
        tile.fill(MaybeUninit::new(0.0));
        for (r, row) in src.chunks_exact(k).enumerate() {
            for (kk, &v) in row.iter().enumerate() {
                tile[kk * MR + r].write(v);
            }
        }
    });
    // SAFETY: the chunks of k * MR values are the tiles, and every tile wrote all of its values
    // (a full one each of its k * MR, a partial one zeros first), so 0..len are initialised.
    unsafe { xp.set_len(len) };
    xp
}

/// Per output vector `j` of a 16-column block of [`interleave6`] (values `16j..16j + 16` of
/// its `[16][6]` output, value `f` being row `f % 6` at column `f / 6`): for each pair of rows
/// `(2p, 2p + 1)`, the lane of the pair's 32 values (row 2p's 16, then row 2p + 1's) that each
/// output lane takes (0 where another pair feeds it); and the lanes fed by pairs 1 and 2.
struct Interleave {
    idx: [[[u32; 16]; 3]; MR],
    from1: [u16; MR],
    from2: [u16; MR],
}

const INTERLEAVE: Interleave = {
    let mut t = Interleave {
        idx: [[[0; 16]; 3]; MR],
        from1: [0; MR],
        from2: [0; MR],
    };
    let mut j = 0;
    while j < MR {
        let mut i = 0;
        while i < 16 {
            let f = 16 * j + i;
            let (kk, r) = (f / MR, f % MR);
            t.idx[j][r / 2][i] = ((r % 2) * 16 + kk) as u32;
            if r / 2 == 1 {
                t.from1[j] |= 1 << i;
            }
            if r / 2 == 2 {
                t.from2[j] |= 1 << i;
            }
            i += 1;
        }
        j += 1;
    }
    t
};

/// `out[kk * 6 + r] = rows[r][kk]` for kk < k: 16 columns at a time, each output vector put
/// together from the six rows' vectors by three two-source permutes and two blends (the scalar
/// loop, a load and a store per value, took 1.4% of an 8x8 forward's samples).
///
/// # Safety
/// Every row holds at least k values, `out` is valid for writing `6 k`; AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn interleave6(rows: [&[f32]; MR], out: *mut f32, k: usize) {
    use std::arch::x86_64::*;
    const _: () = assert!(MR == 6, "interleave6 is written for six rows");
    let n16 = k / 16 * 16;
    // SAFETY: reads rows[r][kk0..kk0 + 16] with kk0 + 16 <= n16 <= k, writes out[..6 k]; the
    // tables are 16 u32 each.
    unsafe {
        let t = &INTERLEAVE;
        let idx = |j: usize, p: usize| _mm512_loadu_si512(t.idx[j][p].as_ptr() as *const _);
        for kk0 in (0..n16).step_by(16) {
            let v: [__m512; MR] =
                std::array::from_fn(|r| _mm512_loadu_ps(rows[r].as_ptr().add(kk0)));
            for j in 0..MR {
                let a = _mm512_permutex2var_ps(v[0], idx(j, 0), v[1]);
                let b = _mm512_permutex2var_ps(v[2], idx(j, 1), v[3]);
                let c = _mm512_permutex2var_ps(v[4], idx(j, 2), v[5]);
                let o = _mm512_mask_blend_ps(t.from2[j], _mm512_mask_blend_ps(t.from1[j], a, b), c);
                _mm512_storeu_ps(out.add(kk0 * MR + 16 * j), o);
            }
        }
        for kk in n16..k {
            for (r, row) in rows.iter().enumerate() {
                out.add(kk * MR + r).write(row[kk]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Array2;

    #[test]
    fn matches_f64_sums_on_ragged_shapes() {
        if !available() {
            eprintln!("skipped: no AVX-512 on this CPU");
            return;
        }
        let mut lcg = crate::kernels::Lcg(5);
        let mut rnd = || lcg.unit() as f32 - 0.5;
        // ragged rows (tile edges), columns (a partial panel), k over one chunk (KC)
        for (m, k, n) in [
            (1, 1, 1),
            (7, 13, 5),
            (13, 70, 130),
            (6, KC + 37, 64),
            (20, 3, 200),
        ] {
            let x: Vec<f32> = (0..m * k).map(|_| rnd()).collect();
            let w = Array2::from_shape_fn((n, k), |_| rnd());
            let b: Vec<f32> = (0..n).map(|_| rnd()).collect();
            let p = Panels::pack(w.view());
            assert_eq!((p.rows(), p.cols()), (n, k));
            for bias in [Some(&b[..]), None] {
                let mut y = vec![f32::NAN; m * n];
                p.linear_into(&x, m, bias, &mut y);
                for i in 0..m {
                    for j in 0..n {
                        let want: f64 = bias.map_or(0.0, |b| b[j] as f64)
                            + (0..k)
                                .map(|c| x[i * k + c] as f64 * w[[j, c]] as f64)
                                .sum::<f64>();
                        let err = (y[i * n + j] as f64 - want).abs();
                        assert!(
                            err < 1e-5 * (k as f64).sqrt(),
                            "({m},{k},{n}) at ({i},{j}): {} vs {want}",
                            y[i * n + j]
                        );
                    }
                }
            }
        }
    }

    /// The packed x: tiles of MR rows `[k][MR]`, rows past m zero, for k with and without a
    /// tail past the last 16 columns, and m with and without a partial tile.
    #[test]
    fn pack_rows_interleaves_tiles() {
        if !available() {
            eprintln!("skipped: no AVX-512 on this CPU");
            return;
        }
        for (m, k) in [(6, 16), (12, 48), (13, 1176), (64, 1024), (5, 7), (7, 3)] {
            let x: Vec<f32> = (0..m * k).map(|i| i as f32 + 0.5).collect();
            let xp = pack_rows(&x, m, k);
            assert_eq!(xp.len(), m.div_ceil(MR) * k * MR);
            for (i, &v) in xp.iter().enumerate() {
                let (t, kk, r) = (i / (k * MR), i % (k * MR) / MR, i % MR);
                let row = t * MR + r;
                let want = if row < m { x[row * k + kk] } else { 0.0 };
                assert_eq!(
                    v.to_bits(),
                    want.to_bits(),
                    "m {m} k {k}: tile {t} column {kk} row {r}"
                );
            }
        }
    }

    #[test]
    fn sums_in_blocks_of_kc_onto_the_bias() {
        sums_in_blocks(3, 2 * KC + 5, 17, 1, false);
        sums_in_blocks(3, 2 * KC + 5, 17, 1, true);
    }

    /// The blocking of large products (groups of panels, row blocks of MC and RB rows,
    /// sub-chunks of KS, a partial last chunk and panel) leaves the bits as they are, for 1 and
    /// 2 threads (one task, 4 or 2 panels a group).
    #[test]
    fn blocking_keeps_the_sums_exact() {
        let (m, k, n) = (MC + RB / 2 + 5, 4 * KC + KS + 12, 15 * NP + 40);
        assert!(m * k * 4 > X_L2_BYTES, "large enough to group panels");
        sums_in_blocks(m, k, n, 2, false);
        sums_in_blocks(m, k, n, 1, true);
    }

    /// The bf16 sub-chunks widened ahead by the tiles of the previous one (several tiles per
    /// sub-chunk, across chunk ends, a short last sub-chunk), as in the merger's 16-row
    /// products and the blocks' 64-row ones.
    #[test]
    fn widening_ahead_keeps_the_sums_exact() {
        sums_in_blocks(16, 2 * KC + KS + 8, 70, 2, true);
        sums_in_blocks(64, 4 * KC, NP, 1, true);
    }

    /// `linear_add_into` = `linear_into`, then the residual added: the same bits, for a partial
    /// last panel, several chunks, one chunk, and no inputs at all.
    #[test]
    fn residual_is_added_last() {
        if !available() {
            eprintln!("skipped: no AVX-512 on this CPU");
            return;
        }
        let mut lcg = crate::kernels::Lcg(11);
        let mut rnd = || lcg.unit() as f32 - 0.5;
        for (m, k, n) in [(13, 2 * KC + 9, 70), (6, 40, 64), (3, 0, 5)] {
            let x: Vec<f32> = (0..m * k).map(|_| rnd()).collect();
            let w = Array2::from_shape_fn((n, k), |_| rnd());
            let b: Vec<f32> = (0..n).map(|_| rnd()).collect();
            let res: Vec<f32> = (0..m * n).map(|_| rnd() * 8.0).collect();
            let p = Panels::pack(w.view());
            for bias in [Some(&b[..]), None] {
                let mut want = vec![f32::NAN; m * n];
                p.linear_into(&x, m, bias, &mut want);
                if k == 0 {
                    assert!(
                        want.iter()
                            .enumerate()
                            .all(|(i, &v)| v == bias.map_or(0.0, |b| b[i % n]))
                    );
                }
                want.iter_mut().zip(&res).for_each(|(y, r)| *y += r);
                let mut y = vec![f32::NAN; m * n];
                p.linear_add_into(&x, m, bias, &res, &mut y);
                for (i, (a, b)) in y.iter().zip(&want).enumerate() {
                    assert_eq!(a.to_bits(), b.to_bits(), "({m},{k},{n}) value {i}");
                }
            }
        }
    }

    /// `short`: weights rounded to bf16 first, so the panels store them as bf16 (exactly).
    fn sums_in_blocks(m: usize, k: usize, n: usize, threads: usize, short: bool) {
        if !available() {
            eprintln!("skipped: no AVX-512 on this CPU");
            return;
        }
        // per chunk of KC: an fma chain from zero over kk ascending, added to the running sum
        // that starts at the bias; exactly
        let x: Vec<f32> = (0..m * k)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.013)
            .collect();
        let w = Array2::from_shape_fn((n, k), |(j, c)| {
            let v = ((j * 31 + c * 7) % 97) as f32 * 0.021 - 1.0;
            if short {
                f32::from_bits(v.to_bits() & 0xffff_0000)
            } else {
                v
            }
        });
        let panels = Panels::pack(w.view());
        assert_eq!(panels.is_bf16(), short);
        let b: Vec<f32> = (0..n).map(|j| j as f32 * 0.1 - 0.7).collect();
        let mut y = vec![0.0f32; m * n];
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("a thread pool")
            .install(|| panels.linear_into(&x, m, Some(&b), &mut y));
        for i in 0..m {
            for j in 0..n {
                let mut s = b[j];
                for c0 in (0..k).step_by(KC) {
                    let mut part = 0.0f32;
                    for c in c0..(c0 + KC).min(k) {
                        part = x[i * k + c].mul_add(w[[j, c]], part);
                    }
                    s += part;
                }
                assert_eq!(y[i * n + j].to_bits(), s.to_bits(), "({i},{j})");
            }
        }
    }
}
