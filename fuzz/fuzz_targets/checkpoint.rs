//! Mutated checkpoints through `TowerWeights::<f32>::load`. A checkpoint directory (one per
//! process, rewritten each run) holds a small fixed config (depth 1, hidden 8, 2 heads, patch 2:
//! 24-value rows) and, depending on the first byte:
//! - even: the rest of the input as `model.safetensors`;
//! - odd: the rest as `model.safetensors.index.json`, with a valid shard `a.safetensors` (the
//!   seed checkpoint) beside it, so mutated indexes (missing shards, bad maps) are explored.
//!
//! Invariant beyond "no panic": a checkpoint that loads has every tensor the config names.
#![no_main]

use glm5v_reference::{TowerWeights, VisionConfig};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

/// The config of the seed checkpoints (`corpus/seed/checkpoint/`, made by `make_seeds.py`).
const CONFIG: &str = r#"{"depth": 1, "hidden_size": 8, "num_heads": 2, "intermediate_size": 8,
 "out_hidden_size": 8, "projection_intermediate_size": 8, "patch_size": 2, "temporal_patch_size": 2,
 "spatial_merge_size": 2, "in_channels": 3, "rope_parameters": {"rope_theta": 10000.0, "rope_type": "axial"}}"#;
/// A valid shard for the index mode.
const SHARD: &[u8] = include_bytes!("../corpus/seed/checkpoint/valid_f32");

fn dir() -> &'static tempfile::TempDir {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = tempfile::tempdir().expect("temp dir");
        std::fs::write(d.path().join("config.json"), CONFIG).expect("write config");
        // the shard file holds the mode byte first: strip it
        std::fs::write(d.path().join("a.safetensors"), &SHARD[1..]).expect("write shard");
        d
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let d = dir().path();
    let (file, other) = if mode & 1 == 0 {
        ("model.safetensors", "model.safetensors.index.json")
    } else {
        ("model.safetensors.index.json", "model.safetensors")
    };
    let _ = std::fs::remove_file(d.join(other));
    std::fs::write(d.join(file), rest).expect("write");
    if let Ok(w) = TowerWeights::<f32>::load(d) {
        let cfg = VisionConfig::from_json_str(CONFIG, "config").expect("the fixed config parses");
        assert_eq!(w.blocks.len(), cfg.depth);
        assert_eq!(w.patch_w.dim(), (cfg.hidden_size, cfg.patch_dim()));
    }
});
