//! The `jpeg_stripes` fuzz target: see `jpeg_stripes_case.rs`.
#![no_main]

#[path = "jpeg_stripes_case.rs"]
mod case;

libfuzzer_sys::fuzz_target!(|data: &[u8]| case::check(data));
