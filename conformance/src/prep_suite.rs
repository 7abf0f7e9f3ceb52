//! The prep fixtures (`fixtures/prep/expected/*.safetensors`, made by `fixtures/scripts/gen_prep.py`)
//! through the public prep pipeline, end to end: sources in, `pixel_values` + grids (+ prompt) out,
//! compared with what upstream's processors returned. (`conformance/tests/prep_fixtures.rs` checks
//! the stages in finer detail under `cargo test`; this is the same verdict for `glm5v conformance`,
//! which also runs where there is no cargo.)

use crate::suite::{FixtureResult, Status};
use glm5v_prep::prompt::{VideoPrompt, expand_prompt};
use glm5v_prep::{AlphaMode, ImageSource, PrepOptions, load_image, prep_images, prep_video_frames};
use safetensors::{Dtype, SafeTensors};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Every prep fixture of `set_dir` (`fixtures/prep`), in name order.
pub fn run_prep_fixtures(set_dir: &Path) -> Vec<FixtureResult> {
    let expected = set_dir.join("expected");
    let mut files: Vec<PathBuf> = match std::fs::read_dir(&expected) {
        Ok(rd) => rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
            .collect(),
        Err(e) => {
            let mut r = FixtureResult::skipped("prep", "*", "prep vs upstream", "");
            r.status = Status::Fail;
            r.detail = format!("cannot read {}: {e}", expected.display());
            return vec![r];
        }
    };
    files.sort();
    files.iter().map(|f| run_one(set_dir, f)).collect()
}

fn run_one(set_dir: &Path, file: &Path) -> FixtureResult {
    let name = file
        .file_stem()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned();
    let t0 = Instant::now();
    let mut r = FixtureResult::skipped("prep", &name, "prep vs upstream", "");
    match check(set_dir, file) {
        Ok(detail) => {
            r.status = Status::Pass;
            r.detail = detail;
        }
        Err(e) => {
            r.status = Status::Fail;
            r.detail = e;
        }
    }
    r.secs = t0.elapsed().as_secs_f64();
    r
}

struct Expected<'a> {
    st: SafeTensors<'a>,
    meta: HashMap<String, String>,
}

impl Expected<'_> {
    fn meta(&self, k: &str) -> Result<&str, String> {
        self.meta
            .get(k)
            .map(String::as_str)
            .ok_or_else(|| format!("metadata has no `{k}`"))
    }
    fn json(&self, k: &str) -> Result<Value, String> {
        serde_json::from_str(self.meta(k)?).map_err(|e| format!("metadata `{k}`: {e}"))
    }
    fn grid(&self, k: &str) -> Result<Vec<[i64; 3]>, String> {
        let t = self.st.tensor(k).map_err(|_| format!("no tensor `{k}`"))?;
        if t.dtype() != Dtype::I64 || t.shape().len() != 2 || t.shape()[1] != 3 {
            return Err(format!(
                "`{k}` is {:?} {:?}, expected I64 [n, 3]",
                t.dtype(),
                t.shape()
            ));
        }
        let v: Vec<i64> = t
            .data()
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        Ok(v.chunks_exact(3).map(|c| [c[0], c[1], c[2]]).collect())
    }
    fn f32s(&self, k: &str) -> Option<Vec<f32>> {
        let t = self.st.tensor(k).ok()?;
        (t.dtype() == Dtype::F32).then(|| {
            t.data()
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect()
        })
    }
}

fn sha256_f32(v: &[f32]) -> String {
    let mut h = Sha256::new();
    for x in v {
        h.update(x.to_le_bytes());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Compares our values with upstream's: stored floats when present, else the recorded sha256.
fn compare_values(
    what: &str,
    ours: &[f32],
    stored: Option<Vec<f32>>,
    sha: Option<&str>,
) -> Result<String, String> {
    if let Some(up) = stored {
        if up.len() != ours.len() {
            return Err(format!(
                "{what}: {} values, upstream {}",
                ours.len(),
                up.len()
            ));
        }
        let mut differ = 0usize;
        let mut max = 0f32;
        for (a, b) in ours.iter().zip(&up) {
            if a.to_bits() != b.to_bits() {
                differ += 1;
                max = max.max((a - b).abs());
            }
        }
        return if differ == 0 {
            Ok(format!("{what} bit-exact ({} values)", ours.len()))
        } else {
            Err(format!(
                "{what}: {differ} of {} values differ, max |diff| {max:e}",
                ours.len()
            ))
        };
    }
    let want = sha.ok_or_else(|| format!("neither `{what}` nor its sha256 is recorded"))?;
    let got = sha256_f32(ours);
    if got == want {
        Ok(format!("{what} bit-exact (sha256, {} values)", ours.len()))
    } else {
        Err(format!(
            "{what}: sha256 of our {} values differs from upstream's (run `cargo test -p glm5v-conformance --release --test prep_fixtures -- --nocapture` for the stage that differs)",
            ours.len()
        ))
    }
}

fn check(set_dir: &Path, file: &Path) -> Result<String, String> {
    let bytes = std::fs::read(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let (_, md) = SafeTensors::read_metadata(&bytes).map_err(|e| e.to_string())?;
    let meta = md.metadata().clone().unwrap_or_default();
    let st = SafeTensors::deserialize(&bytes).map_err(|e| e.to_string())?;
    let ex = Expected { st, meta };
    let kind = ex.meta("kind")?.to_string();
    let sources: Vec<String> =
        serde_json::from_str(ex.meta("source")?).map_err(|e| format!("metadata `source`: {e}"))?;
    let source_kind = ex.meta("source_kind").unwrap_or("path");
    let srcs: Vec<ImageSource> = sources
        .iter()
        .map(|s| {
            let p = set_dir.join(s);
            if source_kind == "data_uri" {
                std::fs::read_to_string(&p)
                    .map(|t| ImageSource::DataUri(t.trim().to_string()))
                    .map_err(|e| format!("cannot read {}: {e}", p.display()))
            } else {
                Ok(ImageSource::Path(p))
            }
        })
        .collect::<Result<_, _>>()?;
    let mut opts = PrepOptions::default();
    if ex.meta("alpha").unwrap_or("drop") == "white" {
        opts.decode.alpha = AlphaMode::White;
    }
    let kwargs = ex.json("processor_kwargs").unwrap_or(Value::Null);
    if let Some(n) = kwargs["min_image_tokens"].as_u64() {
        opts.image.min_tokens = n as usize;
    }
    if let Some(n) = kwargs["max_image_tokens"].as_u64() {
        opts.image.max_tokens = n as usize;
    }
    let merge = opts.image.merge_size;
    match kind.as_str() {
        "image" | "images" => {
            let b = prep_images(&srcs, &opts).map_err(|e| e.to_string())?;
            let want = ex.grid("image_grid_thw")?;
            if b.image_grid_thw != want {
                return Err(format!("grid {:?}, upstream {want:?}", b.image_grid_thw));
            }
            let mut detail = compare_values(
                "pixel_values",
                &b.pixel_values,
                ex.f32s("pixel_values"),
                ex.meta("pixel_values_sha256").ok(),
            )?;
            if let Ok(prompt) = ex.meta("prompt") {
                let grids: Vec<[usize; 3]> = want.iter().map(|g| g.map(|v| v as usize)).collect();
                let ours = expand_prompt(ex.meta("prompt_in")?, &grids, &[], merge)
                    .map_err(|e| e.to_string())?;
                if ours != prompt {
                    return Err("expanded prompt differs from upstream's".into());
                }
                detail.push_str(", prompt equal");
            }
            Ok(detail)
        }
        "video" => {
            let fps: f64 = ex
                .meta("fps")?
                .parse()
                .map_err(|e| format!("metadata `fps`: {e}"))?;
            let frames = srcs
                .iter()
                .map(|s| load_image(s, &opts.decode).map_err(|e| e.to_string()))
                .collect::<Result<Vec<_>, _>>()?;
            let v = prep_video_frames(&frames, fps, &opts).map_err(|e| e.to_string())?;
            let want = ex.grid("video_grid_thw")?;
            let ours_grid = vec![v.grid_thw.map(|d| d as i64)];
            if ours_grid != want {
                return Err(format!("grid {ours_grid:?}, upstream {want:?}"));
            }
            let mut detail = compare_values(
                "pixel_values_videos",
                &v.pixel_values,
                ex.f32s("pixel_values_videos"),
                ex.meta("pixel_values_videos_sha256").ok(),
            )?;
            if let Ok(prompt) = ex.meta("prompt") {
                let vp = VideoPrompt {
                    grid_thw: v.grid_thw,
                    timestamps: v.timestamps.clone(),
                };
                let ours = expand_prompt(ex.meta("prompt_in")?, &[], &[vp], merge)
                    .map_err(|e| e.to_string())?;
                if ours != prompt {
                    return Err(format!(
                        "expanded prompt differs from upstream's: ours {ours:?}"
                    ));
                }
                detail.push_str(", prompt equal");
            }
            Ok(detail)
        }
        other => Err(format!("unknown fixture kind `{other}`")),
    }
}
