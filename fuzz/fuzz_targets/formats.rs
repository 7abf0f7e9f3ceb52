//! The `formats` fuzz target: see `formats_case.rs`.
#![no_main]

#[path = "formats_case.rs"]
mod case;

libfuzzer_sys::fuzz_target!(|data: &[u8]| case::check(data));
