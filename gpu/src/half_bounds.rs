//! Where the weights prove IEEE half's range: bounds, from a block's weights alone, on the
//! largest magnitudes its attention inputs and its half-precision GEMMs can see
//! ([`crate::tower::GpuTower`] runs a stage in half only below [`F16_BOUND`]).

use glm5v_reference::weights::BlockWeights;
use ndarray::Array2;

/// Largest |q|, |k| (after the per-head RMSNorm and the rope) and |v| that block `b` can produce,
/// from its weights alone: RMSNorm gives a row of L2 norm sqrt(n) before its weight, so
/// |q_d| <= sqrt(hd) max|w_q| (the rope adds at most a factor 2), and
/// `|v_j| <= sqrt(d) max|norm1| ||W_v[j]||_2 + |b_v[j]|` (Cauchy-Schwarz). Infinite when a weight is
/// not finite.
pub(crate) fn attention_input_bound(b: &BlockWeights<f32>, d: usize, hd: usize) -> f64 {
    let qk = 2.0 * (hd as f64).sqrt() * max_abs(b.q_norm.iter().chain(b.k_norm.iter()));
    let n1 = max_abs(b.norm1.iter());
    let row = max_row_norm(&b.qkv_w, 2 * d..3 * d);
    let bv = b
        .qkv_b
        .as_ref()
        .map_or(0.0, |bb| max_abs(bb.iter().skip(2 * d)));
    let v = (d as f64).sqrt() * n1 * row + bv;
    qk.max(v)
}

/// `x`, or infinity when it is not finite (NaN included).
fn finite_or_inf(x: f64) -> f64 {
    if x.is_finite() { x } else { f64::INFINITY }
}

/// Largest |x|; infinite when a value is not finite.
pub(crate) fn max_abs<'a>(values: impl Iterator<Item = &'a f32>) -> f64 {
    values.fold(0f64, |m, &x| {
        if x.is_finite() {
            m.max((x as f64).abs())
        } else {
            f64::INFINITY
        }
    })
}

/// Largest L2 norm of the rows `rows` of `w`; infinite when one is not finite.
fn max_row_norm(w: &Array2<f32>, rows: std::ops::Range<usize>) -> f64 {
    w.rows()
        .into_iter()
        .skip(rows.start)
        .take(rows.len())
        .fold(0f64, |m, r| {
            let ss: f64 = r.iter().map(|&x| (x as f64) * (x as f64)).sum();
            m.max(if ss.is_finite() {
                ss.sqrt()
            } else {
                f64::INFINITY
            })
        })
}

/// Largest magnitudes the IEEE-half GEMMs of block `b` can see, from its weights alone (see
/// [`gemm_half_bounds`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct HalfBounds {
    /// The qkv GEMM: its input (norm1 output), weight and output.
    pub(crate) qkv: f64,
    /// The gate|up and down GEMMs' inputs (norm2 output, SwiGLU output), weights and the
    /// gate|up output.
    pub(crate) mlp: f64,
    /// The down GEMM's output (before its bias).
    pub(crate) down_out: f64,
}

/// [`HalfBounds`] of block `b`. An RMSNorm output row has L2 norm at most sqrt(d) max|w| (so no
/// entry above that), a GEMM output entry j at most the input row's L2 norm times `||W[j]||_2`
/// (Cauchy-Schwarz; the biases are added later in f32), and the SwiGLU output at most
/// max(min(g, L), 0.28) min(|u|, L) with g, u the biased gate and up bounds and L the swiglu
/// limit (silu is never below -0.2785), so a down input row at most sqrt(I) times that.
/// Each figure also covers the weights' own entries. Infinite when a weight is not finite.
pub(crate) fn gemm_half_bounds(b: &BlockWeights<f32>, d: usize, limit: f64) -> HalfBounds {
    let sd = (d as f64).sqrt();
    let n1 = sd * max_abs(b.norm1.iter());
    let qkv_w = max_abs(b.qkv_w.iter());
    let qkv = n1
        .max(n1 * max_row_norm(&b.qkv_w, 0..b.qkv_w.nrows()))
        .max(qkv_w);
    let n2 = sd * max_abs(b.norm2.iter());
    let inter = b.gate_up_w.nrows() / 2;
    let g = n2 * max_row_norm(&b.gate_up_w, 0..inter);
    let u = n2 * max_row_norm(&b.gate_up_w, inter..2 * inter);
    let (bg, bu) = b.gate_up_b.as_ref().map_or((0.0, 0.0), |bb| {
        (
            max_abs(bb.iter().take(inter)),
            max_abs(bb.iter().skip(inter)),
        )
    });
    let lim = if limit.is_nan() {
        f64::INFINITY
    } else {
        limit.abs()
    };
    let m = (g + bg).min(lim).max(0.2785) * (u + bu).min(lim);
    let mlp = n2
        .max(g)
        .max(u)
        .max(finite_or_inf(m))
        .max(max_abs(b.gate_up_w.iter()))
        .max(max_abs(b.down_w.iter()));
    let down_out =
        finite_or_inf((inter as f64).sqrt() * finite_or_inf(m) * max_row_norm(&b.down_w, 0..d));
    HalfBounds { qkv, mlp, down_out }
}

/// Largest |entry| of the projection GEMM's output (before its bias) of block `b`: the attention
/// output is a convex combination of v rows, so each entry is at most `att` (the bound of
/// [`attention_input_bound`]) and a row's L2 norm at most sqrt(d) `att`; times `||W_proj[j]||_2`.
pub(crate) fn proj_out_bound(b: &BlockWeights<f32>, d: usize, att: f64) -> f64 {
    finite_or_inf((d as f64).sqrt() * att * max_row_norm(&b.proj_w, 0..b.proj_w.nrows()))
}

/// Attention inputs go to half precision only below this bound (a factor 4 under the largest
/// half, 65504, for the rounding of the GEMM inputs and for headroom).
pub(crate) const F16_BOUND: f64 = 16384.0;

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Array1;

    /// d = 4, head_dim 2: |q|, |k| <= 2 sqrt(2) max|w_qk|; |v_j| <= sqrt(4) max|norm1|
    /// ||W_v[j]||_2 + |b_v[j]|, with W_v the last 4 rows of qkv.
    fn block() -> BlockWeights<f32> {
        let d = 4;
        let mut qkv = Array2::<f32>::zeros((3 * d, d));
        qkv.row_mut(2 * d)
            .assign(&ndarray::arr1(&[3.0, 4.0, 0.0, 0.0])); // norm 5
        qkv.row_mut(2 * d + 1)
            .assign(&ndarray::arr1(&[1.0, 1.0, 1.0, 1.0])); // norm 2
        qkv.row_mut(0)
            .assign(&ndarray::arr1(&[100.0, 0.0, 0.0, 0.0])); // a q row: not v
        let mut qkv_b = Array1::<f32>::zeros(3 * d);
        qkv_b[2 * d + 3] = -0.5;
        qkv_b[0] = 50.0; // a q bias: RMSNorm removes its scale, not part of the bound
        BlockWeights {
            norm1: ndarray::arr1(&[1.0, -2.0, 0.5, 1.0]),
            norm2: Array1::ones(d),
            qkv_w: qkv,
            qkv_b: Some(qkv_b),
            q_norm: ndarray::arr1(&[3.0, -1.0]),
            k_norm: ndarray::arr1(&[1.0, 1.0]),
            proj_w: Array2::zeros((d, d)),
            proj_b: None,
            gate_up_w: Array2::zeros((8, d)),
            gate_up_b: None,
            down_w: Array2::zeros((d, 4)),
            down_b: None,
        }
    }

    #[test]
    fn attention_input_bound_follows_the_norms() {
        let b = block();
        // q/k: 2 * sqrt(2) * 3 = 8.485; v: 2 * 2 * 5 + 0.5 = 20.5
        let got = attention_input_bound(&b, 4, 2);
        assert!((got - 20.5).abs() < 1e-9, "{got}");
        let mut sharp = block();
        sharp.q_norm[0] = 10.0; // q/k: 2 * sqrt(2) * 10 = 28.28 > 20.5
        let got = attention_input_bound(&sharp, 4, 2);
        assert!((got - 20.0 * 2f64.sqrt()).abs() < 1e-9, "{got}");
    }

    #[test]
    fn attention_input_bound_is_infinite_for_non_finite_weights() {
        let mut b = block();
        b.k_norm[1] = f32::NAN;
        assert!(attention_input_bound(&b, 4, 2).is_infinite());
        let mut b = block();
        b.qkv_w[[2 * 4 + 2, 1]] = f32::INFINITY;
        assert!(attention_input_bound(&b, 4, 2).is_infinite());
        assert!(attention_input_bound(&b, 4, 2) >= F16_BOUND);
    }

    /// The IEEE-half GEMM bounds of [`block`] with a hand-made MLP: d = 4, so an RMSNorm output
    /// entry is at most 2 max|w|.
    #[test]
    fn gemm_half_bounds_follow_the_norms_and_the_limit() {
        let mut b = block();
        // qkv: 2 * max|norm1| (2) = 4, times the largest qkv row norm (100, row 0) = 400.
        // MLP: gate row 1 has norm 1, up row 2 (row 6) norm 5; norm2 = 1 so g <= 2, u <= 10;
        // biases 1 (gate) and 0.5 (up): SwiGLU <= min(3, L) * min(10.5, L).
        b.gate_up_w
            .row_mut(1)
            .assign(&ndarray::arr1(&[0.5, 0.5, 0.5, 0.5]));
        b.gate_up_w
            .row_mut(6)
            .assign(&ndarray::arr1(&[0.0, 3.0, 4.0, 0.0]));
        let mut gb = Array1::<f32>::zeros(8);
        gb[2] = -1.0;
        gb[5] = 0.5;
        b.gate_up_b = Some(gb);
        let hb = gemm_half_bounds(&b, 4, 7.0);
        assert!((hb.qkv - 400.0).abs() < 1e-9, "{hb:?}");
        assert!((hb.mlp - 21.0).abs() < 1e-9, "{hb:?}"); // 3 * 7
        assert_eq!(hb.down_out, 0.0, "a zero down weight"); // sqrt(4) * 21 * 0
        let hb = gemm_half_bounds(&b, 4, 100.0);
        assert!((hb.mlp - 31.5).abs() < 1e-9, "{hb:?}"); // 3 * 10.5
        let hb = gemm_half_bounds(&b, 4, f64::NAN);
        assert!((hb.mlp - 31.5).abs() < 1e-9, "{hb:?}");
        b.down_w[[0, 0]] = -50.0; // a weight itself must fit
        b.down_w[[1, 2]] = 30.0; // row 1: norm 30 < 50
        let hb = gemm_half_bounds(&b, 4, 7.0);
        assert!((hb.mlp - 50.0).abs() < 1e-9, "{hb:?}");
        // a down input row has L2 norm <= sqrt(I = 4) * 21; times the largest row norm, 50
        assert!((hb.down_out - 2100.0).abs() < 1e-9, "{hb:?}");
        b.gate_up_w[[7, 3]] = f32::NAN;
        let hb = gemm_half_bounds(&b, 4, 7.0);
        // the clamps still bound the SwiGLU output (the block stays f32: mlp is infinite)
        assert!(
            hb.mlp.is_infinite() && (hb.down_out - 2100.0).abs() < 1e-9 && hb.qkv == 400.0,
            "{hb:?}"
        );
        assert!(gemm_half_bounds(&b, 4, f64::NAN).down_out.is_infinite());
        b.norm1[0] = f32::INFINITY;
        assert!(gemm_half_bounds(&b, 4, 7.0).qkv.is_infinite());
    }

    /// The projection output: sqrt(d) * att * the largest row norm of W_proj.
    #[test]
    fn proj_out_bound_follows_the_attention_bound() {
        let mut b = block();
        assert_eq!(proj_out_bound(&b, 4, 20.5), 0.0, "a zero weight");
        b.proj_w
            .row_mut(2)
            .assign(&ndarray::arr1(&[0.0, 0.6, 0.8, 0.0])); // norm 1
        b.proj_w[[3, 0]] = -2.0; // norm 2
        let got = proj_out_bound(&b, 4, 20.5);
        assert!((got - 2.0 * 20.5 * 2.0).abs() < 1e-9, "{got}");
        assert!(proj_out_bound(&b, 4, f64::INFINITY).is_infinite());
        b.proj_w[[0, 1]] = f32::NAN;
        assert!(proj_out_bound(&b, 4, 20.5).is_infinite());
    }
}
