//! f32 products with few rows (`x` `[m, k]`, m small: the tokens of a small image, the merge
//! groups of the head). There the cost is streaming the weight `[n, k]` from memory, so each
//! output is a plain dot product of two contiguous rows: weights are read once, in order, with
//! no packing. AVX-512 only (4 weight rows x 4 input rows = 16 vector accumulators); without
//! it callers use the general product.

/// Weight rows per parallel task.
const ROWS_PER_TASK: usize = 32;

/// Whether [`linear_skinny_f32`] can run on this CPU.
pub fn available() -> bool {
    super::isa::isa() >= super::isa::Isa::Avx512
}

/// `out[i, j] = bias[j] + sum_c x[i, c] * w[j, c]`; `x` `[m, k]`, `w` `[n, k]`, `out` `[m, n]`,
/// all row-major and contiguous. Parallel over blocks of weight rows (`team::for_each`: the
/// team's threads inside a forward, else the current rayon pool).
/// Returns false (doing nothing) when the CPU lacks AVX-512.
pub fn linear_skinny_f32(
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    out: &mut [f32],
    m: usize,
    k: usize,
    n: usize,
) -> bool {
    assert!(x.len() == m * k && w.len() == n * k && out.len() == m * n);
    if !available() || m == 0 || k == 0 {
        return false;
    }
    let out_addr = out.as_mut_ptr() as usize;
    super::team::for_each(n.div_ceil(ROWS_PER_TASK), |t| {
        let j0 = t * ROWS_PER_TASK;
        let j1 = (j0 + ROWS_PER_TASK).min(n);
        #[cfg(target_arch = "x86_64")]
        // SAFETY: AVX-512 was detected; tasks write disjoint column ranges [j0, j1) of `out`,
        // which outlives the loop; every read is inside `x` and `w` (indices clamped below).
        unsafe {
            block_avx512(x, w, bias, out_addr as *mut f32, m, k, n, j0, j1)
        };
    });
    true
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn block_avx512(
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    out: *mut f32,
    m: usize,
    k: usize,
    n: usize,
    j0: usize,
    j1: usize,
) {
    use std::arch::x86_64::*;
    let kv = k / 16 * 16;
    let mut j = j0;
    while j < j1 {
        // edge tiles repeat the last row and drop the repeats
        let wp: [*const f32; 4] = std::array::from_fn(|t| w[(j + t).min(j1 - 1) * k..].as_ptr());
        let mut i = 0;
        while i < m {
            let xp: [*const f32; 4] = std::array::from_fn(|t| x[(i + t).min(m - 1) * k..].as_ptr());
            let mut acc = [[_mm512_setzero_ps(); 4]; 4]; // [x row][w row]
            let mut c = 0;
            while c < kv {
                let wv: [__m512; 4] =
                    std::array::from_fn(|t| unsafe { _mm512_loadu_ps(wp[t].add(c)) });
                for a in 0..4 {
                    let xv = unsafe { _mm512_loadu_ps(xp[a].add(c)) };
                    for b in 0..4 {
                        acc[a][b] = _mm512_fmadd_ps(xv, wv[b], acc[a][b]);
                    }
                }
                c += 16;
            }
            for a in 0..4 {
                for b in 0..4 {
                    let mut sum = _mm512_reduce_add_ps(acc[a][b]);
                    for cc in kv..k {
                        sum = unsafe { (*xp[a].add(cc)).mul_add(*wp[b].add(cc), sum) };
                    }
                    if i + a < m && j + b < j1 {
                        let bv = bias.map_or(0.0, |bs| bs[j + b]);
                        unsafe { *out.add((i + a) * n + j + b) = sum + bv };
                    }
                }
            }
            i += 4;
        }
        j += 4;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_a_naive_loop_on_ragged_shapes() {
        if !available() {
            eprintln!("skipped: no AVX-512 on this CPU");
            return;
        }
        let mut lcg = crate::kernels::Lcg(3);
        let mut rnd = || lcg.unit() as f32 - 0.5;
        for (m, k, n) in [(1, 1, 1), (3, 17, 5), (5, 40, 70), (9, 1176, 33)] {
            let x: Vec<f32> = (0..m * k).map(|_| rnd()).collect();
            let w: Vec<f32> = (0..n * k).map(|_| rnd()).collect();
            let b: Vec<f32> = (0..n).map(|_| rnd()).collect();
            let mut out = vec![f32::NAN; m * n];
            assert!(linear_skinny_f32(&x, &w, Some(&b), &mut out, m, k, n));
            for i in 0..m {
                for j in 0..n {
                    let want: f64 = b[j] as f64
                        + (0..k)
                            .map(|c| x[i * k + c] as f64 * w[j * k + c] as f64)
                            .sum::<f64>();
                    let err = (out[i * n + j] as f64 - want).abs();
                    assert!(
                        err < 1e-5 * (k as f64).sqrt(),
                        "({m},{k},{n}) at ({i},{j}): {err}"
                    );
                }
            }
        }
    }
}
