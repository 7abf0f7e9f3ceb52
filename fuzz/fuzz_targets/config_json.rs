//! `config.json` (the vision config, full or bare) and `preprocessor_config.json` parsing. The
//! first byte picks which; the rest is the file's text.
//!
//! Invariant beyond "no panic": a vision config that parses is usable, i.e. the derived sizes
//! the loader computes from it (head_dim, patch_dim, merge_unit, every tensor shape) do not
//! overflow, and a preprocessor config that loads validates.
#![no_main]

use glm5v_prep::PrepOptions;
use glm5v_reference::{VisionConfig, tensor_specs};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fn dir() -> &'static tempfile::TempDir {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("temp dir"))
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    if mode & 1 == 0 {
        if let Ok(cfg) = VisionConfig::from_json_str(text, "config.json") {
            let _ = (cfg.head_dim(), cfg.patch_dim(), cfg.merge_unit());
            // The loader builds these shapes for a parsed config; cap the work, not the values.
            if cfg.depth <= 64 {
                for (_, shape) in tensor_specs(&cfg) {
                    let _ = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
                }
            }
        }
    } else {
        let d = dir().path();
        let _ = std::fs::remove_file(d.join("video_preprocessor_config.json"));
        let name = if mode & 2 == 0 {
            "preprocessor_config.json"
        } else {
            "video_preprocessor_config.json"
        };
        std::fs::write(d.join(name), rest).expect("write");
        if let Ok(o) = PrepOptions::with_model_dir(d) {
            let _ = (
                o.image.factor(),
                o.image.patch_dim(),
                o.video.pixels.patch_dim(),
            );
        }
        let _ = std::fs::remove_file(d.join(name));
    }
});
