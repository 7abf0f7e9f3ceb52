//! The CPU kernels of the reference tower, one file per op. Each takes ndarray views and returns
//! owned arrays; shapes are stated beside the arguments (`[tokens, hidden]`).
pub mod act;
pub mod amx;
pub mod amx_attention;
mod amx_kernel;
mod amx_kv;
pub mod attention;
pub mod dpbf16;
pub mod gemm;
pub mod isa;
pub mod norm;
pub mod panel;
pub mod peak;
pub mod rope;
pub mod skinny;
pub mod team;

use std::borrow::Cow;

/// A row's values as one slice: borrowed when the row is contiguous, else copied.
pub(crate) fn row_slice<F: Clone>(row: ndarray::ArrayView1<'_, F>) -> Cow<'_, [F]> {
    match row.to_slice() {
        Some(r) => Cow::Borrowed(r),
        None => Cow::Owned(row.to_vec()),
    }
}

/// The kernel tests' deterministic numbers: Knuth's MMIX linear congruential generator.
#[cfg(test)]
pub(crate) struct Lcg(pub(crate) u64);

#[cfg(test)]
impl Lcg {
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0
    }

    /// Uniform in [0, 1), from the top 53 bits.
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}
