//! The float type a CPU forward runs in: `f32` (upstream's f32 path) or `f64` (the tighter oracle).
//! One generic forward serves both; the few places where the two differ (exp, erf, taps) live here.

use std::borrow::Cow;
use std::fmt::Debug;
use std::ops::{Add, AddAssign, Div, Mul, MulAssign, Neg, Sub, SubAssign};

/// `f32` or `f64`. Implemented for nothing else (the `gemm` crate dispatches on these two).
pub trait Real:
    Copy
    + Send
    + Sync
    + Debug
    + Default
    + PartialOrd
    + 'static
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + AddAssign
    + SubAssign
    + MulAssign
{
    const ZERO: Self;
    const ONE: Self;
    /// "f32" or "f64" (the `precision` of a tap dump).
    const NAME: &'static str;
    fn from_f64(x: f64) -> Self;
    fn from_f32(x: f32) -> Self;
    fn to_f64(self) -> f64;
    fn sqrt(self) -> Self;
    fn cos(self) -> Self;
    fn sin(self) -> Self;
    fn exp(self) -> Self;
    /// The error function, accurate to about one unit in the last place of `Self`.
    fn erf(self) -> Self;
    fn is_finite(self) -> bool;
    /// `self * a + b` with one rounding (only called where the CPU has FMA instructions).
    fn mul_add(self, a: Self, b: Self) -> Self;
    /// A few-row product through the skinny kernel (`kernels::skinny`), when there is one for
    /// this type and CPU; returns false when the caller must use the general product.
    fn linear_skinny(
        _x: &[Self],
        _w: &[Self],
        _bias: Option<&[Self]>,
        _out: &mut [Self],
        _m: usize,
        _k: usize,
        _n: usize,
    ) -> bool {
        false
    }
    /// A `Linear` weight `[n, k]` repacked for the panel kernel (`kernels::panel`) when there is
    /// one for this type and CPU (f32 with AVX-512); `None` when the general product is used.
    fn pack_linear(_w: ndarray::ArrayView2<Self>) -> Option<crate::kernels::panel::Panels> {
        None
    }
    /// `y = x · wᵀ + bias` over panels made by [`Real::pack_linear`] (`x` `[m, k]`, `y` `[m, n]`,
    /// row-major), plus `residual` `[m, n]` when given (added last); only called for types
    /// whose `pack_linear` returns panels.
    fn linear_panels(
        _p: &crate::kernels::panel::Panels,
        _x: &[Self],
        _m: usize,
        _bias: Option<&[Self]>,
        _residual: Option<&[Self]>,
        _y: &mut [Self],
    ) {
        unreachable!("pack_linear returned no panels for {}", Self::NAME)
    }
    /// A `Linear` weight `[n, k]` in the AMX tile layout (`kernels::amx`), for f32 on a CPU with
    /// AMX: its values rounded to bf16 when `round`, else only when every value is bf16 already.
    fn pack_amx(
        _w: ndarray::ArrayView2<Self>,
        _round: bool,
    ) -> Option<crate::kernels::amx::AmxWeight> {
        None
    }
    /// `y = x · wᵀ + bias (+ residual)` on AMX tiles made by [`Real::pack_amx`]; only called for
    /// types whose `pack_amx` returns tiles.
    #[allow(clippy::too_many_arguments)]
    fn linear_amx(
        _a: &crate::kernels::amx::AmxWeight,
        _x: &[Self],
        _m: usize,
        _bias: Option<&[Self]>,
        _residual: Option<&[Self]>,
        _y: &mut [Self],
        _parts: crate::kernels::amx::Parts,
    ) {
        unreachable!("pack_amx returned no tiles for {}", Self::NAME)
    }
    /// A `Linear` weight `[n, k]` rounded to bf16 as pair panels for `vdpbf16ps`
    /// (`kernels::dpbf16`), for f32 on a CPU with AVX512-BF16.
    fn pack_dpbf16(_w: ndarray::ArrayView2<Self>) -> Option<crate::kernels::dpbf16::Bf16Panels> {
        None
    }
    /// `y = bf16(x) · wᵀ + bias (+ residual)` on panels made by [`Real::pack_dpbf16`].
    fn linear_dpbf16(
        _p: &crate::kernels::dpbf16::Bf16Panels,
        _x: &[Self],
        _m: usize,
        _bias: Option<&[Self]>,
        _residual: Option<&[Self]>,
        _y: &mut [Self],
    ) {
        unreachable!("pack_dpbf16 returned no panels for {}", Self::NAME)
    }
    /// `kt[c * ld + j] = k[j][c]` for every row j and column c of `k` (`kt` at least
    /// `k.ncols() * ld` long, `ld >= k.nrows()`; values past row j's end untouched).
    fn transpose_into(k: ndarray::ArrayView2<Self>, kt: &mut [Self], ld: usize) {
        crate::kernels::attention::transpose_scalar(k, kt, ld)
    }
    /// The largest value of a slice (-inf when empty).
    fn max_slice(xs: &[Self]) -> Self {
        crate::kernels::act::max_lanes(xs)
    }
    /// `xs[i] = exp(xs[i] - shift)`; returns the sum of the results.
    fn exp_shift_sum(xs: &mut [Self], shift: Self) -> Self {
        crate::kernels::act::exp_shift_sum_lanes(xs, shift)
    }
    /// `out[j] = clamped_swiglu(gate[j], up[j], limit)` over equal-length slices.
    fn swiglu_slice(gate: &[Self], up: &[Self], out: &mut [Self], limit: Self) {
        for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
            *o = crate::kernels::act::clamped_swiglu(g, u, limit);
        }
    }
    /// `xs[i] = gelu(xs[i])` (exact, erf) in place.
    fn gelu_slice(xs: &mut [Self]) {
        xs.iter_mut()
            .for_each(|v| *v = crate::kernels::act::gelu(*v));
    }
    /// The bf16 mode's attention on the AMX unit (`kernels::amx_attention`), where there is
    /// one for this type and CPU; `None` tells the caller to run the f32 attention.
    fn attention_bf16(
        _q: ndarray::ArrayView2<Self>,
        _k: ndarray::ArrayView2<Self>,
        _v: ndarray::ArrayView2<Self>,
        _cu_seqlens: &[usize],
        _heads: usize,
        _scale: Self,
    ) -> Option<ndarray::Array2<Self>> {
        None
    }
    /// The values as f32, borrowed when `Self` is f32 (taps cost no copy in the f32 mode).
    fn as_f32s(xs: &[Self]) -> Cow<'_, [f32]>;
    /// f32 values converted to `Self`, borrowed when `Self` is f32.
    fn from_f32s(xs: &[f32]) -> Cow<'_, [Self]>
    where
        [Self]: ToOwned<Owned = Vec<Self>>;

    fn max(self, other: Self) -> Self {
        if other > self { other } else { self }
    }
    fn min(self, other: Self) -> Self {
        if other < self { other } else { self }
    }
}

impl Real for f32 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    const NAME: &'static str = "f32";
    fn from_f64(x: f64) -> Self {
        x as f32
    }
    fn from_f32(x: f32) -> Self {
        x
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn sqrt(self) -> Self {
        f32::sqrt(self)
    }
    // cos, sin, erf: evaluated in f64 and rounded once, so they are (nearly) correctly rounded.
    fn cos(self) -> Self {
        (self as f64).cos() as f32
    }
    fn sin(self) -> Self {
        (self as f64).sin() as f32
    }
    #[inline(always)]
    fn exp(self) -> Self {
        crate::kernels::act::exp_f32(self)
    }
    fn erf(self) -> Self {
        crate::kernels::act::erf_f64(self as f64) as f32
    }
    fn is_finite(self) -> bool {
        f32::is_finite(self)
    }
    #[inline(always)]
    fn mul_add(self, a: Self, b: Self) -> Self {
        f32::mul_add(self, a, b)
    }
    fn max_slice(xs: &[f32]) -> f32 {
        crate::kernels::act::max_f32(xs)
    }
    fn exp_shift_sum(xs: &mut [f32], shift: f32) -> f32 {
        crate::kernels::act::exp_shift_sum_f32(xs, shift)
    }
    fn swiglu_slice(gate: &[f32], up: &[f32], out: &mut [f32], limit: f32) {
        crate::kernels::act::swiglu_f32(gate, up, out, limit)
    }
    fn gelu_slice(xs: &mut [f32]) {
        crate::kernels::act::gelu_f32_slice(xs)
    }
    fn linear_skinny(
        x: &[f32],
        w: &[f32],
        bias: Option<&[f32]>,
        out: &mut [f32],
        m: usize,
        k: usize,
        n: usize,
    ) -> bool {
        crate::kernels::skinny::linear_skinny_f32(x, w, bias, out, m, k, n)
    }
    fn pack_linear(w: ndarray::ArrayView2<Self>) -> Option<crate::kernels::panel::Panels> {
        // GLM5V_CPU_PANELS=0 keeps the general product (bisecting, benchmarks).
        (crate::kernels::panel::available()
            && std::env::var("GLM5V_CPU_PANELS").as_deref() != Ok("0"))
        .then(|| crate::kernels::panel::Panels::pack(w))
    }
    fn linear_panels(
        p: &crate::kernels::panel::Panels,
        x: &[Self],
        m: usize,
        bias: Option<&[Self]>,
        residual: Option<&[Self]>,
        y: &mut [Self],
    ) {
        match residual {
            Some(r) => p.linear_add_into(x, m, bias, r, y),
            None => p.linear_into(x, m, bias, y),
        }
    }
    fn pack_amx(
        w: ndarray::ArrayView2<Self>,
        round: bool,
    ) -> Option<crate::kernels::amx::AmxWeight> {
        crate::kernels::amx::AmxWeight::pack(w, round)
    }
    fn linear_amx(
        a: &crate::kernels::amx::AmxWeight,
        x: &[Self],
        m: usize,
        bias: Option<&[Self]>,
        residual: Option<&[Self]>,
        y: &mut [Self],
        parts: crate::kernels::amx::Parts,
    ) {
        a.linear(x, m, bias, residual, y, parts)
    }
    fn pack_dpbf16(w: ndarray::ArrayView2<Self>) -> Option<crate::kernels::dpbf16::Bf16Panels> {
        crate::kernels::dpbf16::preferred().then(|| crate::kernels::dpbf16::Bf16Panels::pack(w))
    }
    fn linear_dpbf16(
        p: &crate::kernels::dpbf16::Bf16Panels,
        x: &[Self],
        m: usize,
        bias: Option<&[Self]>,
        residual: Option<&[Self]>,
        y: &mut [Self],
    ) {
        p.linear(x, m, bias, residual, y)
    }
    fn transpose_into(k: ndarray::ArrayView2<f32>, kt: &mut [f32], ld: usize) {
        crate::kernels::attention::transpose_f32(k, kt, ld)
    }
    fn attention_bf16(
        q: ndarray::ArrayView2<f32>,
        k: ndarray::ArrayView2<f32>,
        v: ndarray::ArrayView2<f32>,
        cu_seqlens: &[usize],
        heads: usize,
        scale: f32,
    ) -> Option<ndarray::Array2<f32>> {
        use crate::kernels::amx_attention;
        amx_attention::enabled()
            .then(|| amx_attention::attention(q, k, v, cu_seqlens, heads, scale))
    }
    fn as_f32s(xs: &[Self]) -> Cow<'_, [f32]> {
        Cow::Borrowed(xs)
    }
    fn from_f32s(xs: &[f32]) -> Cow<'_, [Self]> {
        Cow::Borrowed(xs)
    }
}

impl Real for f64 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    const NAME: &'static str = "f64";
    fn from_f64(x: f64) -> Self {
        x
    }
    fn from_f32(x: f32) -> Self {
        x as f64
    }
    fn to_f64(self) -> f64 {
        self
    }
    fn sqrt(self) -> Self {
        f64::sqrt(self)
    }
    fn cos(self) -> Self {
        f64::cos(self)
    }
    fn sin(self) -> Self {
        f64::sin(self)
    }
    fn exp(self) -> Self {
        f64::exp(self)
    }
    fn erf(self) -> Self {
        crate::kernels::act::erf_f64(self)
    }
    fn is_finite(self) -> bool {
        f64::is_finite(self)
    }
    #[inline(always)]
    fn mul_add(self, a: Self, b: Self) -> Self {
        f64::mul_add(self, a, b)
    }
    fn as_f32s(xs: &[Self]) -> Cow<'_, [f32]> {
        Cow::Owned(xs.iter().map(|&x| x as f32).collect())
    }
    fn from_f32s(xs: &[f32]) -> Cow<'_, [Self]> {
        Cow::Owned(xs.iter().map(|&x| x as f64).collect())
    }
}
