//! The `prep_images` fuzz target: see `prep_images_case.rs`.
#![no_main]

#[path = "prep_images_case.rs"]
mod case;

libfuzzer_sys::fuzz_target!(|data: &[u8]| case::check(data));
