//! Attention's two products on the AMX unit, for the bf16 mode: `softmax(scale · q kᵀ) v` per
//! head with q, k, v and the probabilities p rounded to bf16 as they enter the unit (the GPU's
//! bf16 attention inputs), every product accumulated in f32, the scores, the softmax and the
//! output in f32.
//!
//! Blocked as [`super::attention`]'s general path is (queries in blocks of `QB` = 128, keys in
//! steps of `KBLK` = 256 with an online softmax, no `[n, n]` matrix), with the unit's
//! layouts: per head and segment, K is packed once as the "weight" of `q kᵀ` (key j is output column j) and V
//! once as the weight of `p v` (head dim c is output column c), both in `kernels::amx`'s pair
//! layout; a task packs its queries and, per key step, its probabilities as bf16 rows.
//!
//! Segments of up to 128 tokens (`attention::SHORT`) keep the f32 short path: it is cheap
//! there (an 8x8 image's attention is ~0.15 ms a block) and the committed tower fixtures, all
//! short, keep its accuracy (rounding q, k and v at full depth took the full-geometry fixture
//! from 0.95 to 1.01 of the bf16 tolerance).

use super::amx::{Line, bf16_bits, profile};
use super::amx_kv::{key_lines, pack_kv_block, pack_queries, value_lines, values};
use super::attention::{SHORT, attend_short};
use super::team;
use ndarray::{Array2, ArrayView2, s};

/// Query rows per task (scores of a key step: 128 x 256 f32, 128 KiB, stay in L2).
const QB: usize = 128;
/// Keys per step of the online softmax (a multiple of [`T`]).
const KBLK: usize = 256;
/// Rows and columns of an output block, inputs of a tile step.
const T: usize = 32;
/// u16 values of one packed weight step (two 16 x 32 tiles).
const STEP: usize = 1024;

thread_local! {
    /// The packed K and V of each long (head, segment) of the last call on this thread.
    static KV_BUFFERS: std::cell::Cell<Vec<(Vec<Line>, Vec<Line>)>> =
        const { std::cell::Cell::new(Vec::new()) };
}

/// Query rows per task: [`QB`], or `GLM5V_CPU_AMX_ATTN_QB` (a multiple of 32), for measuring.
fn query_block() -> usize {
    static QB_SET: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *QB_SET.get_or_init(|| {
        std::env::var("GLM5V_CPU_AMX_ATTN_QB")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|v| *v >= T && v % T == 0)
            .unwrap_or(QB)
    })
}

/// Whether the bf16 mode's attention runs here: AMX available (the tile state granted) and not
/// turned off by `GLM5V_CPU_AMX_ATTN=0` (for measuring the f32 attention it replaces).
pub fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    super::amx::available()
        && *ON.get_or_init(|| std::env::var("GLM5V_CPU_AMX_ATTN").as_deref() != Ok("0"))
}

/// `softmax(scale · q kᵀ) v` per head on the unit (bf16 inputs, f32 sums), segments of up to
/// 128 tokens in f32; the shapes of [`super::attention::attention`].
///
/// # Panics
/// If the shapes disagree or AMX is not [`enabled`] (the caller checks).
pub fn attention(
    q: ArrayView2<f32>,
    k: ArrayView2<f32>,
    v: ArrayView2<f32>,
    cu_seqlens: &[usize],
    heads: usize,
    scale: f32,
) -> Array2<f32> {
    assert!(enabled(), "amx attention needs AMX");
    run::<false>(q, k, v, cu_seqlens, heads, scale)
}

/// The products through the unit, or (`EMUL`, tests) through [`emulated_block`], which reads the
/// same packed layouts: the packing and blocking are then checked on any CPU.
fn run<const EMUL: bool>(
    q: ArrayView2<f32>,
    k: ArrayView2<f32>,
    v: ArrayView2<f32>,
    cu_seqlens: &[usize],
    heads: usize,
    scale: f32,
) -> Array2<f32> {
    let (n, d) = q.dim();
    assert!(
        k.dim() == (n, d) && v.dim() == (n, d),
        "attention: q, k, v shapes differ"
    );
    assert!(heads > 0 && d % heads == 0, "attention: heads");
    assert!(
        cu_seqlens.first().is_none_or(|&s| s == 0)
            && cu_seqlens.windows(2).all(|w| w[0] <= w[1])
            && cu_seqlens.last().copied().unwrap_or(0) == n,
        "attention: cu_seqlens must run from 0 to tokens without decreasing"
    );
    let hd = d / heads;
    let segs: Vec<(usize, usize)> = cu_seqlens.windows(2).map(|w| (w[0], w[1])).collect();
    // K and V of every long (head, segment), packed once
    let long: Vec<(usize, usize)> = (0..heads)
        .flat_map(|h| (0..segs.len()).map(move |g| (h, g)))
        .filter(|&(_, g)| segs[g].1 - segs[g].0 > SHORT)
        .collect();
    // in this thread's buffers, kept between calls (fresh ones cost page faults: 4 MiB a
    // layer at 1024 tokens), each sized for its segment (each block zeroes and writes its
    // own lines), packed by blocks of 32 keys over all heads
    let mut packs = KV_BUFFERS.take();
    packs.resize_with(long.len(), Default::default);
    let mut addrs = vec![(0usize, 0usize); long.len()];
    for ((slot, addr), &(_, g)) in packs.iter_mut().zip(&mut addrs).zip(&long) {
        let len = segs[g].1 - segs[g].0;
        slot.0.resize(key_lines(len, hd), Line([0; 32]));
        slot.1.resize(value_lines(len, hd), Line([0; 32]));
        *addr = (slot.0.as_mut_ptr() as usize, slot.1.as_mut_ptr() as usize);
    }
    let blocks: Vec<(usize, usize)> = (0..segs.len())
        .filter(|&g| segs[g].1 - segs[g].0 > SHORT)
        .flat_map(|g| (0..(segs[g].1 - segs[g].0).div_ceil(T)).map(move |b| (g, b)))
        .collect();
    team::for_each(blocks.len(), |t| {
        let time = profile::start();
        let (g, b) = blocks[t];
        let (s0, s1) = segs[g];
        let at = |h: usize| {
            long.binary_search(&(h, g))
                .map(|i| addrs[i])
                .expect("every long (head, segment) has buffers")
        };
        let kout: Vec<*mut Line> = (0..heads).map(|h| at(h).0 as *mut Line).collect();
        let vout: Vec<*mut Line> = (0..heads).map(|h| at(h).1 as *mut Line).collect();
        let rows = s![s0..s1, ..];
        // SAFETY: each head's buffers were sized above for this segment and are not moved
        // while the loop runs; each (segment, block) is one task, so block b's lines are
        // written by this task alone.
        unsafe { pack_kv_block(k.slice(rows), v.slice(rows), heads, b, &kout, &vout) };
        profile::stop(time, 3);
    });
    // tasks: (head, segment, first query, end), covering every (token, head) once
    let mut tasks = Vec::new();
    for h in 0..heads {
        for (g, &(s0, s1)) in segs.iter().enumerate() {
            let rows = if s1 - s0 > SHORT {
                query_block()
            } else {
                SHORT
            };
            let mut r0 = s0;
            while r0 < s1 {
                let r1 = (r0 + rows).min(s1);
                tasks.push((h, g, r0, r1));
                r0 = r1;
            }
        }
    }
    let mut y: Vec<f32> = Vec::with_capacity(n * d);
    let y_addr = y.as_mut_ptr() as usize;
    team::for_each(tasks.len(), |i| {
        let (h, g, r0, r1) = tasks[i];
        let (s0, s1) = segs[g];
        let cols = s![.., h * hd..(h + 1) * hd];
        let qs = q.slice(cols).slice_move(s![r0..r1, ..]);
        // SAFETY (both): rows r0..r1 of y (capacity n * d), the head's hd columns of each:
        // inside y, and written by no other task (tasks cover each (token, head) once).
        let at = unsafe { (y_addr as *mut f32).add(r0 * d + h * hd) };
        if s1 - s0 <= SHORT {
            let (ks, vs) = (
                k.slice(cols).slice_move(s![s0..s1, ..]),
                v.slice(cols).slice_move(s![s0..s1, ..]),
            );
            unsafe { attend_short(qs, ks, vs, scale, at, d) };
            return;
        }
        let p = long
            .binary_search(&(h, g))
            .expect("every long (head, segment) was packed");
        let (kp, vp) = (values(&packs[p].0), values(&packs[p].1));
        TASK_BUFFERS.with_borrow_mut(|bufs| unsafe {
            attend_task::<EMUL>(qs, kp, vp, s1 - s0, hd, scale, at, d, bufs)
        });
    });
    KV_BUFFERS.set(packs);
    // SAFETY: every value of y was written above (the tasks cover all n rows of every head).
    unsafe { y.set_len(n * d) };
    Array2::from_shape_vec((n, d), y).expect("n x d values")
}

/// A task's buffers, kept by each thread between tasks and calls: fresh ones cost a page fault
/// a 4 KiB page at first touch (~220 KiB a task of 128 queries). Sized by [`attend_task`];
/// what a task reads it has written, but for the probabilities' padding rows, which it zeroes.
#[derive(Default)]
struct TaskBuffers {
    qa: Vec<Line>,
    pa: Vec<Line>,
    sc: Vec<F32Line>,
    o: Vec<F32Line>,
    mx: Vec<f32>,
    sum: Vec<f32>,
    scratch: Vec<f32>,
}

thread_local! {
    static TASK_BUFFERS: std::cell::RefCell<TaskBuffers> =
        std::cell::RefCell::new(TaskBuffers::default());
}

/// One task: the queries `q` `[qb, hd]` of one head against its segment's packed keys `kp` and
/// values `vp` (`len` tokens), the output row i written at `out + i * ldo` (hd values), in the
/// thread's buffers `bufs`.
///
/// # Safety
/// `out + i * ldo .. + hd` valid for writes for every query row i and touched by no one else;
/// unless `EMUL`, AMX available with the tile state granted.
#[allow(clippy::too_many_arguments)]
unsafe fn attend_task<const EMUL: bool>(
    q: ArrayView2<f32>,
    kp: &[u16],
    vp: &[u16],
    len: usize,
    hd: usize,
    scale: f32,
    out: *mut f32,
    ldo: usize,
    bufs: &mut TaskBuffers,
) {
    let qb = q.nrows();
    let mblocks = qb.div_ceil(T);
    let (qsteps, lsteps, oblocks) = (hd.div_ceil(T), len.div_ceil(T), hd.div_ceil(T));
    // the queries as bf16 rows [mblocks * 32][qsteps][32], zero past the edges
    pack_queries(q, &mut bufs.qa);
    let qa = &bufs.qa;
    // the probabilities of a key step as bf16 rows [mblocks * 32][KBLK / 32][32]; the rows
    // past qb (read by the unit, their sums never used) zero
    let psteps = KBLK / T;
    let pa = &mut bufs.pa;
    pa.resize(mblocks * T * psteps, Line([0; 32]));
    pa[qb * psteps..].fill(Line([0; 32]));
    // a key step's scores [mblocks * 32][KBLK] and the outputs [mblocks * 32][oblocks * 32], f32,
    // where the unit stores its accumulators (and, for the outputs after the first key step,
    // adds into them): every value read was first written
    let ocols = oblocks * T;
    bufs.sc.resize(mblocks * T * KBLK / 16, F32Line([0.0; 16]));
    bufs.o.resize(mblocks * T * ocols / 16, F32Line([0.0; 16]));
    let (sc, o) = (f32s(&mut bufs.sc), f32s(&mut bufs.o));
    let (mx, sum) = (&mut bufs.mx, &mut bufs.sum);
    mx.clear();
    mx.resize(qb, f32::NEG_INFINITY);
    sum.clear();
    sum.resize(qb, 0.0);
    if !EMUL {
        // SAFETY: the caller's contract for AMX.
        unsafe { super::amx::load_config() };
    }
    let (lda_q, lda_p) = (qsteps * 64, psteps * 64);
    let mut k0 = 0;
    while k0 < len {
        let nk = KBLK.min(len - k0);
        let kblocks = nk.div_ceil(T);
        // scores q kᵀ for keys k0..k0 + nk (whole blocks of 32: the padding keys are zero)
        let t = profile::start();
        for mb in 0..mblocks {
            for cb in 0..kblocks {
                let a = qa[mb * T * qsteps..].as_ptr().cast::<u8>();
                let b = kp[(k0 / T + cb) * qsteps * STEP..].as_ptr().cast::<u8>();
                let c = sc[mb * T * KBLK + cb * T..].as_mut_ptr();
                // SAFETY: 32 rows of qsteps steps at a (inside qa), qsteps weight steps at b
                // (inside kp: key block k0 / 32 + cb < lsteps), a 32 x 32 block at c with row
                // stride KBLK (inside sc: cb * 32 + 32 <= KBLK).
                unsafe { product::<EMUL, false>(a, lda_q, b, qsteps, c, KBLK * 4) };
            }
        }
        profile::stop(t, 4);
        // the online softmax over this step's keys; the probabilities packed as bf16
        let t = profile::start();
        let step = Step {
            nk,
            kblocks,
            psteps,
            ocols,
            hd,
            scale,
            first: k0 == 0,
        };
        softmax_step(&step, sc, pa, mx, sum, o, &mut bufs.scratch);
        profile::stop(t, 5);
        // o (+)= p v over this step's keys, stored (first step) or added by the unit
        let t = profile::start();
        for mb in 0..mblocks {
            for ob in 0..oblocks {
                let a = pa[mb * T * psteps..].as_ptr().cast::<u8>();
                let b = vp[(ob * lsteps + k0 / T) * STEP..].as_ptr().cast::<u8>();
                let c = o[mb * T * ocols + ob * T..].as_mut_ptr();
                // SAFETY: 32 rows of kblocks <= psteps steps at a (inside pa), kblocks weight
                // steps at b (inside vp: k0 / 32 + kblocks <= lsteps), a 32 x 32 block at c with
                // row stride ocols (inside o).
                unsafe {
                    match k0 {
                        0 => product::<EMUL, false>(a, lda_p, b, kblocks, c, ocols * 4),
                        _ => product::<EMUL, true>(a, lda_p, b, kblocks, c, ocols * 4),
                    }
                };
            }
        }
        profile::stop(t, 6);
        k0 += nk;
    }
    for r in 0..qb {
        let inv = 1.0 / sum[r];
        for (cc, &x) in o[r * ocols..r * ocols + hd].iter().enumerate() {
            // SAFETY: value cc < hd of output row r (the caller's contract); written, not read.
            unsafe { out.add(r * ldo + cc).write(x * inv) };
        }
    }
}

/// 16 f32 values, 64-byte aligned: the scores and outputs the unit stores (and loads) by
/// 64-byte tile rows, each row then one cache line (a row across two lines costs two).
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct F32Line([f32; 16]);

/// The lines as f32 values.
fn f32s(lines: &mut [F32Line]) -> &mut [f32] {
    // SAFETY: `F32Line` is `repr(C)` over `[f32; 16]`, 64 bytes with no padding.
    unsafe { std::slice::from_raw_parts_mut(lines.as_mut_ptr().cast::<f32>(), lines.len() * 16) }
}

/// One key step's shape, for [`softmax_step`].
struct Step {
    /// Keys in this step, and their blocks of 32.
    nk: usize,
    kblocks: usize,
    /// Lines per row of the packed probabilities.
    psteps: usize,
    /// f32 values per row of the outputs, of which the first `hd` are the head's.
    ocols: usize,
    hd: usize,
    scale: f32,
    /// The first key step (no running values to correct yet).
    first: bool,
}

/// The online softmax of one key step over every query row: the running maximum `mx` and sum
/// `sum` updated from the scores in `sc` (rows of [`KBLK`], unscaled), the outputs `o` rescaled
/// to the new maximum, and the probabilities packed as bf16 into `pa`. With AVX-512F and
/// AVX512-BF16 (every CPU with AMX-BF16 has both) the explicit vector loop, else [`softmax_rows`] (tests on other CPUs): the
/// same operations in the same order, so the same bits (`softmax_paths_give_the_same_bits`).
fn softmax_step(
    st: &Step,
    sc: &mut [f32],
    pa: &mut [Line],
    mx: &mut [f32],
    sum: &mut [f32],
    o: &mut [f32],
    scratch: &mut Vec<f32>,
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bf16")
    {
        // SAFETY: AVX-512F and AVX512-BF16 detected at run time.
        return unsafe { softmax_rows_avx512(st, sc, pa, mx, sum, o, scratch) };
    }
    softmax_rows(st, sc, pa, mx, sum, o, scratch)
}

/// Below this a shifted score's exponential is 0 here: at and above it every result is a normal
/// f32 (exp(-87) = 1.65e-38), so rounding it to bf16 needs no subnormal case (the unit's
/// `vcvtneps2bf16` flushes subnormals) and the probabilities it drops are under 2e-38.
const EXP_LO: f32 = -87.0;
/// 1.5 * 2^23: adding it rounds an f32 of magnitude under 2^22 to an integer.
const EXP_MAGIC: f32 = 12_582_912.0;
/// ln 2 in two parts (Cody-Waite: k times the first is exact for |k| <= 256).
const EXP_LN2_HI: f32 = 0.693_359_4; // 355/512
const EXP_LN2_LO: f32 = -2.121_944_4e-4;
/// exp(r)'s Taylor coefficients of degree 6, the leading one first, then Horner's order.
const EXP_P0: f32 = 1.0 / 720.0;
const EXP_COEF: [f32; 6] = [1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0];

/// exp(x) for the shifted scores of a softmax (x <= 0 but for the rounding of the maximum, a
/// half ulp of it; NaN stays NaN, under [`EXP_LO`] gives 0): exp(r) 2^k with k = round(x / ln 2), r = x - k ln 2 by two fused steps
/// (Cody-Waite: k ln2_hi is exact), and exp(r) by its Taylor polynomial of degree 6 in fused
/// multiply-adds (truncation under 1.7e-7 relative for |r| <= ln 2 / 2). Within 3 ulp of exp:
/// far inside the bf16 rounding the probabilities get next (2^-9 relative).
#[inline(always)]
fn exp_shifted(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    let xc = if x < EXP_LO { EXP_LO } else { x }; // NaN stays NaN
    let kf = xc.mul_add(LOG2E, EXP_MAGIC);
    let k = kf - EXP_MAGIC;
    let ki = (kf.to_bits() as i32).wrapping_sub(0x4B40_0000); // k, in -126..=0
    let r = (-k).mul_add(EXP_LN2_LO, (-k).mul_add(EXP_LN2_HI, xc));
    let mut p = EXP_P0;
    for c in EXP_COEF {
        p = p.mul_add(r, c);
    }
    let two_k = f32::from_bits((ki.wrapping_add(127) as u32) << 23);
    let y = p * two_k;
    if x < EXP_LO { 0.0 } else { y }
}

/// The scalar loop behind [`softmax_step`] (vectorised by the compiler where it can; libm's
/// `fmaf` for `mul_add` on CPUs without FMA). Per row: the step's maximum of the unscaled scores
/// times the (positive) scale is the maximum of the scaled ones, so one read pass finds it and a
/// second computes `exp(s * scale - max)` in one fused step, sums it (16 lanes, in order) and
/// writes it as bf16, without storing the scaled scores or the f32 probabilities.
#[inline(always)]
fn softmax_rows(
    st: &Step,
    sc: &mut [f32],
    pa: &mut [Line],
    mx: &mut [f32],
    sum: &mut [f32],
    o: &mut [f32],
    scratch: &mut Vec<f32>,
) {
    let (m_rows, sums) = step_rows(scratch, mx.len());
    for r in 0..mx.len() {
        let row = &mut sc[r * KBLK..r * KBLK + st.nk];
        let scale = row_scale(st, row);
        let m_new = mx[r].max(row_max(row) * scale);
        let neg_m = -m_new;
        let mut acc = [0f32; 16];
        let mut tail = 0f32;
        let prow = &mut pa[r * st.psteps..r * st.psteps + st.kblocks];
        for (j, line) in prow.iter_mut().enumerate() {
            let src = &row[j * T..((j + 1) * T).min(st.nk)];
            if let Ok(src) = <&[f32; T]>::try_from(src) {
                for h in 0..2 {
                    for l in 0..16 {
                        let e = exp_shifted(src[h * 16 + l].mul_add(scale, neg_m));
                        acc[l] += e;
                        line.0[h * 16 + l] = bf16_bits(e);
                    }
                }
            } else {
                tail += partial_line(line, src, scale, neg_m);
            }
        }
        m_rows[r] = m_new;
        sums[r] = halve(acc, |a, b| a + b) + tail;
    }
    finish_rows(st, m_rows, sums, mx, sum, o);
}

/// The start of a row's step, shared by both softmax loops: the scale to apply to its maximum
/// and its scores (a scale that is not positive, never the tower's head_dim^-0.5, is applied
/// to the row first and 1 returned).
#[inline(always)]
fn row_scale(st: &Step, row: &mut [f32]) -> f32 {
    if st.scale > 0.0 {
        st.scale
    } else {
        row.iter_mut().for_each(|x| *x *= st.scale);
        1.0
    }
}

/// The order both softmax loops reduce 16 lanes in, by `f`: lane l with lane l + 8, then
/// with l + 4, l + 2 and l + 1 (a tree: the vector loop's reduction is four dependent steps,
/// where one lane after another was sixteen).
#[inline(always)]
fn halve(mut v: [f32; 16], f: impl Fn(f32, f32) -> f32) -> f32 {
    let mut w = 8;
    while w > 0 {
        for l in 0..w {
            v[l] = f(v[l], v[l + w]);
        }
        w /= 2;
    }
    v[0]
}

/// `if a > b { a } else { b }`: the maximum that never takes a NaN `a` (vmaxps's rule).
#[inline(always)]
fn max_of(a: f32, b: f32) -> f32 {
    if a > b { a } else { b }
}

/// A row's maximum (NaNs never taken; -inf for no values): 16 lanes over the whole 16s,
/// [`halve`]d, then the rest in order.
#[inline(always)]
fn row_max(row: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; 16];
    let mut chunks = row.chunks_exact(16);
    for c in &mut chunks {
        for l in 0..16 {
            acc[l] = max_of(c[l], acc[l]);
        }
    }
    let mut m = halve(acc, max_of);
    for &v in chunks.remainder() {
        m = max_of(v, m);
    }
    m
}

/// A row's last, partial line of keys: each probability by [`exp_shifted`], written as bf16,
/// the line's padding zeroed; returns their sum, in order.
#[inline(always)]
fn partial_line(line: &mut Line, src: &[f32], scale: f32, neg_m: f32) -> f32 {
    let mut tail = 0f32;
    for (d, &x) in line.0.iter_mut().zip(src) {
        let e = exp_shifted(x.mul_add(scale, neg_m));
        tail += e;
        *d = bf16_bits(e);
    }
    line.0[src.len()..].fill(0);
    tail
}

/// A step's new maxima and sums, one per row, in the task's `scratch` (`2 * rows`
/// values, kept between steps: no allocation a step).
#[inline(always)]
fn step_rows(scratch: &mut Vec<f32>, rows: usize) -> (&mut [f32], &mut [f32]) {
    scratch.resize(2 * rows, 0.0);
    scratch.split_at_mut(rows)
}

/// The end of a step, after every row, shared by both softmax loops: each row's running sum
/// (and on a later step its outputs) rescaled to its new maximum `m_new[r]`, the step's sum
/// `step_sum[r]` added, the maximum kept. A pass over the rows rather than a row's tail: the
/// rescale factors, one exponential a row, then vectorise across rows.
#[inline(always)]
fn finish_rows(
    st: &Step,
    m_new: &[f32],
    step_sum: &[f32],
    mx: &mut [f32],
    sum: &mut [f32],
    o: &mut [f32],
) {
    if st.first {
        sum.copy_from_slice(step_sum);
    } else {
        // the rescale factors where the old maxima were (replaced by the new ones below)
        for (m, &n) in mx.iter_mut().zip(m_new) {
            *m = super::act::exp_f32(*m - n);
        }
        for (r, &c) in mx.iter().enumerate() {
            sum[r] = sum[r] * c + step_sum[r];
            o[r * st.ocols..r * st.ocols + st.hd]
                .iter_mut()
                .for_each(|x| *x *= c);
        }
    }
    mx.copy_from_slice(m_new);
}

/// [`softmax_rows`] in AVX-512 intrinsics: [`exp_shifted`] on 16 lanes, op for op (fused where
/// it fuses), and [`bf16_bits`] as `vcvtneps2bf16` (the same rounding for normal values); the
/// full lines' sums in the same 16 lanes; the row's start, its partial line and its end by the
/// same functions as the portable loop.
///
/// # Safety
/// AVX-512F and AVX512-BF16 available.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn softmax_rows_avx512(
    st: &Step,
    sc: &mut [f32],
    pa: &mut [Line],
    mx: &mut [f32],
    sum: &mut [f32],
    o: &mut [f32],
    scratch: &mut Vec<f32>,
) {
    use std::arch::x86_64::*;
    let lo = _mm512_set1_ps(EXP_LO);
    let zero = _mm512_setzero_ps();
    let log2e = _mm512_set1_ps(std::f32::consts::LOG2_E);
    let magic = _mm512_set1_ps(EXP_MAGIC);
    let (ln2_hi, ln2_lo) = (_mm512_set1_ps(EXP_LN2_HI), _mm512_set1_ps(EXP_LN2_LO));
    let coef = EXP_COEF.map(|c| _mm512_set1_ps(c));
    let p0 = _mm512_set1_ps(EXP_P0);
    // exp_shifted and bf16_bits of 16 values
    let exp16 = |x: __m512| -> (__m512, __m256i) {
        let under = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, lo);
        // max(lo, x): lo under it, x itself when NaN (vmaxps returns its second operand)
        let xc = _mm512_max_ps(lo, x);
        let kf = _mm512_fmadd_ps(xc, log2e, magic);
        let k = _mm512_sub_ps(kf, magic);
        let r = _mm512_fnmadd_ps(k, ln2_hi, xc);
        let r = _mm512_fnmadd_ps(k, ln2_lo, r);
        let mut p = p0;
        for c in coef {
            p = _mm512_fmadd_ps(p, r, c);
        }
        // p 2^k, zero under lo: k is an integer in -126..=0, so 2^k is a normal f32 and
        // vscalefps's p 2^k is the portable loop's one rounding of p times it
        let e = _mm512_maskz_scalef_ps(!under, p, k);
        // bf16_bits: round to nearest even, a NaN quieted (bit 6); e is never subnormal
        (e, unsafe {
            std::mem::transmute::<__m256bh, __m256i>(_mm512_cvtneps_pbh(e))
        })
    };
    // the halving of 16 lanes by `$op` (`_mm256_$op`, `_mm_$op`), as [`halve`]
    macro_rules! halve16 {
        ($v:expr, $op256:ident, $op128:ident, $op_ss:ident) => {{
            let v = $v;
            let lo8 = _mm512_castps512_ps256(v);
            let hi8 = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
            let v8 = $op256(lo8, hi8);
            let v4 = $op128(_mm256_castps256_ps128(v8), _mm256_extractf128_ps::<1>(v8));
            let v2 = $op128(v4, _mm_movehl_ps(v4, v4));
            _mm_cvtss_f32($op_ss(v2, _mm_shuffle_ps::<0b01>(v2, v2)))
        }};
    }
    let (m_rows, sums) = step_rows(scratch, mx.len());
    for r in 0..mx.len() {
        let row = &mut sc[r * KBLK..r * KBLK + st.nk];
        let scale = row_scale(st, row);
        // row_max: vmaxps(x, acc) is `if x > acc { x } else { acc }`, as are the halving's
        let mut macc = _mm512_set1_ps(f32::NEG_INFINITY);
        let mut chunks = row.chunks_exact(16);
        for c in &mut chunks {
            // SAFETY: 16 values at c.
            macc = _mm512_max_ps(unsafe { _mm512_loadu_ps(c.as_ptr()) }, macc);
        }
        let mut rmax = halve16!(macc, _mm256_max_ps, _mm_max_ps, _mm_max_ss);
        for &v in chunks.remainder() {
            rmax = max_of(v, rmax);
        }
        let m_new = mx[r].max(rmax * scale);
        let (vs, vnm) = (_mm512_set1_ps(scale), _mm512_set1_ps(-m_new));
        let mut acc = zero;
        let mut tail = 0f32;
        let prow = &mut pa[r * st.psteps..r * st.psteps + st.kblocks];
        // the full lines two at a time (four independent exponentials), then the odd one, then
        // the partial one (a call in the loop would spill the vectors); sums in line order
        let full = st.nk / T;
        let (pairs, odd) = prow[..full].split_at_mut(full / 2 * 2);
        for (lines, src) in pairs.chunks_exact_mut(2).zip(row.chunks_exact(2 * T)) {
            // SAFETY: 64 values at src, 4 x 16 u16 in the two lines.
            let x: [__m512; 4] = std::array::from_fn(|i| unsafe {
                _mm512_fmadd_ps(_mm512_loadu_ps(src.as_ptr().add(i * 16)), vs, vnm)
            });
            let e = x.map(exp16);
            for (i, (e, b)) in e.into_iter().enumerate() {
                acc = _mm512_add_ps(acc, e);
                let at = lines[i / 2].0[i % 2 * 16..].as_mut_ptr();
                unsafe { _mm256_storeu_si256(at.cast(), b) };
            }
        }
        if let Some(line) = odd.first_mut() {
            let src = &row[(full - 1) * T..full * T];
            for h in 0..2 {
                // SAFETY: 16 values at src[16 h..] (src holds 32); 16 u16 at line.0[16 h..].
                let x = unsafe { _mm512_loadu_ps(src.as_ptr().add(h * 16)) };
                let (e, b) = exp16(_mm512_fmadd_ps(x, vs, vnm));
                acc = _mm512_add_ps(acc, e);
                unsafe { _mm256_storeu_si256(line.0.as_mut_ptr().add(h * 16).cast(), b) };
            }
        }
        if full < st.kblocks {
            tail = partial_line(&mut prow[full], &row[full * T..], scale, -m_new);
        }
        m_rows[r] = m_new;
        sums[r] = halve16!(acc, _mm256_add_ps, _mm_add_ps, _mm_add_ss) + tail;
    }
    finish_rows(st, m_rows, sums, mx, sum, o);
}

/// A 32 x 32 block's sums over `steps` input steps of 32 (bf16 rows at `a`, stride `lda`
/// bytes; weight steps of 2 KiB at `b`), stored as f32 at `c` (row stride `ldc` bytes) or, with
/// `ACC`, added by the unit to the values there.
///
/// # Safety
/// `steps >= 1`; 32 rows of `steps` 64-byte steps at `a`, `steps * 2048` bytes at `b`, 32 rows
/// of 32 f32 at `c` (stride `ldc`), readable and writable; unless `EMUL`, the tile
/// configuration loaded.
#[inline(always)]
unsafe fn product<const EMUL: bool, const ACC: bool>(
    a: *const u8,
    lda: usize,
    b: *const u8,
    steps: usize,
    c: *mut f32,
    ldc: usize,
) {
    if EMUL {
        // SAFETY: the caller's contract.
        unsafe { emulated_block::<ACC>(a, lda, b, steps, c, ldc) }
    } else {
        // SAFETY: the caller's contract.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            tile_block::<ACC>(a, lda, b, steps, c, ldc);
        }
    }
}

/// [`product`] on the unit: accumulators tmm0-3 (rows 0-15 / 16-31, columns 0-15 / 16-31),
/// inputs tmm4-5, weights tmm6-7, as `kernels::amx`'s block; the accumulators are zeroed, or
/// with `ACC` loaded from `c`, and stored to `c` with its stride: no copy of the sums. The
/// GEMM's pipelined step (`kernels::amx_kernel`, without its prefetches) measured no
/// different here (Xeon, two runs each taking turns in one call, thread-summed p·v ms at 5184
/// tokens: 118 and 153 against 129 and 126; the whole attention 266 and 303 against 277 and
/// 278 ms), so the step stays grouped: four loads, then four products.
///
/// # Safety
/// As [`product`]'s, with the tile configuration loaded.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn tile_block<const ACC: bool>(
    a: *const u8,
    lda: usize,
    b: *const u8,
    steps: usize,
    c: *mut f32,
    ldc: usize,
) {
    macro_rules! body {
        ($($init:literal),+) => {
            // SAFETY: the caller's contract; only tile registers and the named GPRs are touched.
            unsafe {
                std::arch::asm!(
                    $($init,)+
                    "2:",
                    "tileloadd tmm6, [{b} + {s}*1]",
                    "tileloadd tmm7, [{b} + {s}*1 + 1024]",
                    "tileloadd tmm4, [{a0} + {lda}*1]",
                    "tileloadd tmm5, [{a1} + {lda}*1]",
                    "tdpbf16ps tmm0, tmm4, tmm6",
                    "tdpbf16ps tmm1, tmm4, tmm7",
                    "tdpbf16ps tmm2, tmm5, tmm6",
                    "tdpbf16ps tmm3, tmm5, tmm7",
                    "add {a0}, 64",
                    "add {a1}, 64",
                    "add {b}, 2048",
                    "dec {n}",
                    "jnz 2b",
                    "tilestored [{c0} + {ldc}*1], tmm0",
                    "tilestored [{c0} + {ldc}*1 + 64], tmm1",
                    "tilestored [{c1} + {ldc}*1], tmm2",
                    "tilestored [{c1} + {ldc}*1 + 64], tmm3",
                    a0 = inout(reg) a => _,
                    a1 = inout(reg) a.add(16 * lda) => _,
                    b = inout(reg) b => _,
                    n = inout(reg) steps => _,
                    lda = in(reg) lda,
                    s = in(reg) 64usize,
                    c0 = in(reg) c,
                    c1 = in(reg) c.cast::<u8>().add(16 * ldc),
                    ldc = in(reg) ldc,
                    options(nostack),
                );
            }
        };
    }
    if ACC {
        body!(
            "tileloadd tmm0, [{c0} + {ldc}*1]",
            "tileloadd tmm1, [{c0} + {ldc}*1 + 64]",
            "tileloadd tmm2, [{c1} + {ldc}*1]",
            "tileloadd tmm3, [{c1} + {ldc}*1 + 64]"
        );
    } else {
        body!(
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3"
        );
    }
}

/// What the unit computes for [`product`], in f64 sums rounded to f32 once (the unit's own
/// order of summation differs: tests compare to a tolerance): for each row r and column j,
/// `c[r][j] (+)= Σ_s Σ_t Σ_e a[r][s][2t + e] · b[s][j / 16][t][j % 16][e]`.
///
/// # Safety
/// As [`product`]'s.
unsafe fn emulated_block<const ACC: bool>(
    a: *const u8,
    lda: usize,
    b: *const u8,
    steps: usize,
    c: *mut f32,
    ldc: usize,
) {
    let val = |p: *const u8, i: usize| {
        // SAFETY: the caller's contract covers every index used below.
        super::amx::bf16_value(unsafe { p.cast::<u16>().add(i).read_unaligned() }) as f64
    };
    for r in 0..T {
        for j in 0..T {
            // SAFETY: row r, column j of the block at c (the caller's contract).
            let cv = unsafe { &mut *c.cast::<u8>().add(r * ldc).cast::<f32>().add(j) };
            let mut acc = if ACC { *cv as f64 } else { 0.0 };
            for s in 0..steps {
                let arow = a.wrapping_add(r * lda + s * 64);
                let bs = b.wrapping_add(s * 2048 + (j / 16) * 1024);
                for t in 0..16 {
                    for e in 0..2 {
                        acc += val(arow, 2 * t + e) * val(bs, t * 32 + (j % 16) * 2 + e);
                    }
                }
            }
            *cv = acc as f32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::amx::round_bf16;

    /// The softmax's exponential: within 3 ulp of f64's exp over [-87, 0] (and slightly
    /// above 0, where rounding can put a shifted score), 0 below -87 and for -inf, NaN for NaN.
    #[test]
    fn exp_shifted_is_within_three_ulp() {
        let mut worst = 0.0f64;
        let mut x = -87.0f32;
        while x <= 1e-4 {
            let got = exp_shifted(x) as f64;
            let want = (x as f64).exp();
            let w = want as f32;
            let ulp = (f32::from_bits(w.to_bits() + 1) - w) as f64;
            worst = worst.max((got - want).abs() / ulp);
            x += 0.000_37;
        }
        assert!(worst <= 3.0, "worst exp_shifted error {worst} ulp");
        assert_eq!(exp_shifted(0.0), 1.0);
        assert!(exp_shifted(-87.0) >= f32::MIN_POSITIVE);
        assert_eq!(exp_shifted(-87.001), 0.0);
        assert_eq!(exp_shifted(f32::NEG_INFINITY), 0.0);
        assert!(exp_shifted(f32::NAN).is_nan());
    }

    /// The AVX-512 softmax step gives the portable loop's bits: probabilities, maxima, sums and
    /// rescaled outputs, over full and partial key steps, a first and a later step, scores that
    /// are large, tiny, -inf and NaN.
    #[test]
    fn softmax_paths_give_the_same_bits() {
        #[cfg(target_arch = "x86_64")]
        {
            if !(std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512bf16"))
            {
                return;
            }
            let (qb, psteps, ocols, hd) = (40usize, KBLK / T, 64, 48);
            let rows = qb.div_ceil(T) * T;
            let mut seed = 0x9e37_79b9_u32;
            let mut rnd = || {
                seed ^= seed << 13;
                seed ^= seed >> 17;
                seed ^= seed << 5;
                seed
            };
            for nk in [KBLK, 200, 33, 32, 1] {
                let sc0: Vec<f32> = (0..rows * KBLK)
                    .map(|i| match rnd() % 97 {
                        0 => f32::NEG_INFINITY,
                        1 if i % 5 == 0 => f32::NAN,
                        2 => 3.0e4,
                        n => (n as f32 - 48.0) * 0.731 + (rnd() % 1000) as f32 * 1e-3,
                    })
                    .collect();
                let o0: Vec<f32> = (0..rows * ocols).map(|i| (i % 13) as f32 - 6.5).collect();
                let mut out = Vec::new();
                for vector in [false, true] {
                    let (mut sc, mut o) = (sc0.clone(), o0.clone());
                    let mut pa = vec![Line([7; 32]); rows * psteps];
                    let mut mx: Vec<f32> = (0..qb).map(|r| r as f32 * 0.5 - 3.0).collect();
                    let mut sum: Vec<f32> = (0..qb).map(|r| 1.0 + r as f32).collect();
                    let mut step = vec![f32::NAN; 5]; // reused and resized, as a task's
                    for first in [true, false] {
                        let st = Step {
                            nk,
                            kblocks: nk.div_ceil(T),
                            psteps,
                            ocols,
                            hd,
                            scale: 0.125,
                            first,
                        };
                        if vector {
                            // SAFETY: AVX-512F and AVX512-BF16 detected above.
                            unsafe {
                                softmax_rows_avx512(
                                    &st, &mut sc, &mut pa, &mut mx, &mut sum, &mut o, &mut step,
                                )
                            };
                        } else {
                            softmax_rows(
                                &st, &mut sc, &mut pa, &mut mx, &mut sum, &mut o, &mut step,
                            );
                        }
                    }
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    let lines: Vec<u16> = pa.iter().flat_map(|l| l.0).collect();
                    out.push((lines, bits(&mx), bits(&sum), bits(&o)));
                }
                assert!(out[0].0 == out[1].0, "nk {nk}: probabilities differ");
                assert!(out[0].1 == out[1].1, "nk {nk}: maxima differ");
                assert!(out[0].2 == out[1].2, "nk {nk}: sums differ");
                assert!(out[0].3 == out[1].3, "nk {nk}: outputs differ");
            }
        }
    }

    /// f64 attention of one head over one segment, inputs as given.
    fn naive(
        q: &Array2<f32>,
        k: &Array2<f32>,
        v: &Array2<f32>,
        cu: &[usize],
        heads: usize,
        scale: f64,
    ) -> Array2<f64> {
        let (n, d) = q.dim();
        let hd = d / heads;
        let mut y = Array2::<f64>::zeros((n, d));
        for h in 0..heads {
            for w in cu.windows(2) {
                for i in w[0]..w[1] {
                    let sc: Vec<f64> = (w[0]..w[1])
                        .map(|j| {
                            (0..hd)
                                .map(|c| q[[i, h * hd + c]] as f64 * k[[j, h * hd + c]] as f64)
                                .sum::<f64>()
                                * scale
                        })
                        .collect();
                    let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let p: Vec<f64> = sc.iter().map(|s| (s - m).exp()).collect();
                    let z: f64 = p.iter().sum();
                    for c in 0..hd {
                        y[[i, h * hd + c]] = (w[0]..w[1])
                            .zip(&p)
                            .map(|(j, p)| p * v[[j, h * hd + c]] as f64)
                            .sum::<f64>()
                            / z;
                    }
                }
            }
        }
        y
    }

    fn random(n: usize, d: usize, seed: u64, amp: f64) -> Array2<f32> {
        let mut lcg = crate::kernels::Lcg(seed);
        Array2::from_shape_fn((n, d), |_| ((lcg.unit() - 0.5) * 2.0 * amp) as f32)
    }

    /// The blocked bf16 attention (packing, key steps, online softmax, edges) against f64
    /// attention of the same bf16-rounded q, k, v: the one further rounding is of the
    /// probabilities (relative 2^-9 each), so every output is within 2^-8 of the largest |v|
    /// of its head (plus f32 sums). Segments around the short-path boundary, ragged key steps
    /// (300 = 256 + 44), head dims that are not a multiple of 32, several heads.
    fn check<const EMUL: bool>() {
        for &(hd, heads, ref cu) in &[
            (64usize, 2usize, vec![0usize, 300]),
            (16, 4, vec![0, 129, 129 + 40, 129 + 40 + 513]),
            (40, 1, vec![0, 257]),
        ] {
            let n = *cu.last().unwrap();
            let d = hd * heads;
            let (q, k, v) = (
                random(n, d, 1, 2.0),
                random(n, d, 2, 2.0),
                random(n, d, 3, 1.0),
            );
            let scale = (hd as f64).powf(-0.5);
            let y = run::<EMUL>(q.view(), k.view(), v.view(), cu, heads, scale as f32);
            let (qr, kr, vr) = (q.mapv(round_bf16), k.mapv(round_bf16), v.mapv(round_bf16));
            let want = naive(&qr, &kr, &vr, cu, heads, scale);
            let worst = y
                .iter()
                .zip(want.iter())
                .map(|(&a, &b)| (a as f64 - b).abs())
                .fold(0.0, f64::max);
            assert!(
                worst <= 1.0 / 256.0,
                "hd {hd} heads {heads} cu {cu:?}: worst |diff| {worst:e}"
            );
        }
    }

    #[test]
    fn emulated_products_match_f64_attention() {
        check::<true>();
    }

    #[test]
    fn amx_matches_f64_attention() {
        if !enabled() {
            eprintln!("skipped: no AMX");
            return;
        }
        check::<false>();
    }
}
