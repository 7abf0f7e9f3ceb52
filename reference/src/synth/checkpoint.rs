//! Writing a synthetic checkpoint directory: `config.json`, the weights in one safetensors file
//! or in shards with their index, each file's metadata in sorted order, all written to a
//! temporary directory first; and the weight files of a checkpoint directory.

use super::hash::content_sha256;
use super::tensors::{generate_tensors, tensor_specs};
use super::{SynthError, SynthReport, SynthSpec, io_err};
use crate::config::VisionConfig;
use safetensors::tensor::TensorView;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// `config.json`: the full model layout (`model_type` glm5_next, every vision field nested).
pub fn config_json(cfg: &VisionConfig, spec_note: &serde_json::Value) -> serde_json::Value {
    let mut vision = serde_json::to_value(cfg).expect("VisionConfig serializes");
    if let Some(obj) = vision.as_object_mut() {
        // Upstream fields the tower does not read, at upstream's defaults, so the file is complete.
        obj.insert("model_type".into(), "glm5_next_vision".into());
        obj.insert("attention_dropout".into(), 0.0.into());
        obj.insert("image_size".into(), 336.into());
        obj.insert("initializer_range".into(), 0.02.into());
    }
    serde_json::json!({
        "architectures": ["Glm5NextForConditionalGeneration"],
        "model_type": "glm5_next",
        "vision_config": vision,
        "glm5v_synth": spec_note,
    })
}

/// Splits tensors (in order) into `n` contiguous groups of about equal bytes, none empty.
fn shard_groups(sizes: &[usize], n: usize) -> Vec<std::ops::Range<usize>> {
    let total: usize = sizes.iter().sum();
    let mut groups = Vec::with_capacity(n);
    let mut start = 0;
    let mut acc = 0usize;
    for k in 0..n {
        let remaining_groups = n - k;
        if remaining_groups == 1 {
            groups.push(start..sizes.len());
            break;
        }
        let target = total * (k + 1) / n;
        let mut end = start + 1; // at least one tensor
        acc += sizes[start];
        // leave at least one tensor for every later group
        while end < sizes.len() - (remaining_groups - 1) && acc + sizes[end] / 2 <= target {
            acc += sizes[end];
            end += 1;
        }
        groups.push(start..end);
        start = end;
    }
    groups
}

/// Writes a synthetic checkpoint into `dir` (which must not exist, or be empty). Everything is
/// written to a sibling temporary directory first and renamed into place at the end, so a failure
/// leaves no partial checkpoint.
pub fn write_checkpoint(dir: &Path, spec: &SynthSpec) -> Result<SynthReport, SynthError> {
    let cfg = spec.vision_config();
    cfg.validate().map_err(SynthError::Config)?;
    let n_tensors = tensor_specs(&cfg).len();
    if spec.shards == 0 || spec.shards > n_tensors {
        return Err(SynthError::Spec(format!(
            "shards must be between 1 and the number of tensors ({n_tensors}), found {}",
            spec.shards
        )));
    }
    if dir.exists() {
        let empty = dir.is_dir()
            && std::fs::read_dir(dir)
                .map_err(io_err(dir))?
                .next()
                .is_none();
        if !empty {
            return Err(SynthError::NotEmpty(dir.display().to_string()));
        }
    }
    let file_name = dir.file_name().ok_or_else(|| {
        SynthError::Spec(format!("{} has no final path component", dir.display()))
    })?;
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent).map_err(io_err(&parent))?;
    static SERIAL: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let serial = SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = parent.join(format!(
        ".{}.synth-tmp-{}-{serial}",
        file_name.to_string_lossy(),
        std::process::id()
    ));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(io_err(&tmp))?;
    }
    std::fs::create_dir(&tmp).map_err(io_err(&tmp))?;
    let result = write_into(&tmp, &cfg, spec);
    let mut report = match result {
        Ok(r) => r,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(e);
        }
    };
    if dir.exists() {
        std::fs::remove_dir(dir).map_err(io_err(dir))?;
    }
    if let Err(source) = std::fs::rename(&tmp, dir) {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(SynthError::Io {
            path: dir.display().to_string(),
            source,
        });
    }
    report.dir = dir.to_path_buf();
    Ok(report)
}

fn write_into(tmp: &Path, cfg: &VisionConfig, spec: &SynthSpec) -> Result<SynthReport, SynthError> {
    let tensors = generate_tensors(cfg, spec.seed, spec.dtype)?;
    let hash = content_sha256(tensors.iter().map(|t| {
        (
            t.name.as_str(),
            t.dtype,
            t.shape.as_slice(),
            t.data.as_slice(),
        )
    }));
    let note = serde_json::json!({
        "preset": spec.preset_name(),
        "seed": spec.seed,
        "dtype": spec.dtype.name(),
        "content_sha256": hash,
    });
    let mut files = vec!["config.json".to_string()];
    let cfg_path = tmp.join("config.json");
    let text = serde_json::to_string_pretty(&config_json(cfg, &note)).expect("json serializes");
    std::fs::write(&cfg_path, text + "\n").map_err(io_err(&cfg_path))?;

    let meta: BTreeMap<String, String> = [
        ("format", "pt".to_string()),
        ("producer", "glm5v-synth".to_string()),
        ("seed", spec.seed.to_string()),
        ("content_sha256", hash.clone()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();

    let sizes: Vec<usize> = tensors.iter().map(|t| t.data.len()).collect();
    let groups = shard_groups(&sizes, spec.shards);
    let n = groups.len();
    let mut weight_map = BTreeMap::new();
    for (k, range) in groups.into_iter().enumerate() {
        let fname = if n == 1 {
            "model.safetensors".to_string()
        } else {
            format!("model-{:05}-of-{:05}.safetensors", k + 1, n)
        };
        let path = tmp.join(&fname);
        let mut views = Vec::with_capacity(range.len());
        for t in &tensors[range] {
            let view = TensorView::new(t.dtype, t.shape.clone(), &t.data).map_err(|source| {
                SynthError::Safetensors {
                    path: path.display().to_string(),
                    source,
                }
            })?;
            weight_map.insert(t.name.clone(), fname.clone());
            views.push((t.name.clone(), view));
        }
        let hashed: HashMap<String, String> = meta.clone().into_iter().collect();
        safetensors::serialize_to_file(views, Some(hashed), &path).map_err(|source| {
            SynthError::Safetensors {
                path: path.display().to_string(),
                source,
            }
        })?;
        sort_metadata(&path, &meta)?;
        files.push(fname);
    }
    let tensor_bytes: u64 = sizes.iter().map(|&s| s as u64).sum();
    if n > 1 {
        let index = serde_json::json!({
            "metadata": {"total_size": tensor_bytes},
            "weight_map": weight_map,
        });
        let path = tmp.join("model.safetensors.index.json");
        let text = serde_json::to_string_pretty(&index).expect("json serializes");
        std::fs::write(&path, text + "\n").map_err(io_err(&path))?;
        files.push("model.safetensors.index.json".into());
    }
    Ok(SynthReport {
        dir: tmp.to_path_buf(),
        config: cfg.clone(),
        seed: spec.seed,
        dtype: spec.dtype,
        files,
        num_tensors: tensors.len(),
        num_params: tensors
            .iter()
            .map(|t| t.shape.iter().product::<usize>() as u64)
            .sum(),
        tensor_bytes,
        content_sha256: hash,
    })
}

/// Rewrites the `__metadata__` object that `safetensors` wrote (in its hash map's order, which
/// changes run to run) as `meta`'s sorted order, in place: the same keys and values, so the same
/// length, and a regenerated checkpoint has the same bytes as the last one.
fn sort_metadata(path: &Path, meta: &BTreeMap<String, String>) -> Result<(), SynthError> {
    use std::io::{Read, Seek, SeekFrom, Write};
    let bad = |why: &str| SynthError::Checkpoint {
        path: path.display().to_string(),
        reason: format!("safetensors header: {why}"),
    };
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(io_err(path))?;
    let prefix = b"{\"__metadata__\":";
    let mut head = vec![0u8; 8 + prefix.len()];
    f.read_exact(&mut head).map_err(io_err(path))?;
    if &head[8..8 + prefix.len()] != prefix {
        return Err(bad("does not start with __metadata__"));
    }
    let sorted = serde_json::to_string(meta).expect("json serializes");
    let mut written = vec![0u8; sorted.len()];
    f.seek(SeekFrom::Start((8 + prefix.len()) as u64))
        .map_err(io_err(path))?;
    f.read_exact(&mut written).map_err(io_err(path))?;
    let same: BTreeMap<String, String> =
        serde_json::from_slice(&written).map_err(|_| bad("__metadata__ is not the map written"))?;
    if &same != meta {
        return Err(bad("__metadata__ differs from the map written"));
    }
    f.seek(SeekFrom::Start((8 + prefix.len()) as u64))
        .map_err(io_err(path))?;
    f.write_all(sorted.as_bytes()).map_err(io_err(path))
}

/// The safetensors files of a checkpoint directory: `model.safetensors`, or the shards listed by
/// `model.safetensors.index.json`.
pub fn weight_files(dir: &Path) -> Result<Vec<PathBuf>, SynthError> {
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return Ok(vec![single]);
    }
    let index = dir.join("model.safetensors.index.json");
    let text = std::fs::read_to_string(&index).map_err(|_| SynthError::Checkpoint {
        path: dir.display().to_string(),
        reason: "neither model.safetensors nor model.safetensors.index.json is present".into(),
    })?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| SynthError::Checkpoint {
        path: index.display().to_string(),
        reason: e.to_string(),
    })?;
    let map = v
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| SynthError::Checkpoint {
            path: index.display().to_string(),
            reason: "no `weight_map` object".into(),
        })?;
    let mut names: Vec<String> = Vec::new();
    for f in map.values() {
        let f = f.as_str().ok_or_else(|| SynthError::Checkpoint {
            path: index.display().to_string(),
            reason: "a `weight_map` value is not a string".into(),
        })?;
        if !names.iter().any(|n| n == f) {
            names.push(f.to_string());
        }
    }
    names.sort();
    Ok(names.into_iter().map(|n| dir.join(n)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::{PREFIX, Preset, SynthDtype, checkpoint_content_sha256};
    use safetensors::tensor::{Dtype, SafeTensors};

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("glm5v-synth-test-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn single_file_and_shards_hold_the_same_content() {
        let spec = SynthSpec {
            dtype: SynthDtype::F32,
            ..SynthSpec::new(Preset::Tiny, 11)
        };
        let d1 = tmpdir("single");
        let r1 = write_checkpoint(&d1, &spec).unwrap();
        assert_eq!(r1.files, vec!["config.json", "model.safetensors"]);
        let d3 = tmpdir("sharded");
        let r3 = write_checkpoint(
            &d3,
            &SynthSpec {
                shards: 3,
                ..spec.clone()
            },
        )
        .unwrap();
        assert_eq!(r1.content_sha256, r3.content_sha256);
        assert_eq!(checkpoint_content_sha256(&d1).unwrap(), r1.content_sha256);
        assert_eq!(checkpoint_content_sha256(&d3).unwrap(), r1.content_sha256);
        for f in [
            "model-00001-of-00003.safetensors",
            "model-00003-of-00003.safetensors",
        ] {
            assert!(
                r3.files.iter().any(|x| x == f),
                "{f} missing from {:?}",
                r3.files
            );
        }
        // The index lists every tensor, each in a file that holds it.
        let index: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(d3.join("model.safetensors.index.json")).unwrap(),
        )
        .unwrap();
        let map = index["weight_map"].as_object().unwrap();
        let specs = tensor_specs(&spec.vision_config());
        assert_eq!(map.len(), specs.len());
        for s in &specs {
            let name = format!("{PREFIX}{}", s.name);
            let file = map[&name].as_str().unwrap();
            let bytes = std::fs::read(d3.join(file)).unwrap();
            let st = SafeTensors::deserialize(&bytes).unwrap();
            let view = st.tensor(&name).unwrap();
            assert_eq!(view.shape(), s.shape.as_slice(), "{name}");
            assert_eq!(view.dtype(), Dtype::F32);
        }
        assert_eq!(
            index["metadata"]["total_size"].as_u64().unwrap(),
            r3.tensor_bytes
        );
        // config.json parses back to the same vision config, nested layout.
        let cfg = VisionConfig::from_path(&d3).unwrap();
        assert_eq!(cfg, spec.vision_config());
        let raw: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(d3.join("config.json")).unwrap())
                .unwrap();
        assert_eq!(raw["model_type"], "glm5_next");
        assert_eq!(raw["vision_config"]["patch_size"], 14);
        // Refuses to overwrite; no temp dirs left behind.
        assert!(matches!(
            write_checkpoint(&d1, &spec),
            Err(SynthError::NotEmpty(_))
        ));
        let parent = d1.parent().unwrap();
        let leftovers: Vec<_> = std::fs::read_dir(parent)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| {
                e.file_name().to_string_lossy().contains(&format!(
                    "synth-test-single-{}.synth-tmp",
                    std::process::id()
                ))
            })
            .collect();
        assert!(leftovers.is_empty());
        std::fs::remove_dir_all(&d1).unwrap();
        std::fs::remove_dir_all(&d3).unwrap();
    }

    #[test]
    fn bad_requests_are_typed_errors() {
        let d = tmpdir("bad");
        let e = write_checkpoint(
            &d,
            &SynthSpec {
                shards: 0,
                ..SynthSpec::new(Preset::Tiny, 1)
            },
        )
        .unwrap_err();
        assert!(e.to_string().contains("shards"), "{e}");
        let bad = VisionConfig {
            hidden_size: 72,
            num_heads: 4,
            ..Preset::Tiny.config()
        };
        let e = write_checkpoint(
            &d,
            &SynthSpec {
                config: Some(bad),
                ..SynthSpec::new(Preset::Tiny, 1)
            },
        )
        .unwrap_err();
        assert!(matches!(e, SynthError::Config(_)), "{e}");
        assert!(!d.exists());
        assert!("huge".parse::<Preset>().is_err());
        assert!("f16".parse::<SynthDtype>().is_err());
    }

    #[test]
    fn shard_groups_cover_everything_once() {
        for n in 1..=5 {
            let sizes = [5, 1, 1, 9, 2, 2, 7];
            let g = shard_groups(&sizes, n);
            assert_eq!(g.len(), n);
            assert_eq!(g[0].start, 0);
            assert_eq!(g[n - 1].end, sizes.len());
            for w in g.windows(2) {
                assert_eq!(w[0].end, w[1].start);
            }
            assert!(g.iter().all(|r| !r.is_empty()));
        }
    }

    #[test]
    fn a_regenerated_checkpoint_has_the_same_bytes() {
        // the metadata map is written sorted, so two runs give the same files (safetensors
        // writes its HashMap in an order that changes run to run)
        let spec = SynthSpec {
            shards: 2,
            ..SynthSpec::new(Preset::Tiny, 4)
        };
        let (d1, d2) = (tmpdir("bytes-a"), tmpdir("bytes-b"));
        let r1 = write_checkpoint(&d1, &spec).unwrap();
        let r2 = write_checkpoint(&d2, &spec).unwrap();
        assert_eq!(r1.files, r2.files);
        for f in r1.files.iter().filter(|f| f.ends_with(".safetensors")) {
            let (a, b) = (
                std::fs::read(d1.join(f)).unwrap(),
                std::fs::read(d2.join(f)).unwrap(),
            );
            assert!(a == b, "{f} differs between two runs");
            let n = u64::from_le_bytes(a[..8].try_into().unwrap()) as usize;
            let header = std::str::from_utf8(&a[8..8 + n]).unwrap();
            let want = format!(
                "{{\"__metadata__\":{{\"content_sha256\":\"{}\",\"format\":\"pt\",\"producer\":\"glm5v-synth\",\"seed\":\"4\"}},",
                r1.content_sha256
            );
            assert!(
                header.starts_with(&want),
                "{f}: {}",
                &header[..want.len().min(n)]
            );
            // and the file still reads back, with its metadata
            let (_, md) = SafeTensors::read_metadata(&a).unwrap();
            assert_eq!(md.metadata().as_ref().unwrap()["seed"], "4");
        }
        assert_eq!(checkpoint_content_sha256(&d1).unwrap(), r1.content_sha256);
        let _ = std::fs::remove_dir_all(&d1);
        let _ = std::fs::remove_dir_all(&d2);
    }
}
