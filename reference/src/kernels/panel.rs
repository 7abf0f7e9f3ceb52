//! f32 `Linear` products over a weight repacked once at load (AVX-512, or AVX2 + FMA): `W`
//! `[n, k]` stored as 64-column panels of its transpose, panel `p` holding `W[64p + c][kk]` at
//! `kk * 64 + c`.
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
//!
//! Two register tiles run the same blocking (`Tile`): AVX-512's R x 64 (four 16-lane vectors a
//! row), and on CPUs with AVX2 + FMA but no AVX-512 (AMD Zen 2/3, older Intel) an R x 16 one
//! (two 8-lane vectors a row, 12 accumulators of the 16 ymm registers) run over the panel's four
//! 16-column quarters in turn, on the panel sub-chunk in L1 (`avx2`). Both sum in the same order,
//! so they give the same bits. The `gemm` crate there (`Isa::Generic`) packs the weight on every
//! call as it does here, and ran a 64-row product at about half its large-matrix rate (an 8x8
//! forward on a 2-core Zen 3: 0.745 s, 77 GFLOP/s). Measured on this machine's AVX2 (the AVX2 tile
//! against the `gemm` crate built without its AVX-512 kernels, as on those CPUs; three
//! alternating runs each, best-of forwards): the products at 204-220 GFLOP/s on 2 threads at 64
//! and 1024 rows (the crate's 155-167 and 179-191), an 8x8 forward 0.401-0.405 s -> 0.303-0.307
//! s, a 32x32 one 5.41-5.52 s -> 5.36-5.42 s.
//!
//! Layout: this file holds the blocking's constants, [`available`], `Tile` and [`Panels`]
//! (packing the weight, splitting a product into tasks); `task` holds one task's cache-blocked
//! loop, `tile` the AVX-512 R x 64 register tile, `avx2` the AVX2 one with its widening, `bf16`
//! the paired bf16 storage and its AVX-512 widening, `rows` the packing of x into row tiles,
//! `buf` the panels' memory (huge pages), `tests` the products checked against f64 sums and
//! against the blocked sums bit for bit, on every tile this CPU runs.

mod avx2;
mod bf16;
mod buf;
mod rows;
mod task;
mod tile;

#[cfg(test)]
mod tests;

use bf16::paired_pos;
pub(crate) use buf::PanelBuf;
use rows::pack_rows;
use task::Src;
#[cfg(target_arch = "x86_64")]
use task::{Task, group_task};

use ndarray::ArrayView2;
use rayon::prelude::*;

/// Columns per panel (four AVX-512 vectors, eight AVX2 ones).
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

/// Whether this CPU runs the panel kernel (AVX-512F, or AVX2 + FMA; as [`isa`](super::isa::isa)
/// allows).
pub fn available() -> bool {
    Tile::chosen().is_some()
}

/// The register tile a product runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tile {
    /// AVX2 + FMA: R x 16 over each 16-column quarter of a panel (two 8-lane vectors a row).
    Avx2,
    /// AVX-512F: R x 64, the whole panel (four 16-lane vectors a row).
    Avx512,
}

impl Tile {
    /// The tile for the level the kernels use ([`isa`](super::isa::isa)); `None` at `generic`.
    fn chosen() -> Option<Tile> {
        use super::isa::Isa;
        match super::isa::isa() {
            Isa::Generic => None,
            Isa::Avx2 => Some(Tile::Avx2),
            Isa::Avx512 | Isa::Avx512Bf16 | Isa::Amx => Some(Tile::Avx512),
        }
    }

    /// Whether this CPU has the tile's instructions (whatever `GLM5V_CPU_ISA` says).
    fn runs_here(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            match self {
                Tile::Avx2 => {
                    std::arch::is_x86_feature_detected!("avx2")
                        && std::arch::is_x86_feature_detected!("fma")
                }
                Tile::Avx512 => std::arch::is_x86_feature_detected!("avx512f"),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }
}

/// The tile [`Panels::linear_into`] runs on.
///
/// # Panics
/// Where there is none ([`available`]).
fn chosen() -> Tile {
    Tile::chosen().expect("panel linear needs AVX-512F or AVX2 + FMA")
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
    /// If the lengths disagree with the shapes or the CPU lacks the kernel ([`available`]).
    pub fn linear_into(&self, x: &[f32], m: usize, bias: Option<&[f32]>, y: &mut [f32]) {
        self.linear_impl(chosen(), x, m, bias, None, y)
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
        self.linear_impl(chosen(), x, m, bias, Some(residual), y)
    }

    /// The product on `tile` (which this CPU must run: [`Tile::runs_here`]), residual optional.
    fn linear_impl(
        &self,
        tile: Tile,
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
        assert!(
            tile.runs_here(),
            "panel linear: this CPU lacks the {tile:?} tile"
        );
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
        let xp = pack_rows(x, m, k, tile);
        let x = &xp[..];
        super::team::for_each(groups * row_tasks, |t| {
            let (g, rt) = (t / row_tasks, t % row_tasks);
            let r0 = rt * rows_per;
            let r1 = (r0 + rows_per).min(m);
            if r0 >= r1 {
                return;
            }
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the tile's instructions were checked; each task writes rows r0..r1 of the
            // columns of its panels (clipped to n) of `y`, disjoint from every other task's;
            // reads stay inside `x`, the panels, `bias` and `residual` (null when none; lengths
            // asserted above).
            unsafe {
                group_task(
                    tile,
                    Task {
                        x,
                        data: match &self.data {
                            Store::F32(d) => Src::F32(d.as_slice()),
                            Store::Bf16(d) => Src::Bf16(d.as_slice()),
                        },
                        bias,
                        y: y_addr as *mut f32,
                        resid: resid_addr as *const f32,
                        nk: (n, k),
                        panels: g * group..((g + 1) * group).min(np),
                        rows: r0..r1,
                    },
                );
            }
        });
    }
}
