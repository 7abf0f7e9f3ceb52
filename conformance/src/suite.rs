//! The committed upstream fixtures, run: every tower fixture (`fixtures/tower/*/fixture.json`)
//! through a backend, compared tap by tap with upstream's dump, and every prep fixture
//! (`fixtures/prep/expected/*.safetensors`) through the public prep pipeline.
//!
//! This is what `glm5v conformance` runs (also on the GPU machine, which has no cargo). The tower
//! under test comes from a factory the caller supplies, so this crate needs no GPU code.

use crate::dump::TapDump;
use crate::report::{Report, TolerancePick, compare_dumps, compare_dumps_with};
use crate::tolerance::Preset;
use glm5v_reference::synth::{
    Preset as SynthPreset, SynthDtype, SynthSpec, checkpoint_content_sha256, write_checkpoint,
};
use glm5v_reference::{Grid, TapFilter, TapMap, Tower};
use ndarray::Array2;
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Outcome of one fixture check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Pass,
    Fail,
    /// Not run (no device, ...): never counted as passed.
    Skipped,
}

/// One line of the summary.
#[derive(Debug, Clone, Serialize)]
pub struct FixtureResult {
    /// "tower" or "prep".
    pub kind: &'static str,
    pub name: String,
    /// What ran against what, e.g. "cpu f32 vs upstream".
    pub check: String,
    pub status: Status,
    pub preset: Option<String>,
    pub tolerance: Option<f64>,
    pub taps: usize,
    pub worst_tap: Option<String>,
    pub worst_rel_l2: Option<f64>,
    pub worst_ratio: Option<f64>,
    pub first_divergence: Option<String>,
    pub detail: String,
    pub secs: f64,
}

impl FixtureResult {
    fn new(kind: &'static str, name: &str, check: &str) -> Self {
        FixtureResult {
            kind,
            name: name.to_string(),
            check: check.to_string(),
            status: Status::Fail,
            preset: None,
            tolerance: None,
            taps: 0,
            worst_tap: None,
            worst_rel_l2: None,
            worst_ratio: None,
            first_divergence: None,
            detail: String::new(),
            secs: 0.0,
        }
    }

    /// A check that was not run, with the reason.
    pub fn skipped(kind: &'static str, name: &str, check: &str, why: &str) -> Self {
        let mut r = Self::new(kind, name, check);
        r.status = Status::Skipped;
        r.detail = why.to_string();
        r
    }

    fn with_report(mut self, report: &Report) -> Self {
        self.status = if report.passed {
            Status::Pass
        } else {
            Status::Fail
        };
        self.preset = Some(report.tolerance.name.clone());
        self.tolerance = Some(report.tolerance.rel_l2);
        self.taps = report.taps.len();
        if let Some(w) = report.worst() {
            self.worst_tap = Some(w.name.clone());
            self.worst_rel_l2 = w.stats.as_ref().map(|s| s.rel_l2);
            self.worst_ratio = w.ratio(&report.tolerance);
        }
        self.first_divergence = report.first_divergence.clone();
        self.detail = match (&report.first_divergence, &report.layout_mismatch) {
            (_, Some(m)) => m.clone(),
            (Some(d), _) => {
                let t = report
                    .taps
                    .iter()
                    .find(|t| &t.name == d)
                    .expect("divergence is a tap");
                format!(
                    "diverges at {d}: {}",
                    t.reason.as_deref().unwrap_or("fails")
                )
            }
            (None, None) if report.taps.is_empty() => "no tap in common with upstream".into(),
            (None, None) => {
                let missing = report.only_in_b.iter().filter(|n| is_taps_md(n)).count();
                if missing > 0 {
                    format!("{missing} TAPS.md taps of upstream's dump were not produced")
                } else {
                    String::new()
                }
            }
        };
        self
    }
}

/// Names of TAPS.md section 2 (module paths upstream's hooks may add beyond them are not required).
fn is_taps_md(name: &str) -> bool {
    let (kind, block) = crate::order::kind_and_block(name);
    match block {
        Some(_) => matches!(
            kind.as_str(),
            "norm1"
                | "attn.qkv"
                | "attn.q_norm"
                | "attn.k_norm"
                | "attn.proj.input"
                | "attn"
                | "norm2"
                | "mlp"
                | "block"
        ),
        None => matches!(
            name,
            "patch_embed"
                | "rotary_pos_emb.cos"
                | "rotary_pos_emb.sin"
                | "post_layernorm"
                | "downsample"
                | "merger.proj"
                | "merger.post_projection_norm"
                | "merger.act1"
                | "merger.gate_proj"
                | "merger.up_proj"
                | "merger.down_proj"
                | "merger"
        ),
    }
}

/// Everything one conformance run produced.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub backend: String,
    pub fixtures: Vec<FixtureResult>,
    /// No fixture failed and at least one passed (all skipped is not a pass).
    pub passed: bool,
}

impl Summary {
    pub fn new(backend: &str, fixtures: Vec<FixtureResult>) -> Self {
        let passed = fixtures.iter().all(|f| f.status != Status::Fail)
            && fixtures.iter().any(|f| f.status == Status::Pass);
        Summary {
            backend: backend.into(),
            fixtures,
            passed,
        }
    }

    /// A plain table, one line per check, then the worst error per preset and the skipped checks.
    pub fn table(&self) -> String {
        use std::fmt::Write;
        let mut o = String::new();
        let nw = self
            .fixtures
            .iter()
            .map(|f| f.name.len() + f.kind.len() + 1)
            .max()
            .unwrap_or(8)
            .max(8);
        let cw = self
            .fixtures
            .iter()
            .map(|f| f.check.len())
            .max()
            .unwrap_or(5)
            .max(5);
        let _ = writeln!(
            o,
            "{:<nw$}  {:<cw$}  {:<7}  {:>5}  {:>9}  {:>7}  {:<16}  detail",
            "fixture", "check", "status", "taps", "worst", "x tol", "preset"
        );
        for f in &self.fixtures {
            let status = match f.status {
                Status::Pass => "pass",
                Status::Fail => "FAIL",
                Status::Skipped => "skipped",
            };
            let worst = f
                .worst_rel_l2
                .map(|x| format!("{x:.2e}"))
                .unwrap_or_else(|| "-".into());
            let ratio = f
                .worst_ratio
                .map(|x| format!("{x:.2}"))
                .unwrap_or_else(|| "-".into());
            let mut detail = f.detail.clone();
            if let Some(t) = &f.worst_tap
                && detail.is_empty()
            {
                detail = format!("worst at {t}");
            }
            let _ = writeln!(
                o,
                "{:<nw$}  {:<cw$}  {:<7}  {:>5}  {:>9}  {:>7}  {:<16}  {}",
                format!("{}/{}", f.kind, f.name),
                f.check,
                status,
                f.taps,
                worst,
                ratio,
                f.preset.as_deref().unwrap_or("-"),
                detail
            );
        }
        let mut worst: std::collections::BTreeMap<&str, &FixtureResult> = Default::default();
        for f in self.fixtures.iter().filter(|f| f.worst_ratio.is_some()) {
            let p = f.preset.as_deref().unwrap_or("-");
            let e = worst.entry(p).or_insert(f);
            if f.worst_ratio > e.worst_ratio {
                *e = f;
            }
        }
        if !worst.is_empty() {
            let _ = writeln!(o, "\nworst error per preset:");
            for (p, f) in worst {
                let _ = writeln!(
                    o,
                    "  {p:<16} rel L2 {:.3e} = {:.2} x tolerance {:.3e}, at {}/{} {} ({})",
                    f.worst_rel_l2.unwrap_or(0.0),
                    f.worst_ratio.unwrap_or(0.0),
                    f.tolerance.unwrap_or(0.0),
                    f.kind,
                    f.name,
                    f.worst_tap.as_deref().unwrap_or("?"),
                    f.check
                );
            }
        }
        let (p, fl, s) = self.counts();
        let _ = writeln!(
            o,
            "\n{} checks: {p} passed, {fl} failed, {s} skipped -> {}",
            self.fixtures.len(),
            match (self.passed, fl) {
                (true, _) => "PASS",
                (false, 0) => "NOT PASSED (every check skipped)",
                _ => "FAIL",
            }
        );
        o
    }

    pub fn counts(&self) -> (usize, usize, usize) {
        let c = |s| self.fixtures.iter().filter(|f| f.status == s).count();
        (c(Status::Pass), c(Status::Fail), c(Status::Skipped))
    }
}

// ------------------------------------------------------------------------------------------------
// Tower fixtures
// ------------------------------------------------------------------------------------------------

/// Where a fixture's checkpoint comes from.
#[derive(Debug, Clone)]
pub enum CheckpointSource {
    /// A committed checkpoint folder.
    Dir(PathBuf),
    /// Regenerated with `synth` (weights not committed).
    Synth(SynthSpec),
}

/// One `fixtures/tower/<name>/fixture.json`.
#[derive(Debug, Clone)]
pub struct TowerFixture {
    pub name: String,
    pub dir: PathBuf,
    pub checkpoint: CheckpointSource,
    /// The recorded content hash of the weights, checked before use.
    pub content_sha256: Option<String>,
    /// The upstream dump (with `pixel_values` and `image_grid_thw`).
    pub dump: PathBuf,
    pub self_disagreement: Option<f64>,
}

fn fixture_err(name: &str, detail: impl Into<String>) -> crate::ConformanceError {
    crate::ConformanceError::Fixture {
        fixture: name.into(),
        detail: detail.into(),
    }
}

/// Reads every `fixture.json` under `tower_dir`, sorted by folder name.
pub fn tower_fixtures(tower_dir: &Path) -> crate::Result<Vec<TowerFixture>> {
    let mut out = Vec::new();
    let rd = std::fs::read_dir(tower_dir).map_err(|source| crate::ConformanceError::Io {
        path: tower_dir.into(),
        source,
    })?;
    let mut dirs: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    for d in dirs {
        let fj = d.join("fixture.json");
        if !fj.exists() {
            continue; // inputs/, or a checkpoint folder shared by fixtures
        }
        out.push(read_tower_fixture(tower_dir, &d, &fj)?);
    }
    Ok(out)
}

fn read_tower_fixture(tower_dir: &Path, dir: &Path, fj: &Path) -> crate::Result<TowerFixture> {
    let name = dir
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned();
    let text = std::fs::read_to_string(fj).map_err(|source| crate::ConformanceError::Io {
        path: fj.into(),
        source,
    })?;
    let v: Value = serde_json::from_str(&text)
        .map_err(|e| fixture_err(&name, format!("fixture.json: {e}")))?;
    let ck = &v["checkpoint"];
    let checkpoint = if let Some(d) = ck["dir"].as_str() {
        CheckpointSource::Dir(tower_dir.join(d))
    } else if ck["synth"].is_object() {
        let s = &ck["synth"];
        let preset: SynthPreset = s["preset"]
            .as_str()
            .unwrap_or("")
            .parse()
            .map_err(|e| fixture_err(&name, format!("checkpoint.synth.preset: {e}")))?;
        let seed = s["seed"]
            .as_u64()
            .ok_or_else(|| fixture_err(&name, "checkpoint.synth.seed is not a number"))?;
        let mut spec = SynthSpec::new(preset, seed);
        if let Some(d) = s["dtype"].as_str() {
            spec.dtype = d
                .parse::<SynthDtype>()
                .map_err(|e| fixture_err(&name, format!("checkpoint.synth.dtype: {e}")))?;
        }
        CheckpointSource::Synth(spec)
    } else {
        return Err(fixture_err(
            &name,
            "checkpoint has neither `dir` nor `synth`",
        ));
    };
    let dump = dir.join(v["dump"].as_str().unwrap_or("taps.safetensors"));
    Ok(TowerFixture {
        name,
        dir: dir.to_path_buf(),
        checkpoint,
        content_sha256: ck["content_sha256"].as_str().map(str::to_string),
        dump,
        self_disagreement: v["self_disagreement"].as_f64(),
    })
}

/// A checkpoint folder ready to load: committed, or regenerated into a temporary folder that is
/// removed on drop.
pub struct ReadyCheckpoint {
    pub dir: PathBuf,
    _temp: Option<TempDir>,
}

struct TempDir(PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl TowerFixture {
    /// The checkpoint, verified against the recorded content hash.
    pub fn checkpoint(&self, scratch: &Path) -> crate::Result<ReadyCheckpoint> {
        let ready = match &self.checkpoint {
            CheckpointSource::Dir(d) => ReadyCheckpoint {
                dir: d.clone(),
                _temp: None,
            },
            CheckpointSource::Synth(spec) => {
                let tmp = scratch.join(format!(
                    "glm5v-fixture-{}-{}",
                    self.name,
                    std::process::id()
                ));
                let _ = std::fs::remove_dir_all(&tmp);
                let guard = TempDir(tmp.clone());
                write_checkpoint(&tmp, spec)
                    .map_err(|e| fixture_err(&self.name, format!("regenerating weights: {e}")))?;
                ReadyCheckpoint {
                    dir: tmp,
                    _temp: Some(guard),
                }
            }
        };
        if let Some(want) = &self.content_sha256 {
            let got = checkpoint_content_sha256(&ready.dir)
                .map_err(|e| fixture_err(&self.name, e.to_string()))?;
            if &got != want {
                return Err(fixture_err(
                    &self.name,
                    format!(
                        "weights content sha256 {got} != recorded {want} (synth changed, or the files are damaged)"
                    ),
                ));
            }
        }
        Ok(ready)
    }
}

/// Reads `pixel_values` and the grids (images first, then videos) of an upstream dump.
pub fn dump_inputs(path: &Path) -> crate::Result<(Array2<f32>, Vec<Grid>)> {
    let b = glm5v_prep::read_prep_safetensors(path)
        .map_err(|e| fixture_err(&path.display().to_string(), format!("inputs: {e}")))?;
    let mut grids: Vec<Grid> = b
        .image_grid_thw
        .iter()
        .map(|g| g.map(|v| v as usize))
        .collect();
    grids.extend(b.video_grid_thw.iter().map(|g| g.map(|v| v as usize)));
    let rows = b.image_rows() + b.video_rows();
    let mut data = b.pixel_values;
    data.extend_from_slice(&b.pixel_values_videos);
    let px = Array2::from_shape_vec((rows, b.patch_dim), data)
        .map_err(|e| fixture_err(&path.display().to_string(), e.to_string()))?;
    Ok((px, grids))
}

/// The blocks whose taps `dump` holds (a filter so that a forward only keeps those).
pub fn filter_like(dump: &TapDump) -> TapFilter {
    let blocks: BTreeSet<usize> = dump
        .entries()
        .keys()
        .filter_map(|n| crate::order::kind_and_block(n).1)
        .collect();
    TapFilter::blocks(blocks)
}

/// Runs `tower` on `pixel_values`/`grids`, keeping the taps `filter` wants, as an in-memory dump.
pub fn forward_dump(
    tower: &dyn Tower,
    pixel_values: &Array2<f32>,
    grids: &[Grid],
    filter: TapFilter,
    label: &str,
) -> crate::Result<TapDump> {
    let mut sink = TapMap::new(filter);
    tower
        .forward(pixel_values.view(), grids, Some(&mut sink))
        .map_err(|e| fixture_err(label, format!("forward: {e}")))?;
    let grid_bytes: Vec<u8> = grids
        .iter()
        .flat_map(|g| g.iter().flat_map(|&v| (v as i64).to_le_bytes()))
        .collect();
    let mut bufs: Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)> = sink
        .taps
        .into_iter()
        .map(|(n, t)| {
            (
                n,
                safetensors::Dtype::F32,
                vec![t.rows, t.cols],
                t.data.iter().flat_map(|x| x.to_le_bytes()).collect(),
            )
        })
        .collect();
    bufs.push((
        "image_grid_thw".into(),
        safetensors::Dtype::I64,
        vec![grids.len(), 3],
        grid_bytes,
    ));
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = bufs
        .iter()
        .map(|(n, d, s, b)| {
            let v = safetensors::tensor::TensorView::new(*d, s.clone(), b).expect("consistent tap");
            (n.clone(), v)
        })
        .collect();
    let meta = HashMap::from([("producer".to_string(), tower.describe())]);
    let bytes =
        safetensors::serialize(views, Some(meta)).map_err(|e| fixture_err(label, e.to_string()))?;
    TapDump::from_bytes(Path::new(label), bytes)
}

/// A backend under test: builds a tower from a checkpoint folder.
pub type TowerFactory<'a> = dyn Fn(&Path) -> Result<Box<dyn Tower>, String> + 'a;

/// One check of a tower fixture: `candidate` (from `make`) against upstream's dump with `preset`.
pub fn check_tower_fixture(
    fx: &TowerFixture,
    scratch: &Path,
    check: &str,
    make: &TowerFactory<'_>,
    preset: Preset,
) -> FixtureResult {
    let t0 = Instant::now();
    let res = FixtureResult::new("tower", &fx.name, check);
    let mut r = match run_tower_check(fx, scratch, make, preset) {
        Ok(report) => res.with_report(&report),
        Err(e) => {
            let mut r = res;
            r.detail = e;
            r
        }
    };
    r.secs = t0.elapsed().as_secs_f64();
    r
}

fn run_tower_check(
    fx: &TowerFixture,
    scratch: &Path,
    make: &TowerFactory<'_>,
    preset: Preset,
) -> Result<Report, String> {
    let upstream = TapDump::open(&fx.dump).map_err(|e| e.to_string())?;
    let (px, grids) = dump_inputs(&fx.dump).map_err(|e| e.to_string())?;
    let ck = fx.checkpoint(scratch).map_err(|e| e.to_string())?;
    let tower = make(&ck.dir)?;
    drop(ck); // the weights are loaded; a regenerated folder can go
    let ours = forward_dump(
        tower.as_ref(),
        &px,
        &grids,
        filter_like(&upstream),
        &format!("{} ({})", fx.name, tower.describe()),
    )
    .map_err(|e| e.to_string())?;
    drop(tower);
    // the dump's metadata is the primary source of self_disagreement; fixture.json carries it too
    let tol = preset.tolerance(upstream.self_disagreement().or(fx.self_disagreement));
    compare_dumps_with(&ours, &upstream, tol).map_err(|e| e.to_string())
}

/// One check of two backends against each other on a tower fixture's inputs: `candidate` vs
/// `reference`, judged by `preset` (e.g. GPU f32 vs the CPU oracle with `gpu-f32`).
pub fn check_backends(
    fx: &TowerFixture,
    scratch: &Path,
    check: &str,
    candidate: &TowerFactory<'_>,
    reference: &TowerFactory<'_>,
    preset: Preset,
) -> FixtureResult {
    let t0 = Instant::now();
    let run = || -> Result<Report, String> {
        let upstream = TapDump::open(&fx.dump).map_err(|e| e.to_string())?;
        let (px, grids) = dump_inputs(&fx.dump).map_err(|e| e.to_string())?;
        let ck = fx.checkpoint(scratch).map_err(|e| e.to_string())?;
        let filter = filter_like(&upstream);
        let dump_of = |make: &TowerFactory<'_>| -> Result<TapDump, String> {
            let t = make(&ck.dir)?;
            forward_dump(
                t.as_ref(),
                &px,
                &grids,
                filter.clone(),
                &format!("{} ({})", fx.name, t.describe()),
            )
            .map_err(|e| e.to_string())
        };
        let b = dump_of(reference)?;
        let a = dump_of(candidate)?;
        compare_dumps(&a, &b, TolerancePick::Preset(preset)).map_err(|e| e.to_string())
    };
    let mut r = match run() {
        Ok(report) => FixtureResult::new("tower", &fx.name, check).with_report(&report),
        Err(e) => {
            let mut r = FixtureResult::new("tower", &fx.name, check);
            r.detail = e;
            r
        }
    };
    r.secs = t0.elapsed().as_secs_f64();
    r
}
