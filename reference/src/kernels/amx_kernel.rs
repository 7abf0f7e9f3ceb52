//! The AMX unit's own code: the tile configuration, the block kernel that `kernels::amx`
//! runs per 32 x 32 output block (inline `asm!`: the AMX intrinsics are not stable), its weight
//! prefetch, and the register-only ceiling loop and the block kernel's probe that the benches
//! print. Everything here needs AMX available and the tile state granted
//! ([`super::amx::available`]).

use super::amx::{A_STEP, B_STEP, Line, Order, Parts, Scratch, available};

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
/// on them. Default: T1 (into L2), 16 steps (32 KiB) ahead, on a task's first pass over a
/// weight block only in the bf16 mode (that pass streams the block from memory; the later ones
/// find it in L2) and on every pass for three parts; `GLM5V_CPU_AMX_PF=none|t0|t1|first` and
/// `GLM5V_CPU_AMX_PF_STEPS=N` choose others, for measuring. Measured on the GPU machine's Xeon
/// (2 of its cores, `full_geometry`, best of 5, one noisy run each): f32 by three products 8x8
/// 0.309 s without prefetch, 0.257 with T0 8 ahead, 0.170 with T1 16 ahead (32x32 3.98, 3.56,
/// 2.90 s); bf16 8x8 0.150, 0.124, 0.127 s. First pass only against every pass, bf16 with the
/// pipelined step, settings taking turns in one process (`GLM5V_AB_AMX`): GEMMs at the 32x32
/// shapes 727-1041 against 678-937 GFLOP/s (each shape 7-11% higher), forwards 32x32 median
/// 1.900 against 1.991 s, 8x8 0.101 both. Past the end of the weights they touch nothing:
/// prefetches never fault.
macro_rules! prefetch_step {
    (t0) => {
        concat!(
            lines16!("prefetcht0", "pf", "0"),
            lines16!("prefetcht0", "pf", "1024")
        )
    };
    (t1) => {
        concat!(
            lines16!("prefetcht1", "pf", "0"),
            lines16!("prefetcht1", "pf", "1024")
        )
    };
    (none) => {
        ""
    };
}

/// `$op` (a prefetch) on the sixteen consecutive lines of the 1 KiB tile at `{$r} + $base`.
macro_rules! lines16 {
    ($op:literal, $r:literal, $base:literal) => {
        concat!(
            asm_line!($op, $r, $base, "0"),
            asm_line!($op, $r, $base, "64"),
            asm_line!($op, $r, $base, "128"),
            asm_line!($op, $r, $base, "192"),
            asm_line!($op, $r, $base, "256"),
            asm_line!($op, $r, $base, "320"),
            asm_line!($op, $r, $base, "384"),
            asm_line!($op, $r, $base, "448"),
            asm_line!($op, $r, $base, "512"),
            asm_line!($op, $r, $base, "576"),
            asm_line!($op, $r, $base, "640"),
            asm_line!($op, $r, $base, "704"),
            asm_line!($op, $r, $base, "768"),
            asm_line!($op, $r, $base, "832"),
            asm_line!($op, $r, $base, "896"),
            asm_line!($op, $r, $base, "960"),
        )
    };
}

/// One `$op [{$r} + $base + $off]` line of asm.
macro_rules! asm_line {
    ($op:literal, $r:literal, $base:literal, $off:literal) => {
        concat!($op, " [{", $r, "} + ", $base, " + ", $off, "]\n")
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

/// The block's four accumulators stored at `{c}` in [`Scratch`]'s order (C00, C01, C10, C11).
macro_rules! store_c {
    () => {
        concat!(
            "tilestored [{c} + {s}*1], tmm0\n",
            "tilestored [{c} + {s}*1 + 1024], tmm1\n",
            "tilestored [{c} + {s}*1 + 2048], tmm2\n",
            "tilestored [{c} + {s}*1 + 3072], tmm3\n",
        )
    };
}

/// A 32 x 32 output block's sums over `steps` steps of 32 inputs: `a` the packed input tiles
/// (per step and part two 1 KiB tiles, rows 0-15 then 16-31; `sa` bytes a step), `b` the
/// weight tiles (2 KiB a step, contiguous; `sb` bytes a step), `pf` the weights to prefetch
/// (advanced `sb` a step), stored into `c` ([`Scratch`]'s order). The grouped step: the step's
/// tile loads, then its products.
macro_rules! amx_block {
    ($name:ident, $hint:tt, $(($off:literal, $off2:literal)),+) => {
        /// # Safety
        /// The tile configuration loaded; `steps` input steps at `a` (`sa` bytes apart),
        /// `steps` weight steps at `b` (`sb` apart), 4 KiB writable at `c` (64-byte aligned).
        #[cfg(target_arch = "x86_64")]
        #[allow(clippy::too_many_arguments)]
        unsafe fn $name(
            a: *const u8,
            b: *const u8,
            pf: *const u8,
            steps: usize,
            c: *mut f32,
            sa: usize,
            sb: usize,
        ) {
            // SAFETY: the caller's contract; only tile registers and the named GPRs are touched.
            unsafe {
                std::arch::asm!(
                    "tilezero tmm0", "tilezero tmm1", "tilezero tmm2", "tilezero tmm3",
                    "2:",
                    prefetch_step!($hint),
                    "tileloadd tmm6, [{b} + {s}*1]",
                    "tileloadd tmm7, [{b} + {s}*1 + 1024]",
                    $(part!($off, $off2),)+
                    "add {a}, {sa}",
                    "add {b}, {sb}",
                    "add {pf}, {sb}",
                    "dec {n}",
                    "jnz 2b",
                    store_c!(),
                    a = inout(reg) a => _,
                    b = inout(reg) b => _,
                    pf = inout(reg) pf => _,
                    n = inout(reg) steps => _,
                    s = in(reg) 64usize,
                    c = in(reg) c,
                    sa = in(reg) sa,
                    sb = in(reg) sb,
                    options(nostack),
                );
            }
        }
    };
}

amx_block!(block_1_none, none, ("0", "1024"));
amx_block!(block_1_t0, t0, ("0", "1024"));
amx_block!(block_1_t1, t1, ("0", "1024"));
amx_block!(block_2_none, none, ("0", "1024"), ("2048", "3072"));
amx_block!(block_2_t0, t0, ("0", "1024"), ("2048", "3072"));
amx_block!(block_2_t1, t1, ("0", "1024"), ("2048", "3072"));
amx_block!(
    block_3_none,
    none,
    ("0", "1024"),
    ("2048", "3072"),
    ("4096", "5120")
);
amx_block!(
    block_3_t0,
    t0,
    ("0", "1024"),
    ("2048", "3072"),
    ("4096", "5120")
);
amx_block!(
    block_3_t1,
    t1,
    ("0", "1024"),
    ("2048", "3072"),
    ("4096", "5120")
);

/// The L1 prefetch of the pipelined step's tile `$i` (0-3: a later step's input rows 0-15 and
/// 16-31, weight columns 0-15 and 16-31).
macro_rules! l1_pf {
    (0) => {
        lines16!("prefetcht0", "pa", "0")
    };
    (1) => {
        lines16!("prefetcht0", "pa", "1024")
    };
    (2) => {
        lines16!("prefetcht0", "pb", "0")
    };
    (3) => {
        lines16!("prefetcht0", "pb", "1024")
    };
}

/// The one-part block with the pipelined step: each of the next step's tiles is loaded as soon
/// as the step's last product that reads its register has been issued, in the order the next
/// step's products read them (C01 = A0·B1, C11 = A1·B1, C00 = A0·B0, C10 = A1·B0; B1 is free
/// after the second product, A0 after the third, A1 and B0 after the fourth), and the four
/// tiles `ahead` steps on are prefetched into L1, a tile between products. The unit has eight
/// tile registers, four of them the accumulators, so the grouped step's loads wait for the
/// whole previous step and its products for the loads' latency; here A0 and A1 have one
/// product's time (16 cycles) between their load and their first reader, B0 and B1 two, which
/// is enough only from L1 (the prefetch). Same arguments and contract as [`amx_block`]'s, and
/// `ahead`.
///
/// Measured on the GPU machine's Xeon (2 cores, `full_geometry` with `GLM5V_AB_AMX`: settings
/// taking turns in one process; two calls), against the grouped step with every-pass weight
/// prefetch: GEMMs at the tower's 32x32 shapes 671-759 -> 727-1041 and 856-1187 -> 941-1296
/// GFLOP/s; forwards 8x8 median 0.116 -> 0.101 and 0.086 -> 0.080 s, 32x32 1.750 -> 1.520 s
/// (the other call 1.853 -> 1.900, inside its spread: best 1.725 -> 1.563). The block alone
/// (`block_gflops`) over tiles that stay in L1 ran at 1955-2100 GFLOP/s a thread (~90-96% of
/// the unit), over L2-resident ones at 510-780: what is left is getting the tiles into L1.
/// Prefetching 4 steps ahead instead of 2 measured the same; prefetching only the inputs' two
/// tiles, only the weights', or none, slower at every 32x32 shape (one process, settings
/// taking turns: qkv 975 against 891, 816, 846 GFLOP/s; gate+up 902 against 862, 780, 713;
/// down 819 against 721, 690, 610), though in the L2 probe they ran faster (1087-1105
/// against 532 a thread): the probe's blocks do not see the products' L2 traffic. An L1 pass (8 or 16 steps of a
/// row block's inputs run over every column block of a group, sums kept in scratch tiles
/// between passes) was slower (32x32 forwards median 1.612 and 1.728 against 1.520 s) and was
/// removed.
macro_rules! amx_pipe {
    ($name:ident, $hint:tt) => {
        /// # Safety
        /// As the `amx_block!` functions'.
        #[cfg(target_arch = "x86_64")]
        #[allow(clippy::too_many_arguments)]
        unsafe fn $name(
            a: *const u8,
            b: *const u8,
            pf: *const u8,
            steps: usize,
            c: *mut f32,
            sa: usize,
            sb: usize,
            ahead: usize,
        ) {
            let (pa, pb) = (a.wrapping_add(ahead * sa), b.wrapping_add(ahead * sb));
            // SAFETY: the caller's contract; the loads of a next step happen only when there
            // is one, prefetches never fault.
            unsafe {
                std::arch::asm!(
                    "tilezero tmm0", "tilezero tmm1", "tilezero tmm2", "tilezero tmm3",
                    "tileloadd tmm7, [{b} + {s}*1 + 1024]",
                    "tileloadd tmm4, [{a} + {s}*1]",
                    "tileloadd tmm5, [{a} + {s}*1 + 1024]",
                    "tileloadd tmm6, [{b} + {s}*1]",
                    "2:",
                    prefetch_step!($hint),
                    "dec {n}",
                    "jz 3f",
                    "tdpbf16ps tmm1, tmm4, tmm7",
                    l1_pf!(0),
                    "tdpbf16ps tmm3, tmm5, tmm7",
                    "add {a}, {sa}",
                    "add {b}, {sb}",
                    "tileloadd tmm7, [{b} + {s}*1 + 1024]",
                    l1_pf!(1),
                    "tdpbf16ps tmm0, tmm4, tmm6",
                    "tileloadd tmm4, [{a} + {s}*1]",
                    l1_pf!(2),
                    "tdpbf16ps tmm2, tmm5, tmm6",
                    "tileloadd tmm5, [{a} + {s}*1 + 1024]",
                    "tileloadd tmm6, [{b} + {s}*1]",
                    l1_pf!(3),
                    "add {pf}, {sb}",
                    "add {pa}, {sa}",
                    "add {pb}, {sb}",
                    "jmp 2b",
                    "3:",
                    "tdpbf16ps tmm1, tmm4, tmm7",
                    "tdpbf16ps tmm3, tmm5, tmm7",
                    "tdpbf16ps tmm0, tmm4, tmm6",
                    "tdpbf16ps tmm2, tmm5, tmm6",
                    store_c!(),
                    a = inout(reg) a => _,
                    b = inout(reg) b => _,
                    pf = inout(reg) pf => _,
                    pa = inout(reg) pa => _,
                    pb = inout(reg) pb => _,
                    n = inout(reg) steps => _,
                    s = in(reg) 64usize,
                    c = in(reg) c,
                    sa = in(reg) sa,
                    sb = in(reg) sb,
                    options(nostack),
                );
            }
        }
    };
}

amx_pipe!(pipe_1_none, none);
amx_pipe!(pipe_1_t0, t0);
amx_pipe!(pipe_1_t1, t1);

/// The hint of [`prefetch_step`] (none, into L1, into L2).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Hint {
    None,
    T0,
    T1,
}

/// The weight prefetch: the hint and steps ahead, and on which passes over a weight block it
/// runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Prefetch {
    hint: Hint,
    steps: usize,
    passes: Passes,
}

/// Which of a task's passes over a weight block prefetch its weights.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Passes {
    /// Every pass.
    All,
    /// The first only (it streams the block from memory; the later ones find it in L2).
    First,
    /// The default: the first only for one part, every pass for three (see [`block`]).
    Auto,
}

/// How a one-part step orders its tile loads and products.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Step {
    /// The step's four tile loads, then its four products (`amx_block!`).
    Grouped,
    /// Each next-step tile loaded as soon as its register is free, a later step's tiles
    /// prefetched into L1 (`amx_pipe!`; the default).
    Pipelined,
}

/// The kernel settings: the weight prefetch, the one-part step, how many steps ahead its L1
/// prefetch runs, and the order of a product's blocks and chunks (`kernels::amx`'s).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Settings {
    pf: Prefetch,
    step: Step,
    ahead: usize,
    order: Order,
}

fn parse_prefetch(mode: Option<&str>, steps: usize) -> Prefetch {
    let (hint, passes) = match mode {
        Some("none") => (Hint::None, Passes::All),
        Some("t0") => (Hint::T0, Passes::All),
        Some("t1") => (Hint::T1, Passes::All),
        Some("first") => (Hint::T1, Passes::First),
        _ => (Hint::T1, Passes::Auto),
    };
    Prefetch {
        hint,
        steps,
        passes,
    }
}

impl Settings {
    /// The settings in one word (never 0: the step count is stored plus one).
    fn encode(self) -> u64 {
        let hint = self.pf.hint as u64;
        let passes = self.pf.passes as u64;
        let step = self.step as u64;
        let order = self.order as u64;
        hint | passes << 2
            | step << 4
            | order << 5
            | (self.ahead.min(255) as u64) << 8
            | (self.pf.steps.min(1 << 20) as u64 + 1) << 16
    }

    fn decode(v: u64) -> Self {
        Settings {
            pf: Prefetch {
                hint: [Hint::None, Hint::T0, Hint::T1][(v & 3) as usize],
                passes: [Passes::All, Passes::First, Passes::Auto][(v >> 2 & 3) as usize],
                steps: (v >> 16) as usize - 1,
            },
            step: [Step::Grouped, Step::Pipelined][(v >> 4 & 1) as usize],
            ahead: (v >> 8 & 255) as usize,
            order: [Order::Auto, Order::ChunkMajor][(v >> 5 & 1) as usize],
        }
    }
}

/// [`Settings::encode`]d (0: not read yet).
static SETTINGS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The settings: from `GLM5V_CPU_AMX_PF` (`none|t0|t1|first`), `GLM5V_CPU_AMX_PF_STEPS`,
/// `GLM5V_CPU_AMX_STEP` (`grouped|pipelined`), `GLM5V_CPU_AMX_AHEAD` and
/// `GLM5V_CPU_AMX_ORDER` (`chunk`) on first use, or as [`set_for_measuring`] left them.
fn settings() -> Settings {
    use std::sync::atomic::Ordering::Relaxed;
    match SETTINGS.load(Relaxed) {
        0 => {
            let num = |name: &str, default: usize| {
                std::env::var(name)
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(default)
            };
            let s = Settings {
                pf: parse_prefetch(
                    std::env::var("GLM5V_CPU_AMX_PF").ok().as_deref(),
                    num("GLM5V_CPU_AMX_PF_STEPS", 16),
                ),
                step: match std::env::var("GLM5V_CPU_AMX_STEP").as_deref() {
                    Ok("grouped") => Step::Grouped,
                    _ => Step::Pipelined,
                },
                ahead: num("GLM5V_CPU_AMX_AHEAD", 2).clamp(1, 255),
                order: match std::env::var("GLM5V_CPU_AMX_ORDER").as_deref() {
                    Ok("chunk") => Order::ChunkMajor,
                    _ => Order::Auto,
                },
            };
            SETTINGS.store(s.encode(), Relaxed);
            s
        }
        v => Settings::decode(v),
    }
}

/// Sets the weight prefetch (`none|t0|t1|first|auto`, 16 steps ahead), the one-part step, its
/// L1 prefetch distance (steps) and the order of blocks and chunks, as the environment
/// variables do, for benchmarks that alternate settings in one process.
#[doc(hidden)]
pub fn set_for_measuring(prefetch: &str, step: Step, ahead: usize, order: Order) {
    let s = Settings {
        pf: parse_prefetch(Some(prefetch), 16),
        step,
        ahead: ahead.clamp(1, 255),
        order,
    };
    SETTINGS.store(s.encode(), std::sync::atomic::Ordering::Relaxed);
}

/// The order of a product's blocks and chunks ([`super::amx::order`]).
pub(super) fn order() -> Order {
    settings().order
}

/// One block through the variant [`settings`] picks; `stream`: the task's first pass over
/// these weights; `sa`, `sb`: bytes between the input and the weight steps.
///
/// # Safety
/// As the `amx_block!` functions'.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn block(
    p: usize,
    a: *const u8,
    b: *const u8,
    steps: usize,
    c: *mut f32,
    stream: bool,
    sa: usize,
    sb: usize,
) {
    let Settings {
        pf, step, ahead, ..
    } = settings();
    let first_only = match pf.passes {
        Passes::All => false,
        Passes::First => true,
        Passes::Auto => p == 1,
    };
    let hint = if first_only && !stream {
        Hint::None
    } else {
        pf.hint
    };
    let q = b.wrapping_add(pf.steps * sb);
    // SAFETY: the caller's contract.
    unsafe {
        match (p, step, hint) {
            (1, Step::Grouped, Hint::None) => block_1_none(a, b, q, steps, c, sa, sb),
            (1, Step::Grouped, Hint::T0) => block_1_t0(a, b, q, steps, c, sa, sb),
            (1, Step::Grouped, Hint::T1) => block_1_t1(a, b, q, steps, c, sa, sb),
            (1, Step::Pipelined, Hint::None) => pipe_1_none(a, b, q, steps, c, sa, sb, ahead),
            (1, Step::Pipelined, Hint::T0) => pipe_1_t0(a, b, q, steps, c, sa, sb, ahead),
            (1, Step::Pipelined, Hint::T1) => pipe_1_t1(a, b, q, steps, c, sa, sb, ahead),
            (2, _, Hint::None) => block_2_none(a, b, q, steps, c, sa, sb),
            (2, _, Hint::T0) => block_2_t0(a, b, q, steps, c, sa, sb),
            (2, _, Hint::T1) => block_2_t1(a, b, q, steps, c, sa, sb),
            (_, _, Hint::None) => block_3_none(a, b, q, steps, c, sa, sb),
            (_, _, Hint::T0) => block_3_t0(a, b, q, steps, c, sa, sb),
            (_, _, Hint::T1) => block_3_t1(a, b, q, steps, c, sa, sb),
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
/// MiB in memory; a `span` of 0 has every step of every block read the same tiles (one step's:
/// L1, with no step-to-step movement at all). Best of three runs; `None` without AMX. For
/// measuring where the unit's products wait (`full_geometry`'s probe lines).
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
        let (sa, sb) = if span == 0 {
            (0, 0)
        } else {
            (p * A_STEP, B_STEP)
        };
        // whole blocks of inputs (p * A_STEP a step) and weights (B_STEP a step), half the span
        // each (one step each for span 0)
        let a_block = if span == 0 {
            p * A_STEP
        } else {
            steps * p * A_STEP
        };
        let b_block = if span == 0 { B_STEP } else { steps * B_STEP };
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
                    fill(b_blocks * b_block + 18 * B_STEP),
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
                    block(p, ap, bp, steps, c.0.as_mut_ptr(), true, sa, sb);
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
