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

use super::amx::{AmxWeight, Line, bf16_bits};
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
    let packs: Vec<(AmxWeight, AmxWeight)> = {
        use rayon::prelude::*;
        long.par_iter()
            .map(|&(h, g)| {
                let (s0, s1) = segs[g];
                let cols = s![s0..s1, h * hd..(h + 1) * hd];
                let (ks, vs) = (k.slice(cols), v.slice(cols));
                // K as the weight of q kᵀ (key j is column j), V as that of p v (Vᵀ: head dim
                // c is column c), rounded to bf16
                let pack = |w| AmxWeight::pack(w, true).expect("rounding always packs");
                (pack(ks), pack(vs.t()))
            })
            .collect()
    };
    // tasks: (head, segment, first query, end), covering every (token, head) once
    let mut tasks = Vec::new();
    for h in 0..heads {
        for (g, &(s0, s1)) in segs.iter().enumerate() {
            let rows = if s1 - s0 > SHORT { QB } else { SHORT };
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
        let (kp, vp) = (packs[p].0.packed(), packs[p].1.packed());
        unsafe { attend_task::<EMUL>(qs, kp, vp, s1 - s0, hd, scale, at, d) };
    });
    // SAFETY: every value of y was written above (the tasks cover all n rows of every head).
    unsafe { y.set_len(n * d) };
    Array2::from_shape_vec((n, d), y).expect("n x d values")
}

/// One task: the queries `q` `[qb, hd]` of one head against its segment's packed keys `kp` and
/// values `vp` (`len` tokens), the output row i written at `out + i * ldo` (hd values).
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
) {
    let qb = q.nrows();
    let mblocks = qb.div_ceil(T);
    let (qsteps, lsteps, oblocks) = (hd.div_ceil(T), len.div_ceil(T), hd.div_ceil(T));
    // the queries as bf16 rows [mblocks * 32][qsteps][32], zero past the edges
    let mut qa = vec![Line([0; 32]); mblocks * T * qsteps];
    for (r, row) in q.outer_iter().enumerate() {
        for (c, &x) in row.iter().enumerate() {
            qa[r * qsteps + c / T].0[c % T] = bf16_bits(x);
        }
    }
    // the probabilities of a key step as bf16 rows [mblocks * 32][KBLK / 32][32]
    let psteps = KBLK / T;
    let mut pa = vec![Line([0; 32]); mblocks * T * psteps];
    // a key step's scores [mblocks * 32][KBLK] and the outputs [mblocks * 32][oblocks * 32], f32,
    // where the unit stores its accumulators (and, for the outputs, adds into them)
    let ocols = oblocks * T;
    let mut sc = vec![0.0f32; mblocks * T * KBLK];
    let mut o = vec![0.0f32; mblocks * T * ocols];
    let (mut mx, mut sum) = (vec![f32::NEG_INFINITY; qb], vec![0.0f32; qb]);
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
        // the online softmax over this step's keys; the probabilities packed as bf16
        let step = Step {
            nk,
            kblocks,
            psteps,
            ocols,
            hd,
            scale,
            first: k0 == 0,
        };
        softmax_step(&step, &mut sc, &mut pa, &mut mx, &mut sum, &mut o);
        // o += p v over this step's keys, added by the unit into the outputs
        for mb in 0..mblocks {
            for ob in 0..oblocks {
                let a = pa[mb * T * psteps..].as_ptr().cast::<u8>();
                let b = vp[(ob * lsteps + k0 / T) * STEP..].as_ptr().cast::<u8>();
                let c = o[mb * T * ocols + ob * T..].as_mut_ptr();
                // SAFETY: 32 rows of kblocks <= psteps steps at a (inside pa), kblocks weight
                // steps at b (inside vp: k0 / 32 + kblocks <= lsteps), a 32 x 32 block at c with
                // row stride ocols (inside o).
                unsafe { product::<EMUL, true>(a, lda_p, b, kblocks, c, ocols * 4) };
            }
        }
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

super::act::on_widest_unit! {
    /// The online softmax of one key step over every query row: the scores in `sc` (rows of
    /// [`KBLK`]) scaled, the running maximum `mx` and sum `sum` updated, the outputs `o` rescaled
    /// to the new maximum, and the probabilities packed as bf16 into `pa`. On the widest vector
    /// unit (the crate's baseline is SSE2, and this loop took more time than the unit's products
    /// at 5184 tokens).
    fn softmax_step(
        st: &Step,
        sc: &mut [f32],
        pa: &mut [Line],
        mx: &mut [f32],
        sum: &mut [f32],
        o: &mut [f32]
    ) => softmax_rows
}

#[inline(always)]
fn softmax_rows(
    st: &Step,
    sc: &mut [f32],
    pa: &mut [Line],
    mx: &mut [f32],
    sum: &mut [f32],
    o: &mut [f32],
) {
    use super::act::{exp_f32, exp_shift_sum_lanes, max_lanes};
    for r in 0..mx.len() {
        let row = &mut sc[r * KBLK..r * KBLK + st.nk];
        row.iter_mut().for_each(|x| *x *= st.scale);
        let m_new = mx[r].max(max_lanes(row));
        let step_sum = exp_shift_sum_lanes(row, m_new);
        if st.first {
            sum[r] = step_sum;
        } else {
            let corr = exp_f32(mx[r] - m_new);
            sum[r] = sum[r] * corr + step_sum;
            o[r * st.ocols..r * st.ocols + st.hd]
                .iter_mut()
                .for_each(|x| *x *= corr);
        }
        mx[r] = m_new;
        let prow = &mut pa[r * st.psteps..r * st.psteps + st.kblocks];
        for (j, line) in prow.iter_mut().enumerate() {
            let src = &row[j * T..((j + 1) * T).min(st.nk)];
            for (d, &p) in line.0.iter_mut().zip(src) {
                *d = bf16_bits(p);
            }
            line.0[src.len()..].fill(0);
        }
    }
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
/// with `ACC` loaded from `c`, and stored to `c` with its stride: no copy of the sums.
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
