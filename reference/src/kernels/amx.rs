//! `Linear` products on the AMX matrix unit (`tdpbf16ps`): bf16 inputs, f32 accumulation.
//!
//! Three uses, one kernel:
//! - **bf16** ([`Parts::One`]): each input is rounded to bf16 (round to nearest even), the
//!   weights are bf16; every product of two bf16 values is exact in f32 and the unit adds them
//!   into f32 accumulators. This is the GPU's bf16 policy for a GEMM (bf16 in, f32 out).
//! - **half inputs** ([`Parts::Two`]): each input rounded to 11 significant bits (IEEE half's
//!   precision) is exactly two bf16 parts; their two products are summed as bf16 mode's one.
//! - **f32 by three products** ([`Parts::Three`]): when every weight is exactly a bf16 value
//!   (every weight of a bf16 checkpoint), each f32 input is split into three bf16 parts,
//!   `x = hi + mid + lo` exactly (hi = bf16(x), mid = bf16(x - hi), lo = x - hi - mid: f32's 24
//!   significant bits in three pieces of 8; inexact only where a part falls under bf16's normal
//!   range, ~1.2e-38, which the unit reads as zero). The three products `hi·w`, `mid·w`, `lo·w`
//!   are each exact in f32 and are summed into the same f32 accumulators: an f32 product in
//!   another order of summation.
//!
//! Layout. A weight `W` `[n, k]` is stored as 32-column blocks; per block and per 32 inputs,
//! two 1 KiB tiles (columns 0-15 and 16-31 of the block) in the unit's pair layout: tile row `r`
//! holds, for each of its 16 columns `j`, `W[j][2r]` then `W[j][2r+1]`. Inputs are packed per
//! call as bf16 tiles too, `[row block of 32][k / 32][part][32 rows][32 inputs]` (zero past the
//! edges): every tile the unit loads is 1 KiB of consecutive lines. (Packed as rows, `[row][k /
//! 32][part][32]`, a tile's 16 rows lay a multiple of 2 KiB apart for k = 1024 or 4096, so they
//! fell into one or two of L1's 64 sets and evicted each other on every load.)
//!
//! Register tiles: a 32 x 32 output block in four accumulators (tmm0-3), two input tiles
//! (tmm4-5: 32 rows x 32 inputs) and two weight tiles (tmm6-7: 32 inputs x 32 columns); per 32
//! inputs, two weight loads, two input loads per part and four products per part.
//!
//! Summation: each output sums its products over a chunk of `kc` inputs in the accumulators
//! (from zero), then the chunk's sum is added to the running f32 value, which starts at the
//! bias; the residual, if any, is added last (as the f32 panels do: `kernels::panel`).

#[cfg(target_arch = "x86_64")]
use super::amx_kernel::block;
#[cfg(target_arch = "x86_64")]
pub(super) use super::amx_kernel::load_config;
pub use super::amx_kernel::{Step, amx_peak_gflops, block_gflops, set_for_measuring};
use super::panel::PanelBuf;
use ndarray::ArrayView2;

/// Columns per block (two tiles of 16).
const NB: usize = 32;
/// Inputs per tile step.
const KB: usize = 32;
/// Rows per block (two tiles of 16).
const MB: usize = 32;
/// Bytes of one weight block step: two 1 KiB tiles.
pub(super) const B_STEP: usize = 2 * 1024;

/// How the f32 inputs become bf16.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parts {
    /// Rounded to bf16 once (the bf16 mode).
    One,
    /// Rounded to 11 significant bits (IEEE half's precision, as the GPU's half GEMMs take
    /// them), then split in two exact bf16 parts (`GLM5V_CPU_BF16_HALF`).
    Two,
    /// Split in three exact bf16 parts (an f32 product).
    Three,
}

impl Parts {
    pub(super) fn count(self) -> usize {
        match self {
            Parts::One => 1,
            Parts::Two => 2,
            Parts::Three => 3,
        }
    }
}

/// Inputs per summation chunk: the products of a chunk are summed in the unit's accumulators
/// from zero, then added to the running f32 value (the bias first). f32 by three products: 512
/// (16 steps), short enough for the f32 products' accuracy (the f32 panels' chunk is 256, and
/// one chain over a 10240-input merger row took the full-geometry fixture from 0.51 to 0.92 of
/// its tolerance there). bf16 mode: 1024 (every tower product but the 4096- and 10240-input
/// ones in one chunk, so y is written once), measured on the GPU machine's Xeon against 512 in
/// one process, forwards alternating (`full_geometry` with `GLM5V_AB_KC=512,1024`, 2 cores):
/// 8x8 median 0.113 s against 0.122 s (12 each), 32x32 best 1.63 s against 1.87 s (median 1.98
/// against 1.91, 4 each). `GLM5V_CPU_AMX_KC=N` (a multiple of 32) sets the bf16 mode's chunk,
/// for measuring.
fn kc(parts: Parts) -> usize {
    use std::sync::atomic::Ordering::Relaxed;
    match parts {
        Parts::One => match BF16_KC.load(Relaxed) {
            0 => {
                let v = std::env::var("GLM5V_CPU_AMX_KC")
                    .ok()
                    .and_then(|v| v.parse::<usize>().ok())
                    .filter(|v| *v >= KB && v % KB == 0)
                    .unwrap_or(1024);
                BF16_KC.store(v, Relaxed);
                v
            }
            v => v,
        },
        // the bf16 mode's products, in two parts
        Parts::Two => kc(Parts::One),
        Parts::Three => 512,
    }
}

/// The summation chunk the unit's path uses for `parts` (inputs), for
/// [`AmxWeight::linear_emulated`].
#[doc(hidden)]
pub fn summation_chunk(parts: Parts) -> usize {
    kc(parts)
}

/// The bf16 mode's summation chunk (0: not read yet).
static BF16_KC: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Sets the bf16 mode's summation chunk (inputs, a multiple of 32), as `GLM5V_CPU_AMX_KC` does,
/// for benchmarks that alternate settings in one process.
#[doc(hidden)]
pub fn set_bf16_chunk_for_measuring(inputs: usize) {
    assert!(
        inputs >= KB && inputs.is_multiple_of(KB),
        "a multiple of 32"
    );
    BF16_KC.store(inputs, std::sync::atomic::Ordering::Relaxed);
}

/// Whether this process may run the AMX kernel ([`super::isa::isa`] is `amx`).
pub fn available() -> bool {
    super::isa::isa() >= super::isa::Isa::Amx
}

/// The bf16 bits of `x`, rounded to nearest even (NaN stays NaN, quiet).
#[inline(always)]
pub fn bf16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    if x.is_nan() {
        ((b >> 16) | 0x40) as u16
    } else {
        ((b + 0x7fff + ((b >> 16) & 1)) >> 16) as u16
    }
}

/// The f32 value of bf16 bits.
#[inline(always)]
pub fn bf16_value(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// `x` rounded to the nearest bf16 value, as f32.
#[inline(always)]
pub fn round_bf16(x: f32) -> f32 {
    bf16_value(bf16_bits(x))
}

/// The three bf16 parts of `x` (`hi + mid + lo == x` for normal values of f32's range); an
/// infinite or NaN `x` is all in `hi`.
#[inline(always)]
pub fn split3(x: f32) -> [u16; 3] {
    let mut hi = bf16_bits(x);
    if x.is_finite() && bf16_value(hi).is_infinite() {
        // above bf16's largest finite value (3.3895e38) rounding gives an infinity (finding G1:
        // the other parts were then NaN); truncated, hi stays finite and the rest exact
        hi = (x.to_bits() >> 16) as u16;
    }
    let r1 = if x.is_finite() {
        x - bf16_value(hi)
    } else {
        0.0
    };
    let mid = bf16_bits(r1);
    let r2 = r1 - bf16_value(mid);
    [hi, mid, bf16_bits(r2)]
}

/// Where value `(c, kk)` (output column, input) of a weight of `ksteps` input steps lies in the
/// pair layout of the module docs, in u16 values.
#[inline(always)]
fn weight_at(c: usize, kk: usize, ksteps: usize) -> usize {
    let (cb, c) = (c / NB, c % NB);
    let (tile, j) = (c / 16, c % 16);
    let (step, r, e) = (kk / KB, kk % KB / 2, kk % 2);
    (cb * ksteps + step) * 1024 + tile * 512 + r * 32 + j * 2 + e
}

/// A `Linear` weight `[n, k]` in the AMX tile layout (bf16).
#[derive(Debug, Clone)]
pub struct AmxWeight {
    data: PanelBuf<u16>,
    n: usize,
    k: usize,
}

impl AmxWeight {
    /// `w` `[n, k]` (any strides) repacked; each value rounded to bf16 when `round` (the bf16
    /// mode), else (the split-f32 product) `None` unless every value is exactly a finite bf16
    /// value: an infinite weight would meet the zero parts of an input's split (0 x inf = NaN
    /// where the f32 product is an infinity; found by the `gemm` fuzz target, emulated, G2).
    pub fn pack(w: ArrayView2<f32>, round: bool) -> Option<Self> {
        if !round && !w.iter().all(|v| v.to_bits() & 0xffff == 0 && v.is_finite()) {
            return None;
        }
        let (n, k) = w.dim();
        let (nblocks, ksteps) = (n.div_ceil(NB), k.div_ceil(KB));
        let block = ksteps * B_STEP / 2; // u16 values per column block
        let mut data = PanelBuf::<u16>::zeroed(nblocks * block);
        use rayon::prelude::*;
        data.as_mut_slice()
            .par_chunks_mut(block.max(1))
            .enumerate()
            .for_each(|(cb, out)| {
                for c in 0..NB.min(n - cb * NB) {
                    for (kk, &v) in w.row(cb * NB + c).iter().enumerate() {
                        // the block's own slice: column c of block 0
                        out[weight_at(c, kk, ksteps)] = bf16_bits(v);
                    }
                }
            });
        Some(Self { data, n, k })
    }

    /// The packed bf16 values (tests: `kernels::amx_kv` packs attention's K and V in this
    /// layout).
    #[cfg(test)]
    pub(super) fn packed(&self) -> &[u16] {
        self.data.as_slice()
    }

    /// Output features.
    pub fn rows(&self) -> usize {
        self.n
    }

    /// Input features.
    pub fn cols(&self) -> usize {
        self.k
    }

    /// The weight `[n, k]` as f32 values (tests, and the fallbacks of a forced lower level).
    pub fn to_f32(&self) -> ndarray::Array2<f32> {
        let d = self.data.as_slice();
        let ksteps = self.k.div_ceil(KB);
        ndarray::Array2::from_shape_fn((self.n, self.k), |(c, kk)| {
            bf16_value(d[weight_at(c, kk, ksteps)])
        })
    }

    /// `y = x · wᵀ + bias (+ residual)` with `x` `[m, k]` row-major, `y` `[m, n]` (overwritten),
    /// the inputs made bf16 as `parts` says; parallel over column blocks (and row blocks when
    /// there are few columns) on the team's threads ([`super::team::for_each`]).
    ///
    /// # Panics
    /// If the lengths disagree with the shapes, or AMX is not [`available`].
    pub fn linear(
        &self,
        x: &[f32],
        m: usize,
        bias: Option<&[f32]>,
        residual: Option<&[f32]>,
        y: &mut [f32],
        parts: Parts,
    ) {
        assert!(available(), "amx linear needs AMX");
        self.checked::<false>(x, m, bias, residual, y, parts, kc(parts), order());
    }

    /// [`AmxWeight::linear`] with every tile block computed by [`emulated_block`] (any CPU; for
    /// the unit tests and the `gemm` fuzz target): the packing, blocking and summation of the
    /// unit's path, checked where there is no unit. `chunk` is the summation chunk in inputs (a
    /// multiple of 32; [`summation_chunk`] gives the unit's), `order` the blocks' order
    /// ([`order`] gives the unit's).
    ///
    /// # Panics
    /// As [`AmxWeight::linear`], but on any CPU.
    #[doc(hidden)]
    #[allow(clippy::too_many_arguments)]
    pub fn linear_emulated(
        &self,
        x: &[f32],
        m: usize,
        bias: Option<&[f32]>,
        residual: Option<&[f32]>,
        y: &mut [f32],
        parts: Parts,
        chunk: usize,
        order: Order,
    ) {
        self.checked::<true>(x, m, bias, residual, y, parts, chunk, order);
    }

    /// The shapes checked, the empty cases answered, then [`AmxWeight::run`] over the packed
    /// inputs (shared by [`AmxWeight::linear`] and its emulation).
    #[allow(clippy::too_many_arguments)]
    fn checked<const EMUL: bool>(
        &self,
        x: &[f32],
        m: usize,
        bias: Option<&[f32]>,
        residual: Option<&[f32]>,
        y: &mut [f32],
        parts: Parts,
        chunk: usize,
        order: Order,
    ) {
        let (n, k) = (self.n, self.k);
        assert_eq!(x.len(), m * k, "amx linear: input length");
        assert_eq!(y.len(), m * n, "amx linear: output length");
        assert!(bias.is_none_or(|b| b.len() == n), "amx linear: bias length");
        assert!(
            residual.is_none_or(|r| r.len() == m * n),
            "amx linear: residual length"
        );
        if m == 0 || n == 0 {
            return;
        }
        if k == 0 {
            for (i, v) in y.iter_mut().enumerate() {
                *v = bias.map_or(0.0, |b| b[i % n]) + residual.map_or(0.0, |r| r[i]);
            }
            return;
        }
        let t = profile::start();
        let xp = PackedX::new(x, m, k, parts);
        profile::stop(t, 0);
        self.run::<EMUL>(&xp, m, bias, residual, y, parts.count(), chunk, order);
    }

    /// The blocked product over packed inputs (`k >= 1`, `m >= 1`, shapes checked), by the
    /// unit or (`EMUL`) by [`emulated_block`].
    #[allow(clippy::too_many_arguments)]
    fn run<const EMUL: bool>(
        &self,
        xp: &PackedX,
        m: usize,
        bias: Option<&[f32]>,
        residual: Option<&[f32]>,
        y: &mut [f32],
        p: usize,
        chunk: usize,
        order: Order,
    ) {
        let (n, k) = (self.n, self.k);
        let (nblocks, mblocks) = (n.div_ceil(NB), m.div_ceil(MB));
        let threads = rayon::current_num_threads().max(1);
        // Rows split too when there are few column blocks for the threads.
        let row_tasks = if nblocks >= 4 * threads {
            1
        } else {
            mblocks.clamp(1, 8)
        };
        let mb_per = mblocks.div_ceil(row_tasks);
        // When a row block's inputs outgrow L2 across the column blocks, a task takes a group
        // of column blocks and runs each row block over all of them.
        let x_bytes = mblocks.div_ceil(row_tasks) * xp.block_bytes;
        let group = if x_bytes > (1 << 20) {
            (nblocks / (4 * threads)).clamp(1, 8)
        } else {
            1
        };
        let groups = nblocks.div_ceil(group);
        let y_addr = y.as_mut_ptr() as usize;
        let w = self.data.as_slice();
        let ksteps = k.div_ceil(KB);
        let chunk_steps = chunk / KB;
        // Block-major: each block runs all its chunks in turn, their sums added up in a
        // scratch (L1) and y written once, where the chunk-major order adds every chunk's sums
        // to y (from L2 or memory: y is written and read back once a chunk). The same
        // additions in the same order, so the same bits; taken when there are several chunks
        // and a group's weights and a row block's inputs over all k stay within 1.25 MiB of
        // L2 (each row block runs over the group's weights). Measured on the Xeon (settings
        // taking turns, `GLM5V_AMX_PROFILE=1`): the 32x32 down product (k = 4096) bf16 804
        // against 710 GFLOP/s block-major (1.25 MiB: 1 MiB of weights, 256 KiB of inputs);
        // in the f32 mode, whose three parts make the inputs 768 KiB, its kernel time rose
        // from 38 to 46 ms (203 against 211 GFLOP/s), so it stays chunk-major.
        let block_major = order == Order::Auto
            && ksteps > chunk_steps
            && group * ksteps * B_STEP + ksteps * p * A_STEP <= (5 << 18);
        super::team::for_each(groups * row_tasks, |t| {
            let (g, rt) = (t / row_tasks, t % row_tasks);
            let (mb0, mb1) = (rt * mb_per, ((rt + 1) * mb_per).min(mblocks));
            let (cb0, cb1) = (g * group, ((g + 1) * group).min(nblocks));
            if mb0 >= mb1 {
                return;
            }
            let mut c = Scratch([0.0; 4 * 256]);
            // SAFETY: AMX is available and the tile state granted (asserted above); each task
            // writes the rows of its row blocks (clipped to m) in the columns of its column
            // blocks (clipped to n) of y, disjoint from every other task's; the tile loads stay
            // inside the packed inputs and the weight (whole blocks, padded), the stores inside
            // `c`.
            unsafe {
                if !EMUL {
                    load_config();
                }
                let a_at = |mb: usize, s: usize| {
                    xp.data
                        .as_ptr()
                        .cast::<u8>()
                        .add(mb * xp.block_bytes + s * p * A_STEP)
                };
                let b_at =
                    |cb: usize, s: usize| w.as_ptr().cast::<u8>().add((cb * ksteps + s) * B_STEP);
                let run_block = |mb: usize, cb: usize, s0: usize, s1: usize, c: &mut Scratch| {
                    let t = profile::start();
                    let (a, b) = (a_at(mb, s0), b_at(cb, s0));
                    if EMUL {
                        emulated_block(p, a, b, s1 - s0, c.0.as_mut_ptr());
                    } else {
                        block(
                            p,
                            a,
                            b,
                            s1 - s0,
                            c.0.as_mut_ptr(),
                            mb == mb0,
                            p * A_STEP,
                            B_STEP,
                        );
                    }
                    profile::stop(t, 1);
                };
                let out = |mb: usize, cb: usize| Out {
                    y: y_addr as *mut f32,
                    n,
                    rows: mb * MB..(mb * MB + MB).min(m),
                    cols: cb * NB..(cb * NB + NB).min(n),
                };
                if block_major {
                    let mut sum = Scratch([0.0; 4 * 256]);
                    for mb in mb0..mb1 {
                        for cb in cb0..cb1 {
                            let mut s0 = 0;
                            while s0 < ksteps {
                                let s1 = (s0 + chunk_steps).min(ksteps);
                                run_block(mb, cb, s0, s1, &mut c);
                                let t = profile::start();
                                if s0 == 0 {
                                    let cols = cb * NB..(cb * NB + NB).min(n);
                                    sum.first(&c, bias.map(|b| &b[cols]));
                                } else {
                                    sum.add(&c);
                                }
                                profile::stop(t, 2);
                                s0 = s1;
                            }
                            let t = profile::start();
                            out(mb, cb).add(&sum.0, Some(None), Some(residual));
                            profile::stop(t, 2);
                        }
                    }
                    return;
                }
                let mut s0 = 0;
                while s0 < ksteps {
                    let s1 = (s0 + chunk_steps).min(ksteps);
                    for mb in mb0..mb1 {
                        for cb in cb0..cb1 {
                            run_block(mb, cb, s0, s1, &mut c);
                            let t = profile::start();
                            out(mb, cb).add(
                                &c.0,
                                (s0 == 0).then_some(bias),
                                (s1 == ksteps).then_some(residual),
                            );
                            profile::stop(t, 2);
                        }
                    }
                    s0 = s1;
                }
            }
        });
    }
}

/// The order of a product's blocks and chunks (see [`AmxWeight::run`]).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Block-major where it fits (the default).
    Auto,
    /// Every block's first chunk, then every block's second, ...
    ChunkMajor,
}

/// The unit's order: [`Order::Auto`] unless `GLM5V_CPU_AMX_ORDER=chunk` or
/// [`set_for_measuring`] says otherwise (one of the kernel settings).
#[doc(hidden)]
pub fn order() -> Order {
    super::amx_kernel::order()
}

/// Where a product's time goes, for `full_geometry` (`GLM5V_AMX_PROFILE=1`): nanoseconds
/// packing the inputs, in the block kernel, adding sums (to y or a block's running sums), and
/// in the bf16 attention (`kernels::amx_attention`) packing K and V, in `q kᵀ`, in the softmax
/// and in `p v`, summed over threads. Off (one relaxed load a block) unless the variable is
/// set.
#[doc(hidden)]
pub mod profile {
    use std::sync::atomic::{AtomicU8, AtomicU64, Ordering::Relaxed};
    use std::time::Instant;

    /// The slots: a product's packing, kernel, sums; attention's K/V packing, `q kᵀ`,
    /// softmax, `p v`.
    pub const SLOTS: usize = 7;

    static ON: AtomicU8 = AtomicU8::new(0);
    static NS: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];

    /// Whether `GLM5V_AMX_PROFILE=1` turned the profile on (read once).
    pub fn on() -> bool {
        match ON.load(Relaxed) {
            0 => {
                let on = std::env::var("GLM5V_AMX_PROFILE").as_deref() == Ok("1");
                ON.store(if on { 1 } else { 2 }, Relaxed);
                on
            }
            v => v == 1,
        }
    }

    #[inline(always)]
    pub(crate) fn start() -> Option<Instant> {
        on().then(Instant::now)
    }

    #[inline(always)]
    pub(crate) fn stop(t: Option<Instant>, what: usize) {
        if let Some(t) = t {
            NS[what].fetch_add(t.elapsed().as_nanos() as u64, Relaxed);
        }
    }

    /// Seconds in each slot since the last call (and resets them).
    pub fn take() -> [f64; SLOTS] {
        std::array::from_fn(|i| NS[i].swap(0, Relaxed) as f64 * 1e-9)
    }
}

/// A task's four 16 x 16 accumulator tiles, stored: C00, C01 (rows 0-15; columns 0-15, 16-31),
/// C10, C11 (rows 16-31).
#[repr(C, align(64))]
pub(super) struct Scratch(pub(super) [f32; 4 * 256]);

impl Scratch {
    /// `self = bias + c`, `bias` the block's columns (fewer than 32 at the right edge: the
    /// columns past it are never written to y).
    fn first(&mut self, c: &Scratch, bias: Option<&[f32]>) {
        for (i, (v, &s)) in self.0.iter_mut().zip(&c.0).enumerate() {
            // Scratch's order: tile column (i / 256) % 2, column i % 16 within it
            let col = (i / 256) % 2 * 16 + i % 16;
            *v = match bias {
                Some(b) => b.get(col).copied().unwrap_or(0.0) + s,
                None => s,
            };
        }
    }

    /// `self += c`.
    fn add(&mut self, c: &Scratch) {
        for (v, &s) in self.0.iter_mut().zip(&c.0) {
            *v += s;
        }
    }
}

/// Where a block's sums go.
struct Out {
    y: *mut f32,
    n: usize,
    rows: std::ops::Range<usize>,
    cols: std::ops::Range<usize>,
}

impl Out {
    /// Adds the block's chunk sums `c` to y (y = bias + sums on the first chunk), then the
    /// residual on the last.
    ///
    /// # Safety
    /// `y` valid for `[.., n]` rows covering `rows`; the block's region not written by others.
    #[inline]
    unsafe fn add(
        &self,
        c: &[f32; 4 * 256],
        first: Option<Option<&[f32]>>,
        last: Option<Option<&[f32]>>,
    ) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: AVX-512F detected; the rest is the caller's contract.
            return unsafe { self.add_avx512(c, first, last) };
        }
        // SAFETY: the caller's contract.
        unsafe { self.add_any(c, first, last) }
    }

    /// [`Out::add`] on AVX-512 (the crate's baseline is SSE2, and this ran for every block
    /// and chunk: a third of the unit's time in the bf16 mode).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn add_avx512(
        &self,
        c: &[f32; 4 * 256],
        first: Option<Option<&[f32]>>,
        last: Option<Option<&[f32]>>,
    ) {
        // SAFETY: the caller's contract.
        unsafe { self.add_any(c, first, last) }
    }

    /// # Safety
    /// As [`Out::add`]'s.
    #[inline(always)]
    unsafe fn add_any(
        &self,
        c: &[f32; 4 * 256],
        first: Option<Option<&[f32]>>,
        last: Option<Option<&[f32]>>,
    ) {
        let c0 = self.cols.start;
        let width = self.cols.len();
        for r in self.rows.clone() {
            let rr = r - self.rows.start;
            let (tr, lr) = (rr / 16, rr % 16);
            // SAFETY: row r of y, columns c0..c0+width, inside y (the caller's contract).
            let yrow =
                unsafe { std::slice::from_raw_parts_mut(self.y.add(r * self.n + c0), width) };
            for (t, ys) in yrow.chunks_mut(16).enumerate() {
                let at = (tr * 2 + t) * 256 + lr * 16;
                let cs = &c[at..at + ys.len()];
                match first {
                    Some(Some(b)) => {
                        let bs = &b[c0 + 16 * t..c0 + 16 * t + ys.len()];
                        for ((v, &s), &b) in ys.iter_mut().zip(cs).zip(bs) {
                            *v = b + s;
                        }
                    }
                    Some(None) => ys.copy_from_slice(cs),
                    None => ys.iter_mut().zip(cs).for_each(|(v, &s)| *v += s),
                }
            }
            if let Some(Some(res)) = last {
                let rrow = &res[r * self.n + c0..r * self.n + c0 + width];
                for (v, &q) in yrow.iter_mut().zip(rrow) {
                    *v += q;
                }
            }
        }
    }
}

/// One 64-byte line of bf16 values (the packed inputs' unit, so rows start 64-byte aligned).
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(super) struct Line(pub(super) [u16; 32]);

/// Bytes of one packed input step of one part: two 1 KiB tiles (rows 0-15 and 16-31).
pub(super) const A_STEP: usize = 2 * 1024;

/// The inputs of one call as bf16 tiles, `[m / 32][k / 32][part][32 rows][32]` (the module
/// docs): a row block's steps follow each other, each step's parts side by side.
struct PackedX {
    data: Vec<Line>,
    /// Bytes per row block (`ksteps * parts * A_STEP`).
    block_bytes: usize,
}

impl PackedX {
    fn new(x: &[f32], m: usize, k: usize, parts: Parts) -> Self {
        let p = parts.count();
        let ksteps = k.div_ceil(KB);
        let lines_per_block = ksteps * p * MB;
        let mblocks = m.div_ceil(MB);
        let mut data = vec![Line([0; 32]); mblocks * lines_per_block];
        super::team::for_each_chunk_mut(&mut data, lines_per_block, |mb, block| {
            let rows = &x[mb * MB * k..(mb * MB + MB).min(m) * k];
            pack_rows_wide(rows, k, parts, block);
        });
        Self {
            data,
            block_bytes: lines_per_block * 64,
        }
    }
}

/// One row block's inputs (`rows`: up to 32 rows of `k`) into its packed lines (`block`, zero).
#[inline(always)]
fn pack_rows(rows: &[f32], k: usize, parts: Parts, block: &mut [Line]) {
    let p = parts.count();
    for (rr, xr) in rows.chunks_exact(k).enumerate() {
        for (s, src) in xr.chunks(KB).enumerate() {
            // line of (step s, part j, row rr)
            let at = |j: usize| (s * p + j) * MB + rr;
            match parts {
                Parts::One => {
                    let line = &mut block[at(0)].0;
                    for (o, &v) in line.iter_mut().zip(src) {
                        *o = bf16_bits(v);
                    }
                }
                Parts::Two => {
                    for (j, &v) in src.iter().enumerate() {
                        let h = super::gemm::round_half_precision(v);
                        let hi = bf16_bits(h);
                        // exact: 11 significant bits are 8 + 3 (bf16 holds both parts)
                        block[at(0)].0[j] = hi;
                        block[at(1)].0[j] = bf16_bits(h - bf16_value(hi));
                    }
                }
                Parts::Three => {
                    for (j, &v) in src.iter().enumerate() {
                        let [h, mi, l] = split3(v);
                        block[at(0)].0[j] = h;
                        block[at(1)].0[j] = mi;
                        block[at(2)].0[j] = l;
                    }
                }
            }
        }
    }
}

super::act::on_widest_unit! {
    /// [`pack_rows`] on the widest vector unit (the crate's baseline is SSE2).
    fn pack_rows_wide(rows: &[f32], k: usize, parts: Parts, block: &mut [Line]) => pack_rows
}

/// [`block`]'s sums computed in f64 from the same packed layouts and stored as f32 in
/// [`Scratch`]'s order (the unit tests and the `gemm` fuzz target: the unit's path checked on
/// any CPU).
///
/// # Safety
/// As [`block`]'s, without the tile configuration.
unsafe fn emulated_block(p: usize, a: *const u8, b: *const u8, steps: usize, c: *mut f32) {
    let val = |ptr: *const u8, i: usize| {
        // SAFETY: the caller's contract covers every index used below.
        bf16_value(unsafe { ptr.cast::<u16>().add(i).read() }) as f64
    };
    for r in 0..MB {
        for j in 0..NB {
            let mut acc = 0.0f64;
            for s in 0..steps {
                let bs = b.wrapping_add(s * B_STEP + (j / 16) * 1024);
                for part in 0..p {
                    let arow = a.wrapping_add((s * p + part) * A_STEP + r * 64);
                    for t in 0..16 {
                        for e in 0..2 {
                            acc += val(arow, 2 * t + e) * val(bs, t * 32 + (j % 16) * 2 + e);
                        }
                    }
                }
            }
            // Scratch's order: tile (r / 16, j / 16), row r % 16, column j % 16
            let at = ((r / 16) * 2 + j / 16) * 256 + (r % 16) * 16 + j % 16;
            // SAFETY: 1024 f32 at c (the caller's contract).
            unsafe { c.add(at).write(acc as f32) };
        }
    }
}

#[cfg(test)]
#[path = "amx_tests.rs"]
mod tests;
