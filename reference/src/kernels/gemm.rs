//! Matrix products through the `gemm` crate (runtime-dispatched AVX-512/AVX2 kernels).
//! Weights stay `[out, in]`; their transposes are read through strides, never copied.

use crate::real::Real;
use gemm::Parallelism;
use ndarray::{Array2, ArrayView1, ArrayView2, ArrayViewMut2, Axis};

/// Whether a product may use the rayon pool it is called from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Par {
    /// Single-threaded (inside an already parallel loop).
    Seq,
    /// All threads of the current rayon pool.
    Pool,
}

impl Par {
    fn gemm(self) -> Parallelism {
        match self {
            Par::Seq => Parallelism::None,
            Par::Pool => Parallelism::Rayon(0),
        }
    }
}

/// `dst = (accumulate ? dst : 0) + scale * a · b` with `a` `[m, k]`, `b` `[k, n]`, `dst` `[m, n]`;
/// any strides (pass `w.t()` to multiply by a transposed weight).
///
/// # Panics
/// If the shapes disagree (a caller bug: inputs are validated before reaching a kernel).
pub fn matmul_into<F: Real>(
    mut dst: ArrayViewMut2<F>,
    a: ArrayView2<F>,
    b: ArrayView2<F>,
    accumulate: bool,
    scale: F,
    par: Par,
) {
    let (m, k) = a.dim();
    let (k2, n) = b.dim();
    assert_eq!(k, k2, "matmul: inner dimensions differ");
    assert_eq!(dst.dim(), (m, n), "matmul: destination shape");
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            dst.fill(F::ZERO);
        }
        return;
    }
    let (ds, as_, bs) = (
        dst.strides().to_vec(),
        a.strides().to_vec(),
        b.strides().to_vec(),
    );
    // SAFETY: the pointers and strides come from live ndarray views of the stated shapes; `dst`
    // is borrowed mutably and cannot alias `a` or `b`.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            ds[1],
            ds[0],
            accumulate,
            a.as_ptr(),
            as_[1],
            as_[0],
            b.as_ptr(),
            bs[1],
            bs[0],
            F::ONE,
            scale,
            false,
            false,
            false,
            par.gemm(),
        );
    }
}

/// Up to this many rows, a pooled f32 `linear` on contiguous operands uses the skinny kernel
/// (`kernels::skinny`) where the CPU has AVX-512.
pub const SKINNY_MAX_ROWS: usize = 96;

/// A `Linear`: `x · wᵀ + bias` with `x` `[m, in]`, `w` `[out, in]`, `bias` `[out]`; returns `[m, out]`.
pub fn linear<F: Real>(
    x: ArrayView2<F>,
    w: ArrayView2<F>,
    bias: Option<ArrayView1<F>>,
    par: Par,
) -> Array2<F> {
    let mut y = Array2::<F>::from_elem((x.nrows(), w.nrows()), F::ZERO);
    linear_into(x, w, bias, par, y.as_slice_mut().expect("fresh array"));
    y
}

/// [`linear`] into a caller's buffer (`y.len() == m * out`, row-major; any previous contents are
/// overwritten), so a forward can reuse one allocation for a temporary across its blocks instead
/// of taking fresh pages from the system for every block.
///
/// # Panics
/// If `y` has the wrong length.
pub fn linear_into<F: Real>(
    x: ArrayView2<F>,
    w: ArrayView2<F>,
    bias: Option<ArrayView1<F>>,
    par: Par,
    y: &mut [F],
) {
    let (m, out) = (x.nrows(), w.nrows());
    assert_eq!(y.len(), m * out, "linear_into: output length");
    if par == Par::Pool
        && m <= SKINNY_MAX_ROWS
        && let (Some(xs), Some(ws)) = (x.as_slice(), w.as_slice())
    {
        let bs = bias
            .as_ref()
            .map(|b| b.as_slice().expect("contiguous bias"));
        if F::linear_skinny(xs, ws, bs, y, m, x.ncols(), out) {
            return;
        }
    }
    let mut yv = ArrayViewMut2::from_shape((m, out), y).expect("length checked");
    let accumulate = match bias {
        Some(b) => {
            yv.axis_iter_mut(Axis(0)).for_each(|mut row| row.assign(&b));
            true
        }
        None => false,
    };
    matmul_into(yv, x, w.t(), accumulate, F::ONE, par);
}

/// `y += x` elementwise (a residual connection; `y` row-major with `x`'s shape), rows split
/// over the team's threads (the two serial adds of each block took 1.3-1.4 ms of an 8x8
/// forward, the other thread waiting).
pub(crate) fn add_residual<F: Real>(y: &mut [F], x: ArrayView2<F>) {
    assert_eq!(y.len(), x.len(), "residual shapes");
    let cols = x.ncols();
    match x.as_slice() {
        Some(xs) if cols > 0 => crate::kernels::team::for_each_chunk_mut(y, cols, |i, row| {
            for (a, &b) in row.iter_mut().zip(&xs[i * cols..(i + 1) * cols]) {
                *a += b;
            }
        }),
        _ => y.iter_mut().zip(x.iter()).for_each(|(a, &b)| *a += b),
    }
}

/// A `Linear` weight as a forward holds it: the AMX tiles of [`Real::pack_amx`] where the CPU
/// has the matrix unit and the values are bf16 (exactly, or rounded for the bf16 mode), else the
/// panels of [`Real::pack_linear`] where `F` has them on this CPU, else the array `[out, in]` for
/// [`linear_into`]. The array is dropped once packed, so the weights are in memory once.
#[derive(Debug, Clone)]
pub struct LinearWeight<F> {
    kind: Kind<F>,
    /// The bf16 mode: inputs rounded to bf16 before the product (on the AMX tiles, as they are
    /// packed; on the other kinds, in a copy).
    bf16_inputs: bool,
    /// With `bf16_inputs`: the inputs at an IEEE half's precision instead (11 significant bits,
    /// f32's range), as the GPU's bf16 mode gives its block products ([`Self::with_half_inputs`]).
    half_inputs: bool,
}

#[derive(Debug, Clone)]
enum Kind<F> {
    Array(Array2<F>),
    Panels(crate::kernels::panel::Panels),
    Amx(crate::kernels::amx::AmxWeight),
    Dpbf16(crate::kernels::dpbf16::Bf16Panels),
}

/// Whether an f32 weight that is exactly bf16 runs as three bf16 products on AMX
/// (`GLM5V_CPU_AMX_F32=0` keeps the f32 panels there: A/B runs, bisecting).
fn amx_for_f32() -> bool {
    std::env::var("GLM5V_CPU_AMX_F32").as_deref() != Ok("0")
}

impl<F: Real> LinearWeight<F> {
    /// The f32 (or f64) mode's weight: on AMX when `F` is f32, the CPU has it and every value
    /// is a bf16 value (then the product is f32 by three bf16 products, `kernels::amx`); else
    /// panels or the array.
    pub fn new(w: Array2<F>) -> Self {
        let amx = (crate::kernels::amx::available() && amx_for_f32())
            .then(|| F::pack_amx(w.view(), false))
            .flatten();
        let kind = match amx {
            Some(a) => Kind::Amx(a),
            None => match F::pack_linear(w.view()) {
                Some(p) => Kind::Panels(p),
                None => Kind::Array(w),
            },
        };
        Self {
            kind,
            bf16_inputs: false,
            half_inputs: false,
        }
    }

    /// The bf16 mode's weight: every value rounded to bf16 once (a bf16 checkpoint's are
    /// already), and the inputs rounded to bf16 at each product; on the AMX tiles where the CPU
    /// has them, else on the panels or the array (the same products, another summation order).
    pub fn new_bf16(w: Array2<F>) -> Self {
        let amx = crate::kernels::amx::available()
            .then(|| F::pack_amx(w.view(), true))
            .flatten();
        let kind = match amx {
            Some(a) => Kind::Amx(a),
            None if let Some(p) = F::pack_dpbf16(w.view()) => Kind::Dpbf16(p),
            None => {
                let w = w.mapv(round_bf16);
                match F::pack_linear(w.view()) {
                    Some(p) => Kind::Panels(p),
                    None => Kind::Array(w),
                }
            }
        };
        Self {
            kind,
            bf16_inputs: true,
            half_inputs: false,
        }
    }

    /// A bf16-mode weight whose products take their inputs at an IEEE half's precision (11
    /// significant bits) where bf16 keeps 8: the GPU's bf16 mode runs the block products in half
    /// where the weights bound the values in its range (`gpu/src/half_bounds.rs`), and the
    /// CPU's bf16 products had been the larger error (tower/full: 1.90e-2 against the GPU's
    /// 1.06e-2). Without the range (f32's exponent), so no bound is needed. On the f32 kernels
    /// the rounding is another rounding; on the AVX512-BF16 panels and the AMX tiles the input
    /// is split in two bf16 parts (`hi + lo` is the rounded input exactly), two products. The
    /// bf16 mode gives it to the first four blocks' products by default (`cpu.rs`,
    /// `parse_half_inputs`).
    pub fn with_half_inputs(mut self, on: bool) -> Self {
        self.half_inputs = self.bf16_inputs && on;
        self
    }

    /// `out` of `[out, in]`.
    pub fn out_features(&self) -> usize {
        match &self.kind {
            Kind::Array(w) => w.nrows(),
            Kind::Panels(p) => p.rows(),
            Kind::Amx(a) => a.rows(),
            Kind::Dpbf16(p) => p.rows(),
        }
    }

    /// Which kernel runs this weight: `"amx"`, `"avx512-bf16"`, `"panels"` or `"gemm"`.
    pub fn kernel(&self) -> &'static str {
        match &self.kind {
            Kind::Array(_) => "gemm",
            Kind::Panels(_) => "panels",
            Kind::Amx(_) => "amx",
            Kind::Dpbf16(_) => "avx512-bf16",
        }
    }

    /// [`linear_into`] with this weight (`y.len() == m * out`, overwritten).
    pub fn apply_into(&self, x: ArrayView2<F>, bias: Option<ArrayView1<F>>, par: Par, y: &mut [F]) {
        self.apply_add_into(x, bias, None, par, y)
    }

    /// [`Self::apply_into`], then `y += residual` (`[m, out]`) when given: on the panels and the
    /// tiles in the kernel's last step, else as a pass of its own (the same bits either way).
    pub fn apply_add_into(
        &self,
        x: ArrayView2<F>,
        bias: Option<ArrayView1<F>>,
        residual: Option<ArrayView2<F>>,
        par: Par,
        y: &mut [F],
    ) {
        if let Some(r) = &residual {
            assert_eq!(
                r.dim(),
                (x.nrows(), self.out_features()),
                "linear: residual shape"
            );
        }
        if self.half_inputs
            && let Kind::Dpbf16(p) = &self.kind
        {
            return self.apply_split_dpbf16(p, x, bias, residual, y);
        }
        // The bf16 mode's inputs, rounded, where the kernel does not round them itself.
        let rounded = (self.bf16_inputs && !matches!(self.kind, Kind::Amx(_))).then(|| {
            if self.half_inputs {
                x.mapv(round_half_precision)
            } else {
                x.mapv(round_bf16)
            }
        });
        let x = rounded.as_ref().map_or(x, |r| r.view());
        match &self.kind {
            Kind::Array(w) => {
                linear_into(x, w.view(), bias, par, y);
                if let Some(r) = residual {
                    add_residual(y, r);
                }
            }
            Kind::Panels(p) => {
                assert_eq!(x.ncols(), p.cols(), "linear: input features");
                let x = x.as_standard_layout();
                let b = bias.as_ref().map(|b| b.as_standard_layout());
                let r = residual.as_ref().map(|r| r.as_standard_layout());
                F::linear_panels(
                    p,
                    x.as_slice().expect("standard layout"),
                    x.nrows(),
                    b.as_ref().map(|b| b.as_slice().expect("standard layout")),
                    r.as_ref().map(|r| r.as_slice().expect("standard layout")),
                    y,
                );
            }
            Kind::Amx(a) => {
                assert_eq!(x.ncols(), a.cols(), "linear: input features");
                let x = x.as_standard_layout();
                let b = bias.as_ref().map(|b| b.as_standard_layout());
                let r = residual.as_ref().map(|r| r.as_standard_layout());
                let parts = if self.half_inputs {
                    crate::kernels::amx::Parts::Two
                } else if self.bf16_inputs {
                    crate::kernels::amx::Parts::One
                } else {
                    crate::kernels::amx::Parts::Three
                };
                F::linear_amx(
                    a,
                    x.as_slice().expect("standard layout"),
                    x.nrows(),
                    b.as_ref().map(|b| b.as_slice().expect("standard layout")),
                    r.as_ref().map(|r| r.as_slice().expect("standard layout")),
                    y,
                    parts,
                );
            }
            Kind::Dpbf16(p) => {
                assert_eq!(x.ncols(), p.cols(), "linear: input features");
                let x = x.as_standard_layout();
                let b = bias.as_ref().map(|b| b.as_standard_layout());
                let r = residual.as_ref().map(|r| r.as_standard_layout());
                F::linear_dpbf16(
                    p,
                    x.as_slice().expect("standard layout"),
                    x.nrows(),
                    b.as_ref().map(|b| b.as_slice().expect("standard layout")),
                    r.as_ref().map(|r| r.as_slice().expect("standard layout")),
                    y,
                );
            }
        }
    }

    /// The half-precision inputs on the AVX512-BF16 panels: `x` rounded to 11 significant bits
    /// is `hi + lo` exactly, each part a bf16 value (8 + 3 bits); `y = W hi (+ bias, residual)`,
    /// then `+= W lo` (the weight is bf16, each product exact, the sums f32).
    fn apply_split_dpbf16(
        &self,
        p: &crate::kernels::dpbf16::Bf16Panels,
        x: ArrayView2<F>,
        bias: Option<ArrayView1<F>>,
        residual: Option<ArrayView2<F>>,
        y: &mut [F],
    ) {
        assert_eq!(x.ncols(), p.cols(), "linear: input features");
        let m = x.nrows();
        let mut hi = Vec::with_capacity(m * x.ncols());
        let mut lo = Vec::with_capacity(m * x.ncols());
        for &v in x.iter() {
            let h16 = round_half_precision(v);
            let h = round_bf16(h16);
            hi.push(h);
            lo.push(h16 - h);
        }
        let b = bias.as_ref().map(|b| b.as_standard_layout());
        let r = residual.as_ref().map(|r| r.as_standard_layout());
        F::linear_dpbf16(
            p,
            &hi,
            m,
            b.as_ref().map(|b| b.as_slice().expect("standard layout")),
            r.as_ref().map(|r| r.as_slice().expect("standard layout")),
            y,
        );
        drop(hi);
        let mut low = vec![F::ZERO; y.len()];
        F::linear_dpbf16(p, &lo, m, None, None, &mut low);
        y.iter_mut().zip(&low).for_each(|(a, b)| *a += *b);
    }

    /// [`linear`] with this weight.
    pub fn apply(&self, x: ArrayView2<F>, bias: Option<ArrayView1<F>>, par: Par) -> Array2<F> {
        let mut y = Array2::<F>::from_elem((x.nrows(), self.out_features()), F::ZERO);
        self.apply_into(x, bias, par, y.as_slice_mut().expect("fresh array"));
        y
    }
}

/// `v` rounded to 11 significant bits (an IEEE half's precision; f32's exponent range), to
/// nearest even, in `F`.
pub fn round_half_precision<F: Real>(v: F) -> F {
    let x = v.to_f64() as f32;
    if !x.is_finite() {
        return F::from_f32(x);
    }
    let b = x.to_bits();
    // 24 significant bits to 11: the low 13 go, rounding to nearest, ties to even
    let r = b.wrapping_add(0x0fff + ((b >> 13) & 1)) & !0x1fff;
    F::from_f32(f32::from_bits(r))
}

/// `v` rounded to the nearest bf16 value (to nearest even), in `F`.
pub fn round_bf16<F: Real>(v: F) -> F {
    F::from_f32(crate::kernels::amx::round_bf16(v.to_f64() as f32))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Array1;

    fn naive(x: &Array2<f64>, w: &Array2<f64>, b: Option<&Array1<f64>>) -> Array2<f64> {
        let mut y = Array2::zeros((x.nrows(), w.nrows()));
        for i in 0..x.nrows() {
            for o in 0..w.nrows() {
                let mut s = b.map_or(0.0, |b| b[o]);
                for j in 0..x.ncols() {
                    s += x[[i, j]] * w[[o, j]];
                }
                y[[i, o]] = s;
            }
        }
        y
    }

    /// `apply_add_into` = `apply_into`, then the residual added: the same bits, on the array
    /// path (f64) and on the panels (f32, where the CPU has them).
    #[test]
    fn residual_add_is_the_separate_add() {
        let mut lcg = crate::kernels::Lcg(3);
        let mut rnd = || lcg.unit() - 0.5;
        let (m, k, n) = (9, 300, 70);
        let x = Array2::from_shape_fn((m, k), |_| rnd());
        let w = Array2::from_shape_fn((n, k), |_| rnd());
        let b = Array1::from_shape_fn(n, |_| rnd());
        let r = Array2::from_shape_fn((m, n), |_| rnd());
        fn check<F: Real>(x: &Array2<F>, w: &Array2<F>, b: &Array1<F>, r: &Array2<F>) {
            let lw = LinearWeight::new(w.clone());
            let (m, n) = (x.nrows(), w.nrows());
            let mut want = vec![F::ZERO; m * n];
            lw.apply_into(x.view(), Some(b.view()), Par::Pool, &mut want);
            for (y, &r) in want.iter_mut().zip(r.iter()) {
                *y += r;
            }
            let mut y = vec![F::ZERO; m * n];
            lw.apply_add_into(x.view(), Some(b.view()), Some(r.view()), Par::Pool, &mut y);
            assert!(
                y.iter().zip(&want).all(|(a, b)| a.to_f64() == b.to_f64()),
                "{}",
                F::NAME
            );
        }
        check(&x, &w, &b, &r);
        let f = |a: &Array2<f64>| a.mapv(|v| half::bf16::from_f64(v).to_f32());
        check(&f(&x), &f(&w), &b.mapv(|v| v as f32), &f(&r));
    }

    #[test]
    fn linear_matches_a_naive_loop() {
        let mut lcg = crate::kernels::Lcg(1);
        let mut rnd = || lcg.unit() - 0.5;
        for (m, k, n) in [(1, 1, 1), (7, 13, 5), (33, 64, 70)] {
            let x = Array2::from_shape_fn((m, k), |_| rnd());
            let w = Array2::from_shape_fn((n, k), |_| rnd());
            let b = Array1::from_shape_fn(n, |_| rnd());
            for par in [Par::Seq, Par::Pool] {
                let y = linear(x.view(), w.view(), Some(b.view()), par);
                let want = naive(&x, &w, Some(&b));
                assert!((&y - &want).iter().all(|d| d.abs() < 1e-13), "{m}x{k}x{n}");
                let y = linear(x.view(), w.view(), None, par);
                let want = naive(&x, &w, None);
                assert!((&y - &want).iter().all(|d| d.abs() < 1e-13));
            }
            // into a dirty, reused buffer: the same values
            let mut buf = vec![7.0f64; m * n];
            for par in [Par::Seq, Par::Pool] {
                linear_into(x.view(), w.view(), Some(b.view()), par, &mut buf);
                let want = naive(&x, &w, Some(&b));
                assert!(
                    buf.iter()
                        .zip(want.iter())
                        .all(|(a, b)| (a - b).abs() < 1e-13)
                );
            }
            // a strided (column-block) input view
            let wide = Array2::from_shape_fn((m, 2 * k), |_| rnd());
            let x2 = wide.slice(ndarray::s![.., k..]);
            let y = linear(x2, w.view(), None, Par::Seq);
            let want = naive(&x2.to_owned(), &w, None);
            assert!((&y - &want).iter().all(|d| d.abs() < 1e-13));
        }
    }

    #[test]
    fn half_precision_rounds_to_eleven_bits_ties_to_even() {
        let r = |v: f32| round_half_precision(v);
        let u = 2f32.powi(-10); // an f16's spacing at 1
        assert_eq!(r(1.0 + u / 2.0), 1.0); // a tie, to the even neighbour below
        assert_eq!(r(1.0 + 1.5 * u), 1.0 + 2.0 * u); // a tie, to the even neighbour above
        assert_eq!(r(1.0 + 0.49 * u), 1.0);
        assert_eq!(r(-(1.0 + 0.51 * u)), -(1.0 + u));
        // f32's range kept: far below an f16's smallest normal, and far above its largest
        let tiny = 1.2345678e-9f32;
        assert!(((r(tiny) - tiny) / tiny).abs() <= 2f32.powi(-11));
        assert!((r(1.0e30) / 1.0e30 - 1.0).abs() <= 2f32.powi(-11));
        assert_eq!(r(f32::INFINITY), f32::INFINITY);
        assert!(r(f32::NAN).is_nan());
        // a rounded value is two bf16 parts exactly (what the AVX512-BF16 split relies on)
        let mut lcg = crate::kernels::Lcg(3);
        for _ in 0..10_000 {
            let v = ((lcg.unit() - 0.5) * 2f64.powi((lcg.unit() * 40.0) as i32 - 20)) as f32;
            let h16 = r(v);
            let hi = round_bf16(h16);
            let lo = h16 - hi;
            assert_eq!(round_bf16(lo), lo, "{v}");
            assert_eq!(hi + lo, h16, "{v}");
            assert!(((h16 - v) / v).abs() <= 2f32.powi(-11), "{v}");
        }
    }

    #[test]
    fn half_inputs_give_the_product_of_the_rounded_inputs() {
        // on every kernel this CPU (or GLM5V_CPU_ISA) picks: the two-part product of the
        // AVX512-BF16 panels, or the f32 kernels on rounded inputs
        let mut lcg = crate::kernels::Lcg(5);
        let mut rnd = || (lcg.unit() - 0.5) as f32;
        for (m, k, n) in [(1, 32, 16), (7, 96, 40), (70, 256, 72)] {
            let x = Array2::from_shape_fn((m, k), |_| rnd());
            let w = Array2::from_shape_fn((n, k), |_| round_bf16(rnd()));
            let b = Array1::from_shape_fn(n, |_| rnd());
            let res = Array2::from_shape_fn((m, n), |_| rnd());
            let lw = LinearWeight::new_bf16(w.clone()).with_half_inputs(true);
            let mut y = vec![0f32; m * n];
            lw.apply_add_into(
                x.view(),
                Some(b.view()),
                Some(res.view()),
                Par::Pool,
                &mut y,
            );
            let xh = x.mapv(|v| round_half_precision(v) as f64);
            let want =
                naive(&xh, &w.mapv(f64::from), Some(&b.mapv(f64::from))) + res.mapv(f64::from);
            for (&got, &want) in y.iter().zip(want.iter()) {
                assert!(
                    (got as f64 - want).abs() < 1e-5 * (1.0 + want.abs()),
                    "{m}x{k}x{n} on {}: {got} against {want}",
                    lw.kernel()
                );
            }
        }
    }
}
