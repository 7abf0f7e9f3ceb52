//! Loading checkpoints: every failure is a typed error naming the problem; non-finite weights
//! load with a warning. Bad files are built here from the tiny fixture's tensors.

use glm5v_reference::{TowerWeights, WeightError};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

struct Entry {
    dtype: String,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tiny")
}

/// The fixture's tensors, by name (BF16).
fn tensors() -> BTreeMap<String, Entry> {
    let bytes = std::fs::read(fixture().join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    st.tensors()
        .into_iter()
        .map(|(n, t)| {
            (
                n,
                Entry {
                    dtype: format!("{:?}", t.dtype()),
                    shape: t.shape().to_vec(),
                    bytes: t.data().to_vec(),
                },
            )
        })
        .collect()
}

/// Serialises tensors by hand (so tests can also write broken files).
fn encode(tensors: &BTreeMap<String, Entry>) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (name, e) in tensors {
        let start = data.len();
        data.extend_from_slice(&e.bytes);
        header.insert(name.clone(), serde_json::json!({"dtype": e.dtype, "shape": e.shape, "data_offsets": [start, data.len()]}));
    }
    let mut text = serde_json::to_vec(&header).unwrap();
    while !text.len().is_multiple_of(8) {
        text.push(b' ');
    }
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend(text);
    out.extend(data);
    out
}

/// A checkpoint directory with the fixture's config and the given weight files.
fn checkpoint(files: &[(&str, Vec<u8>)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        fixture().join("config.json"),
        dir.path().join("config.json"),
    )
    .unwrap();
    for (name, bytes) in files {
        std::fs::write(dir.path().join(name), bytes).unwrap();
    }
    dir
}

fn load_err(dir: &Path) -> WeightError {
    match TowerWeights::<f32>::load(dir) {
        Ok(_) => panic!("loading {} should fail", dir.display()),
        Err(e) => e,
    }
}

#[test]
fn the_fixture_loads_and_round_trips_through_the_hand_encoder() {
    let dir = checkpoint(&[("model.safetensors", encode(&tensors()))]);
    let a = TowerWeights::<f32>::load(dir.path()).unwrap();
    let b = TowerWeights::<f32>::load(&fixture()).unwrap();
    assert_eq!(a.blocks[1].qkv_w, b.blocks[1].qkv_w);
    assert_eq!(a.down_w, b.down_w);
    assert!(a.warnings.is_empty());
}

#[test]
fn f32_and_f16_checkpoints_load_the_same_values() {
    let base = TowerWeights::<f32>::load(&fixture()).unwrap();
    for dtype in ["F32", "F16"] {
        let mut t = tensors();
        for e in t.values_mut() {
            let vals: Vec<f32> = e
                .bytes
                .chunks(2)
                .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect();
            e.bytes = if dtype == "F32" {
                vals.iter().flat_map(|v| v.to_le_bytes()).collect()
            } else {
                vals.iter()
                    .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
                    .collect()
            };
            e.dtype = dtype.into();
        }
        let dir = checkpoint(&[("model.safetensors", encode(&t))]);
        let w = TowerWeights::<f32>::load(dir.path()).unwrap();
        let tol = if dtype == "F32" { 0.0 } else { 1e-3 };
        let diff = (&w.merger.gate_up_w - &base.merger.gate_up_w)
            .iter()
            .fold(0.0f32, |a, d| a.max(d.abs()));
        assert!(diff <= tol, "{dtype}: max difference {diff}");
    }
}

#[test]
fn no_weight_files() {
    let dir = checkpoint(&[]);
    let e = load_err(dir.path());
    assert!(matches!(e, WeightError::NoWeights { .. }), "{e}");
}

#[test]
fn text_only_checkpoint_says_so() {
    let mut t = BTreeMap::new();
    t.insert(
        "model.language_model.embed_tokens.weight".to_string(),
        Entry {
            dtype: "F32".into(),
            shape: vec![2, 2],
            bytes: vec![0; 16],
        },
    );
    let dir = checkpoint(&[("model.safetensors", encode(&t))]);
    let e = load_err(dir.path());
    assert!(matches!(e, WeightError::TextOnly { .. }));
    assert!(
        e.to_string()
            .contains("text-only checkpoint, no vision tower"),
        "{e}"
    );
}

#[test]
fn missing_tensor_names_it_and_its_shape() {
    let mut t = tensors();
    t.remove("model.visual.blocks.1.mlp.down_proj.weight");
    let dir = checkpoint(&[("model.safetensors", encode(&t))]);
    let e = load_err(dir.path()).to_string();
    assert!(
        e.contains("missing tensor `model.visual.blocks.1.mlp.down_proj.weight`"),
        "{e}"
    );
    assert!(e.contains("[64, 128]"), "{e}");
}

#[test]
fn misshaped_tensor_names_expected_and_found() {
    let mut t = tensors();
    let e = t.get_mut("model.visual.merger.proj.weight").unwrap();
    e.shape = vec![48, 192];
    let dir = checkpoint(&[("model.safetensors", encode(&t))]);
    let e = load_err(dir.path());
    match &e {
        WeightError::Shape {
            name,
            expected,
            found,
        } => {
            assert_eq!(name, "model.visual.merger.proj.weight");
            assert_eq!(
                (expected.as_slice(), found.as_slice()),
                (&[96, 96][..], &[48, 192][..])
            );
        }
        other => panic!("{other}"),
    }
    assert!(e.to_string().contains("[48, 192]") && e.to_string().contains("[96, 96]"));
}

#[test]
fn wrong_dtype_is_named() {
    let mut t = tensors();
    t.get_mut("model.visual.post_layernorm.weight")
        .unwrap()
        .dtype = "I16".into();
    let dir = checkpoint(&[("model.safetensors", encode(&t))]);
    let e = load_err(dir.path()).to_string();
    assert!(
        e.contains("`model.visual.post_layernorm.weight` has dtype I16"),
        "{e}"
    );
}

#[test]
fn malformed_files_are_typed_errors() {
    let good = encode(&tensors());
    let n = u64::from_le_bytes(good[..8].try_into().unwrap()) as usize;
    let mut huge_len = good.clone();
    huge_len[..8].copy_from_slice(&(u64::MAX / 2).to_le_bytes());
    let mut bad_json = good.clone();
    bad_json[8] = b'!';
    let truncated = good[..good.len() - 10].to_vec();
    let mut out_of_range = tensors();
    out_of_range
        .get_mut("model.visual.downsample.bias")
        .unwrap()
        .shape = vec![96 * 4];
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", vec![]),
        ("short", vec![1, 2, 3]),
        ("huge header length", huge_len),
        ("bad json", bad_json),
        ("truncated data", truncated),
        ("header only", good[..8 + n].to_vec()),
        ("shape beyond its data", encode(&out_of_range)),
    ];
    for (what, bytes) in cases {
        let dir = checkpoint(&[("model.safetensors", bytes)]);
        let e = load_err(dir.path());
        assert!(matches!(e, WeightError::Header { .. }), "{what}: {e}");
        assert!(e.to_string().contains("model.safetensors"), "{what}: {e}");
    }
}

#[test]
fn sharded_checkpoints_load_and_missing_shards_are_named() {
    let all = tensors();
    let (mut a, mut b) = (BTreeMap::new(), BTreeMap::new());
    let mut map = serde_json::Map::new();
    for (i, (name, e)) in all.into_iter().enumerate() {
        let shard = if i % 2 == 0 {
            "model-00001-of-00002.safetensors"
        } else {
            "model-00002-of-00002.safetensors"
        };
        map.insert(name.clone(), serde_json::json!(shard));
        if i % 2 == 0 {
            a.insert(name, e)
        } else {
            b.insert(name, e)
        };
    }
    // a text tensor in a shard that is not there must not matter
    map.insert(
        "model.language_model.lm_head.weight".into(),
        serde_json::json!("model-00003-of-00003.safetensors"),
    );
    let index =
        serde_json::to_vec(&serde_json::json!({"metadata": {}, "weight_map": map})).unwrap();
    let dir = checkpoint(&[
        ("model.safetensors.index.json", index.clone()),
        ("model-00001-of-00002.safetensors", encode(&a)),
        ("model-00002-of-00002.safetensors", encode(&b)),
    ]);
    let w = TowerWeights::<f32>::load(dir.path()).unwrap();
    let base = TowerWeights::<f32>::load(&fixture()).unwrap();
    assert_eq!(w.patch_w, base.patch_w);
    assert_eq!(w.blocks[0].gate_up_w, base.blocks[0].gate_up_w);

    std::fs::remove_file(dir.path().join("model-00002-of-00002.safetensors")).unwrap();
    let e = load_err(dir.path());
    assert!(matches!(e, WeightError::MissingShard { .. }), "{e}");
    assert!(
        e.to_string().contains("model-00002-of-00002.safetensors"),
        "{e}"
    );

    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        b"{\"weight_map\": 3}",
    )
    .unwrap();
    assert!(matches!(load_err(dir.path()), WeightError::Index { .. }));
}

#[test]
fn non_finite_weights_load_with_a_warning_naming_the_tensor() {
    let mut t = tensors();
    let e = t.get_mut("model.visual.blocks.0.attn.qkv.bias").unwrap();
    e.bytes[0..2].copy_from_slice(&half::bf16::NAN.to_le_bytes());
    e.bytes[2..4].copy_from_slice(&half::bf16::INFINITY.to_le_bytes());
    let dir = checkpoint(&[("model.safetensors", encode(&t))]);
    let w = TowerWeights::<f32>::load(dir.path()).unwrap();
    assert_eq!(w.warnings.len(), 1);
    assert!(
        w.warnings[0].contains("model.visual.blocks.0.attn.qkv.bias")
            && w.warnings[0].contains("2 non-finite")
    );
    assert!(w.blocks[0].qkv_b.as_ref().unwrap()[0].is_nan());
}

#[test]
fn bad_config_is_a_config_error() {
    let dir = checkpoint(&[("model.safetensors", encode(&tensors()))]);
    std::fs::write(
        dir.path().join("config.json"),
        br#"{"vision_config": {"hidden_size": 66, "num_heads": 4}}"#,
    )
    .unwrap();
    let e = load_err(dir.path());
    assert!(matches!(e, WeightError::Config(_)), "{e}");
}
