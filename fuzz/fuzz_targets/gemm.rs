//! The `gemm` fuzz target: see `gemm_case.rs`.
#![no_main]

#[path = "gemm_case.rs"]
mod case;

libfuzzer_sys::fuzz_target!(|data: &[u8]| case::check(data));
