//! The CPU reference tower against upstream's taps, fixture by fixture (`fixtures/tower/`, made by
//! `fixtures/scripts/gen_tower.py` with transformers 5.23.0 and torch 2.15.0).
//!
//! Each fixture folder holds `fixture.json` (which checkpoint, the inputs, upstream's
//! `self_disagreement` and clamp shares) and `taps.safetensors` (upstream's taps, with
//! `pixel_values` and `image_grid_thw`). For each fixture this test loads the checkpoint (the
//! committed one, or for `full` the synth checkpoint regenerated from its seed, whose content
//! sha256 is checked first), runs the reference forward on the dump's own pixels with a dump
//! sink, and compares every tap both sides have with the conformance engine: NaN/Inf positions
//! identical, then relative L2 (f64) <= max(1e-5, 3 x self_disagreement) (`f32-vs-upstream`).
//! It prints, per fixture and precision, the worst tap and its ratio to self_disagreement.
//!
//! `full` (GLM-5.3-Flash geometry, ~560M parameters) runs only in release builds:
//! `cargo test -p glm5v-conformance --release --test tower_fixtures -- --nocapture`.

use glm5v_conformance::{Report, TapDump, TolerancePick, compare_dumps};
use glm5v_reference::synth::{self, Preset, SynthDtype, SynthSpec};
use glm5v_reference::{CpuTower, DumpSink, Grid, TapFilter, Tower, TowerWeights, VisionConfig};
use ndarray::Array2;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn set_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/tower")
}

fn fixture_json(name: &str) -> Value {
    let path = set_dir().join(name).join("fixture.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Which precision the reference computes in.
#[derive(Clone, Copy, Debug)]
enum Prec {
    F32,
    F64,
}

fn load_tower(dir: &Path, prec: Prec) -> Box<dyn Tower> {
    match prec {
        Prec::F32 => Box::new(CpuTower::new(
            TowerWeights::<f32>::load(dir)
                .unwrap_or_else(|e| panic!("load {}: {e}", dir.display())),
        )),
        Prec::F64 => Box::new(CpuTower::new(
            TowerWeights::<f64>::load(dir)
                .unwrap_or_else(|e| panic!("load {}: {e}", dir.display())),
        )),
    }
}

/// The blocks a dump has taps of (`None` when it has them all).
fn block_filter(upstream: &TapDump, depth: usize) -> TapFilter {
    let blocks: std::collections::BTreeSet<usize> = upstream
        .entries()
        .keys()
        .filter_map(|n| n.strip_prefix("blocks.")?.split('.').next()?.parse().ok())
        .collect();
    if blocks.len() == depth {
        TapFilter::all()
    } else {
        TapFilter::blocks(blocks)
    }
}

/// Runs the reference on the upstream dump's inputs, writes our dump, compares the two.
fn run_and_compare(label: &str, ckpt: &Path, upstream_path: &Path, prec: Prec) -> Report {
    let upstream = TapDump::open(upstream_path).unwrap_or_else(|e| panic!("{e}"));
    let (shape, px) = upstream
        .tap("pixel_values")
        .unwrap_or_else(|e| panic!("{e}"));
    let grids: Vec<Grid> = upstream
        .grid("image_grid_thw")
        .unwrap_or_else(|e| panic!("{e}"))
        .expect("the dump has image_grid_thw")
        .into_iter()
        .map(|g| [g[0] as usize, g[1] as usize, g[2] as usize])
        .collect();
    let px: Vec<f32> = px.into_iter().map(|v| v as f32).collect(); // exact: stored as f32
    let pixels = Array2::from_shape_vec((shape[0], shape[1]), px).expect("pixel_values shape");

    let tower = load_tower(ckpt, prec);
    let cfg: &VisionConfig = tower.config();
    let tmp = tempfile::tempdir().expect("temp dir");
    let ours_path = tmp.path().join(format!("{label}.safetensors"));
    let mut sink =
        DumpSink::create(&ours_path, block_filter(&upstream, cfg.depth)).expect("dump sink");
    sink.inputs(pixels.as_slice().unwrap(), shape[0], shape[1], &grids);
    let out = tower
        .forward(pixels.view(), &grids, Some(&mut sink))
        .unwrap_or_else(|e| panic!("{label}: {e}"));
    sink.finish().expect("write our dump");
    assert_eq!(out.nrows(), shape[0] / cfg.merge_unit());

    let ours = TapDump::open(&ours_path).unwrap_or_else(|e| panic!("{e}"));
    compare_dumps(&ours, &upstream, TolerancePick::default()).unwrap_or_else(|e| panic!("{e}"))
}

/// Prints the summary and asserts the report passed, on every tap upstream has.
fn judge(label: &str, report: &Report, upstream_taps: usize) {
    let tol = &report.tolerance;
    let sd = tol
        .self_disagreement
        .expect("the fixture records self_disagreement");
    let worst = report.worst().expect("at least one tap compared");
    let rel = worst.stats.as_ref().map(|s| s.rel_l2).unwrap_or(f64::NAN);
    println!(
        "{label}: {} taps, worst {} rel L2 {rel:.3e} = {:.2} x self_disagreement ({sd:.3e}), {:.2} x bound {:.3e}; {}",
        report.taps.len(),
        worst.name,
        rel / sd,
        rel / tol.rel_l2,
        tol.rel_l2,
        if report.passed { "pass" } else { "FAIL" }
    );
    for t in report.taps.iter().filter(|t| !t.verdict.passed()) {
        println!(
            "  {} {}: {}",
            t.verdict.label(),
            t.name,
            t.reason.as_deref().unwrap_or("")
        );
    }
    assert!(
        report.layout_mismatch.is_none(),
        "{label}: {:?}",
        report.layout_mismatch
    );
    assert!(
        report.only_in_b.is_empty(),
        "{label}: taps only upstream has: {:?}",
        report.only_in_b
    );
    assert!(
        report.only_in_a.is_empty(),
        "{label}: taps only we have: {:?}",
        report.only_in_a
    );
    assert_eq!(
        report.taps.len(),
        upstream_taps,
        "{label}: every upstream tap compared"
    );
    assert!(
        report.passed,
        "{label}: first divergence at {:?}",
        report.first_divergence
    );
}

/// Upstream's float entries: every tap and `pixel_values` (the engine compares it too).
fn upstream_tap_count(path: &Path) -> usize {
    let d = TapDump::open(path).unwrap();
    d.entries()
        .keys()
        .filter(|n| n.as_str() != "image_grid_thw")
        .count()
}

/// A fixture whose checkpoint is committed in `fixtures/tower/<dir>`.
fn committed(name: &str, prec: Prec) {
    let fx = fixture_json(name);
    let dir = set_dir().join(fx["checkpoint"]["dir"].as_str().expect("checkpoint.dir"));
    let dump = set_dir().join(name).join(fx["dump"].as_str().unwrap());
    let report = run_and_compare(name, &dir, &dump, prec);
    judge(
        &format!("{name} ({prec:?})"),
        &report,
        upstream_tap_count(&dump),
    );
}

#[test]
fn tiny_f32() {
    committed("tiny", Prec::F32);
}

#[test]
fn tiny_f64() {
    committed("tiny", Prec::F64);
}

#[test]
fn packed_f32() {
    committed("packed", Prec::F32);
}

#[test]
fn packed_f64() {
    committed("packed", Prec::F64);
}

#[test]
fn altered_f32() {
    committed("altered", Prec::F32);
}

#[test]
fn altered_f64() {
    committed("altered", Prec::F64);
}

/// Segments of 288 and 144 tokens: the attention's long path (and the AMX one where the CPU has
/// AMX), which no other fixture reaches (their segments are at most 128 tokens).
#[test]
fn long_f32() {
    committed("long", Prec::F32);
}

#[test]
fn long_f64() {
    committed("long", Prec::F64);
}

/// The committed synth checkpoints are what `synth` makes today from their recipe, and their
/// content hash is the one recorded (so a synth change cannot silently drift from the fixtures).
#[test]
fn committed_checkpoints_match_their_synth_recipe() {
    for name in ["tiny", "altered", "long"] {
        let fx = fixture_json(name);
        let ck = &fx["checkpoint"];
        let dir = set_dir().join(ck["dir"].as_str().unwrap());
        let recorded = ck["content_sha256"].as_str().unwrap();
        assert_eq!(
            synth::checkpoint_content_sha256(&dir).unwrap(),
            recorded,
            "{name}: committed weights"
        );
        let recipe = &ck["synth"];
        let seed = recipe["seed"].as_u64().unwrap();
        let dtype: SynthDtype = recipe["dtype"].as_str().unwrap().parse().unwrap();
        let cfg = VisionConfig::from_path(&dir).unwrap();
        let tensors = synth::generate_tensors(&cfg, seed, dtype).unwrap();
        let hash = synth::content_sha256(tensors.iter().map(|t| {
            (
                t.name.as_str(),
                t.dtype,
                t.shape.as_slice(),
                t.data.as_slice(),
            )
        }));
        assert_eq!(
            hash, recorded,
            "{name}: synth output for seed {seed} drifted from the fixture"
        );
    }
}

/// GLM-5.3-Flash geometry: regenerate the synth checkpoint, check its hash, compare blocks
/// 0, 1, 12, 23 and the head.
#[test]
fn full_geometry() {
    if cfg!(debug_assertions) {
        println!(
            "SKIPPED full_geometry: ~560M parameters, run `cargo test -p glm5v-conformance --release --test tower_fixtures`"
        );
        return;
    }
    let fx = fixture_json("full");
    let recipe = &fx["checkpoint"]["synth"];
    assert_eq!(recipe["preset"], "full");
    let spec = SynthSpec {
        preset: Preset::Full,
        seed: recipe["seed"].as_u64().unwrap(),
        dtype: recipe["dtype"].as_str().unwrap().parse().unwrap(),
        shards: 1,
        config: None,
    };
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("full");
    let t0 = std::time::Instant::now();
    let r = synth::write_checkpoint(&dir, &spec).unwrap();
    println!(
        "full: synth {:.1} s, {} params",
        t0.elapsed().as_secs_f64(),
        r.num_params
    );
    assert_eq!(
        r.content_sha256,
        fx["checkpoint"]["content_sha256"].as_str().unwrap(),
        "regenerated full checkpoint differs from the one the fixture was made from"
    );
    let committed_cfg = VisionConfig::from_path(&set_dir().join("full")).unwrap();
    assert_eq!(VisionConfig::from_path(&dir).unwrap(), committed_cfg);
    let dump = set_dir().join("full").join(fx["dump"].as_str().unwrap());
    let n = upstream_tap_count(&dump);
    for prec in [Prec::F32, Prec::F64] {
        let t0 = std::time::Instant::now();
        let report = run_and_compare("full", &dir, &dump, prec);
        println!(
            "full ({prec:?}): load + forward + compare {:.1} s",
            t0.elapsed().as_secs_f64()
        );
        judge(&format!("full ({prec:?})"), &report, n);
    }
}

/// The `altered` fixture catches each altered rule: read back with upstream's default for one
/// field, the reference must diverge from upstream first at the tap that field shapes.
#[test]
fn altered_fixture_catches_default_values() {
    let fx = fixture_json("altered");
    let src = set_dir().join(fx["checkpoint"]["dir"].as_str().unwrap());
    let dump = set_dir().join("altered").join(fx["dump"].as_str().unwrap());
    let cases: [(&str, Value, &str); 3] = [
        ("rms_norm_eps", Value::from(1e-5), "blocks.0.norm1"),
        ("swiglu_limit", Value::from(10.0), "blocks.0.mlp"),
        (
            "rope_parameters",
            serde_json::json!({"rope_theta": 10000.0, "rope_type": "axial"}),
            "rotary_pos_emb.cos",
        ),
    ];
    for (field, value, first) in cases {
        let tmp = tempfile::tempdir().expect("temp dir");
        let mut cfg: Value =
            serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap())
                .unwrap();
        cfg["vision_config"][field] = value;
        std::fs::write(tmp.path().join("config.json"), cfg.to_string()).unwrap();
        std::fs::copy(
            src.join("model.safetensors"),
            tmp.path().join("model.safetensors"),
        )
        .unwrap();
        let report = run_and_compare("altered-mutant", tmp.path(), &dump, Prec::F32);
        assert!(
            !report.passed,
            "{field} at its default should not match upstream"
        );
        assert_eq!(report.first_divergence.as_deref(), Some(first), "{field}");
        let worst = report.worst().unwrap();
        println!(
            "altered with default {field}: first divergence {first}, worst {} rel L2 {:.3e}",
            worst.name,
            worst.stats.as_ref().unwrap().rel_l2
        );
    }
}
