//! The CPU kernels of the reference tower, one file per op. Each takes ndarray views and returns
//! owned arrays; shapes are stated beside the arguments (`[tokens, hidden]`).
pub mod act;
pub mod attention;
pub mod gemm;
pub mod norm;
pub mod panel;
pub mod rope;
pub mod skinny;
