//! The `formats` fuzz target: see `formats_case.rs`.
#![no_main]

#[path = "formats_case.rs"]
mod case;

libfuzzer_sys::fuzz_target!(
    init: {
        // libfuzzer-sys's panic hook aborts on every panic, caught or not. rav1d (AV1, for AVIF)
        // panics on some damaged streams by design, and prep's AV1 decoder catches those and
        // answers a `Corrupt` error after releasing the decoder (`prep/src/decode/av1.rs`), so
        // they unwind here as in production; any other panic, or one that escapes, still fails.
        let abort = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if glm5v_prep::decoder_panic_is_caught(info.location()) {
                return;
            }
            abort(info);
        }));
    },
    |data: &[u8]| case::check(data)
);
