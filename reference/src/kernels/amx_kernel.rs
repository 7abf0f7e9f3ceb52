//! The AMX unit's own code: the tile configuration, the block kernel that `kernels::amx`
//! runs per 32 x 32 output block (inline `asm!`: the AMX intrinsics are not stable), its weight
//! prefetch, and the register-only ceiling loop and the block kernel's probe that the benches
//! print. Everything here needs AMX available and the tile state granted
//! ([`super::amx::available`]).

use super::amx::{A_STEP, B_STEP, Line, Parts, Scratch, available};

/// The tile configuration: palette 1, all eight tiles 16 rows of 64 bytes.
#[repr(C, align(64))]
struct TileConfig([u8; 64]);

const CONFIG: TileConfig = {
    let mut c = [0u8; 64];
    c[0] = 1;
    let mut t = 0;
    while t < 8 {
        c[16 + 2 * t] = 64;
        c[48 + t] = 16;
        t += 1;
    }
    TileConfig(c)
};

/// Loads [`CONFIG`] into this thread's tile configuration.
///
/// # Safety
/// AMX available and the tile state granted to the process.
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn load_config() {
    // SAFETY: reads the 64-byte configuration; the caller's contract for AMX.
    unsafe {
        std::arch::asm!("ldtilecfg [{}]", in(reg) &CONFIG, options(nostack, readonly));
    }
}

/// The weight lines of a later step (`pf`, 2 KiB a step), prefetched during each step: the
/// weights stream from memory once per forward, and with the tile loads alone the unit waited
/// on them. Default: T1 (into L2), 16 steps (32 KiB) ahead; `GLM5V_CPU_AMX_PF=none|t0|t1|first`
/// and `GLM5V_CPU_AMX_PF_STEPS=N` choose others, for measuring. Measured on the GPU machine's
/// Xeon (2 of its cores, `full_geometry`, best of 5, one noisy run each): f32 by three products
/// 8x8 0.309 s without prefetch, 0.257 with T0 8 ahead, 0.170 with T1 16 ahead (32x32 3.98,
/// 3.56, 2.90 s); bf16 8x8 0.150, 0.124, 0.127 s. Past the end of the weights they touch
/// nothing: prefetches never fault.
///
/// The cost: the block kernel alone (`block_gflops`, one thread, 32-step blocks from L2) ran a
/// one-part step (4 tile loads, 4 products) slower than a three-part step (8 loads, 12
/// products), 521 against 1904 GFLOP/s a thread, and the 32 prefetches a step are what the two
/// share. `first` prefetches on a task's first pass over a weight block only (the one that
/// streams it from memory; later passes find it in L2); not yet measured on the unit.
macro_rules! prefetch_step {
    (t0) => {
        concat!(
            "prefetcht0 [{pf} + 0]\n",
            "prefetcht0 [{pf} + 64]\n",
            "prefetcht0 [{pf} + 128]\n",
            "prefetcht0 [{pf} + 192]\n",
            "prefetcht0 [{pf} + 256]\n",
            "prefetcht0 [{pf} + 320]\n",
            "prefetcht0 [{pf} + 384]\n",
            "prefetcht0 [{pf} + 448]\n",
            "prefetcht0 [{pf} + 512]\n",
            "prefetcht0 [{pf} + 576]\n",
            "prefetcht0 [{pf} + 640]\n",
            "prefetcht0 [{pf} + 704]\n",
            "prefetcht0 [{pf} + 768]\n",
            "prefetcht0 [{pf} + 832]\n",
            "prefetcht0 [{pf} + 896]\n",
            "prefetcht0 [{pf} + 960]\n",
            "prefetcht0 [{pf} + 1024]\n",
            "prefetcht0 [{pf} + 1088]\n",
            "prefetcht0 [{pf} + 1152]\n",
            "prefetcht0 [{pf} + 1216]\n",
            "prefetcht0 [{pf} + 1280]\n",
            "prefetcht0 [{pf} + 1344]\n",
            "prefetcht0 [{pf} + 1408]\n",
            "prefetcht0 [{pf} + 1472]\n",
            "prefetcht0 [{pf} + 1536]\n",
            "prefetcht0 [{pf} + 1600]\n",
            "prefetcht0 [{pf} + 1664]\n",
            "prefetcht0 [{pf} + 1728]\n",
            "prefetcht0 [{pf} + 1792]\n",
            "prefetcht0 [{pf} + 1856]\n",
            "prefetcht0 [{pf} + 1920]\n",
            "prefetcht0 [{pf} + 1984]\n",
        )
    };
    (t1) => {
        concat!(
            "prefetcht1 [{pf} + 0]\n",
            "prefetcht1 [{pf} + 64]\n",
            "prefetcht1 [{pf} + 128]\n",
            "prefetcht1 [{pf} + 192]\n",
            "prefetcht1 [{pf} + 256]\n",
            "prefetcht1 [{pf} + 320]\n",
            "prefetcht1 [{pf} + 384]\n",
            "prefetcht1 [{pf} + 448]\n",
            "prefetcht1 [{pf} + 512]\n",
            "prefetcht1 [{pf} + 576]\n",
            "prefetcht1 [{pf} + 640]\n",
            "prefetcht1 [{pf} + 704]\n",
            "prefetcht1 [{pf} + 768]\n",
            "prefetcht1 [{pf} + 832]\n",
            "prefetcht1 [{pf} + 896]\n",
            "prefetcht1 [{pf} + 960]\n",
            "prefetcht1 [{pf} + 1024]\n",
            "prefetcht1 [{pf} + 1088]\n",
            "prefetcht1 [{pf} + 1152]\n",
            "prefetcht1 [{pf} + 1216]\n",
            "prefetcht1 [{pf} + 1280]\n",
            "prefetcht1 [{pf} + 1344]\n",
            "prefetcht1 [{pf} + 1408]\n",
            "prefetcht1 [{pf} + 1472]\n",
            "prefetcht1 [{pf} + 1536]\n",
            "prefetcht1 [{pf} + 1600]\n",
            "prefetcht1 [{pf} + 1664]\n",
            "prefetcht1 [{pf} + 1728]\n",
            "prefetcht1 [{pf} + 1792]\n",
            "prefetcht1 [{pf} + 1856]\n",
            "prefetcht1 [{pf} + 1920]\n",
            "prefetcht1 [{pf} + 1984]\n",
        )
    };
    (none) => {
        ""
    };
}

/// The products of one part: its two input tiles at byte offsets `$off` (rows 0-15) and `$off2`
/// (rows 16-31) of the step.
macro_rules! part {
    ($off:literal, $off2:literal) => {
        concat!(
            "tileloadd tmm4, [{a} + {s}*1 + ",
            $off,
            "]\n",
            "tileloadd tmm5, [{a} + {s}*1 + ",
            $off2,
            "]\n",
            "tdpbf16ps tmm0, tmm4, tmm6\n",
            "tdpbf16ps tmm1, tmm4, tmm7\n",
            "tdpbf16ps tmm2, tmm5, tmm6\n",
            "tdpbf16ps tmm3, tmm5, tmm7\n",
        )
    };
}

/// A 32 x 32 output block's sums over `steps` steps of 32 inputs: `a` the packed input tiles
/// (per step and part two 1 KiB tiles, rows 0-15 then 16-31; `$stride` bytes a step), `b` the
/// weight tiles (2 KiB a step, contiguous), `pf` the weights to prefetch (advanced 2 KiB a
/// step), stored into `c` ([`Scratch`]'s order).
macro_rules! amx_block {
    ($name:ident, $hint:tt, $stride:literal, $(($off:literal, $off2:literal)),+) => {
        /// # Safety
        /// The tile configuration loaded; `steps` input steps at `a`, `steps * 2048` bytes at
        /// `b`, 4 KiB writable at `c` (64-byte aligned).
        #[cfg(target_arch = "x86_64")]
        pub(super) unsafe fn $name(a: *const u8, b: *const u8, pf: *const u8, steps: usize, c: *mut f32) {
            // SAFETY: the caller's contract; only tile registers and the named GPRs are touched.
            unsafe {
                std::arch::asm!(
                    "tilezero tmm0", "tilezero tmm1", "tilezero tmm2", "tilezero tmm3",
                    "2:",
                    prefetch_step!($hint),
                    "tileloadd tmm6, [{b} + {s}*1]",
                    "tileloadd tmm7, [{b} + {s}*1 + 1024]",
                    $(part!($off, $off2),)+
                    concat!("add {a}, ", $stride),
                    "add {b}, 2048",
                    "add {pf}, 2048",
                    "dec {n}",
                    "jnz 2b",
                    "tilestored [{c} + {s}*1], tmm0",
                    "tilestored [{c} + {s}*1 + 1024], tmm1",
                    "tilestored [{c} + {s}*1 + 2048], tmm2",
                    "tilestored [{c} + {s}*1 + 3072], tmm3",
                    a = inout(reg) a => _,
                    b = inout(reg) b => _,
                    pf = inout(reg) pf => _,
                    n = inout(reg) steps => _,
                    s = in(reg) 64usize,
                    c = in(reg) c,
                    options(nostack),
                );
            }
        }
    };
}

amx_block!(block_1_none, none, "2048", ("0", "1024"));
amx_block!(block_1_t0, t0, "2048", ("0", "1024"));
amx_block!(block_1_t1, t1, "2048", ("0", "1024"));
amx_block!(
    block_3_none,
    none,
    "6144",
    ("0", "1024"),
    ("2048", "3072"),
    ("4096", "5120")
);
amx_block!(
    block_3_t0,
    t0,
    "6144",
    ("0", "1024"),
    ("2048", "3072"),
    ("4096", "5120")
);
amx_block!(
    block_3_t1,
    t1,
    "6144",
    ("0", "1024"),
    ("2048", "3072"),
    ("4096", "5120")
);

/// The hint of [`prefetch_step`] (none, into L1, into L2).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Hint {
    None,
    T0,
    T1,
}

/// The prefetch setting: the hint and steps ahead, and whether it applies only to a task's
/// first pass over a weight block (`first`: the pass that streams it from memory; on the
/// passes after it the block is in L2, and no prefetch runs).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Prefetch {
    hint: Hint,
    steps: usize,
    first_pass_only: bool,
}

fn prefetch() -> Prefetch {
    static P: std::sync::OnceLock<Prefetch> = std::sync::OnceLock::new();
    *P.get_or_init(|| {
        let steps = std::env::var("GLM5V_CPU_AMX_PF_STEPS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(16);
        let mode = std::env::var("GLM5V_CPU_AMX_PF");
        let hint = match mode.as_deref() {
            Ok("none") => Hint::None,
            Ok("t0") => Hint::T0,
            _ => Hint::T1,
        };
        Prefetch {
            hint,
            steps,
            first_pass_only: mode.as_deref() == Ok("first"),
        }
    })
}

/// One block through the variant [`prefetch`] picks; `stream`: the task's first pass over
/// these weights.
///
/// # Safety
/// As the `amx_block!` functions'.
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn block(
    p: usize,
    a: *const u8,
    b: *const u8,
    steps: usize,
    c: *mut f32,
    stream: bool,
) {
    let pf = prefetch();
    let hint = if pf.first_pass_only && !stream {
        Hint::None
    } else {
        pf.hint
    };
    let q = b.wrapping_add(pf.steps * B_STEP);
    // SAFETY: the caller's contract.
    unsafe {
        match (p, hint) {
            (1, Hint::None) => block_1_none(a, b, q, steps, c),
            (1, Hint::T0) => block_1_t0(a, b, q, steps, c),
            (1, Hint::T1) => block_1_t1(a, b, q, steps, c),
            (_, Hint::None) => block_3_none(a, b, q, steps, c),
            (_, Hint::T0) => block_3_t0(a, b, q, steps, c),
            (_, Hint::T1) => block_3_t1(a, b, q, steps, c),
        }
    }
}

/// Register-only `tdpbf16ps` on six accumulators (no memory operands in the loop).
///
/// # Safety
/// The tile configuration loaded.
#[cfg(target_arch = "x86_64")]
unsafe fn dpbf16_loop(iters: usize) {
    // SAFETY: tile registers only.
    unsafe {
        std::arch::asm!(
            "tilezero tmm0", "tilezero tmm1", "tilezero tmm2", "tilezero tmm3",
            "tilezero tmm4", "tilezero tmm5", "tilezero tmm6", "tilezero tmm7",
            "2:",
            "tdpbf16ps tmm0, tmm6, tmm7",
            "tdpbf16ps tmm1, tmm6, tmm7",
            "tdpbf16ps tmm2, tmm6, tmm7",
            "tdpbf16ps tmm3, tmm6, tmm7",
            "tdpbf16ps tmm4, tmm6, tmm7",
            "tdpbf16ps tmm5, tmm6, tmm7",
            "dec {n}",
            "jnz 2b",
            n = inout(reg) iters.max(1) => _,
            options(nostack, nomem),
        );
    }
}

/// GFLOP/s of `threads` threads running a register-only `tdpbf16ps` loop at once (six 16 x 16
/// accumulators, 32 inputs a product), best of three runs of `iters` iterations; `None`
/// without AMX.
pub fn amx_peak_gflops(threads: usize, iters: usize) -> Option<f64> {
    if !available() {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    {
        let threads = threads.max(1);
        let flops = (threads * iters.max(1)) as f64 * 6.0 * 16.0 * 16.0 * 32.0 * 2.0;
        // SAFETY: AMX is available and the tile state granted (checked above).
        let best = super::peak::best_of_three(threads, flops, || unsafe {
            load_config();
            dpbf16_loop(iters);
        });
        Some(best)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

/// GFLOP/s of `threads` threads each running the unit's block kernel alone (no packing, no
/// sums added to y) over its own inputs and weights of `span` bytes together, `steps` steps a
/// block, `blocks` blocks, moving through the span block by block (wrapping around): a span
/// under L1 (48 KiB) keeps every tile load in L1, one of a few hundred KiB in L2, one of many
/// MiB in memory. Best of three runs; `None` without AMX. For measuring where the unit's
/// products wait (`full_geometry`'s probe lines).
#[doc(hidden)]
pub fn block_gflops(
    threads: usize,
    parts: Parts,
    span: usize,
    steps: usize,
    blocks: usize,
) -> Option<f64> {
    if !available() {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    {
        let p = parts.count();
        let steps = steps.max(1);
        // whole blocks of inputs (p * A_STEP a step) and weights (B_STEP a step), half the span each
        let a_block = steps * p * A_STEP;
        let b_block = steps * B_STEP;
        let a_blocks = (span / 2 / a_block).max(1);
        let b_blocks = (span / 2 / b_block).max(1);
        let flops = (threads.max(1) * blocks.max(1)) as f64 * (steps * 4 * p) as f64 * 16384.0;
        // normal bf16 values, not zeros: +-(1 + j/128), one region per thread, filled before
        // the timing
        let fill = |n: usize| -> Vec<Line> {
            (0..n / 64)
                .map(|i| {
                    Line(std::array::from_fn(|j| {
                        (0x3f80 + ((i + j) % 128) as u16) | ((j as u16 & 1) << 15)
                    }))
                })
                .collect()
        };
        let regions: Vec<(Vec<Line>, Vec<Line>)> = (0..threads.max(1))
            .map(|_| {
                (
                    fill(a_blocks * a_block),
                    fill(b_blocks * b_block + 16 * B_STEP),
                )
            })
            .collect();
        let next = std::sync::atomic::AtomicUsize::new(0);
        let best = super::peak::best_of_three(threads.max(1), flops, || {
            use std::sync::atomic::Ordering::Relaxed;
            let (a, b) = &regions[next.fetch_add(1, Relaxed) % regions.len()];
            let mut c = Scratch([0.0; 4 * 256]);
            // SAFETY: AMX available and granted (checked above); every block's loads stay in
            // a and b (whole blocks; the weights' prefetch runs past b's blocks into its 16
            // spare steps), the stores in c.
            unsafe {
                load_config();
                for i in 0..blocks.max(1) {
                    let ap = a.as_ptr().cast::<u8>().add(i % a_blocks * a_block);
                    let bp = b.as_ptr().cast::<u8>().add(i % b_blocks * b_block);
                    block(p, ap, bp, steps, c.0.as_mut_ptr(), true);
                }
            }
            std::hint::black_box(&c);
        });
        Some(best)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}
