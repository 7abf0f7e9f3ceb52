//! The `video` fuzz target (`--features video`): see `video_case.rs`.
#![no_main]

#[path = "video_case.rs"]
mod case;

libfuzzer_sys::fuzz_target!(|data: &[u8]| case::check(data));
