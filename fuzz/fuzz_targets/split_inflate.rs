//! The `split_inflate` fuzz target: see `split_inflate_case.rs`.
#![no_main]

#[path = "split_inflate_case.rs"]
mod case;

libfuzzer_sys::fuzz_target!(|data: &[u8]| case::check(data));
