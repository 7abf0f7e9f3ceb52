//! `glm5v conformance`: every committed fixture, checked.

use crate::{CmdResult, Failure, out};
use anyhow::Context;
use glm5v_conformance::Preset;
use glm5v_conformance::prep_suite::run_prep_fixtures;
use glm5v_conformance::suite::{
    FixtureResult, Summary, check_backends, check_tower_fixture, tower_fixtures,
};
use glm5v_reference::{CpuTower, Tower, TowerWeights};
use std::path::{Path, PathBuf};

/// Run every upstream fixture and print a summary table; exits 1 on any failure.
///
/// Prep fixtures (fixtures/prep): our prep pipeline against upstream's processors, bit for bit.
/// Tower fixtures (fixtures/tower/*/fixture.json): the backend's taps against upstream's dump,
/// tap by tap (f32-vs-upstream for the CPU, and cpu-bf16 for its bf16 mode; gpu-f32 and gpu-bf16 for the GPU, plus the GPU
/// against the CPU oracle). Synthetic checkpoints that are not committed are regenerated and
/// checked against their recorded content hash. Without a CUDA device, GPU checks are reported
/// as skipped, never as passed.
#[derive(clap::Args)]
pub struct Args {
    /// Backend under test.
    #[arg(long, default_value = "cpu", value_parser = ["cpu", "gpu"])]
    backend: String,
    /// The fixtures directory.
    #[arg(long, value_name = "DIR", default_value = "fixtures")]
    fixtures: PathBuf,
    /// Which fixtures: all, prep or tower.
    #[arg(long, default_value = "all", value_parser = ["all", "prep", "tower"])]
    suite: String,
    /// Only fixtures whose name contains this text.
    #[arg(long, value_name = "TEXT")]
    only: Option<String>,
    /// Also write the summary as JSON (what `cargo xtask conformance` reads).
    #[arg(long, value_name = "FILE")]
    summary_json: Option<PathBuf>,
    /// Where regenerated synthetic checkpoints are written (removed afterwards).
    #[arg(long, value_name = "DIR", default_value_os_t = std::env::temp_dir())]
    scratch: PathBuf,
}

fn cpu_f32(dir: &Path) -> Result<Box<dyn Tower>, String> {
    let w = TowerWeights::<f32>::load(dir).map_err(|e| e.to_string())?;
    Ok(Box::new(CpuTower::new(w)))
}

fn cpu_bf16(dir: &Path) -> Result<Box<dyn Tower>, String> {
    let w = TowerWeights::<f32>::load(dir).map_err(|e| e.to_string())?;
    Ok(Box::new(CpuTower::new_bf16(w)))
}

fn gpu(precision: glm5v_gpu::Precision) -> impl Fn(&Path) -> Result<Box<dyn Tower>, String> {
    move |dir: &Path| {
        let t = glm5v_gpu::GpuTower::load(dir, glm5v_gpu::GpuOptions::new(precision))
            .map_err(|e| e.to_string())?;
        Ok(Box::new(t) as Box<dyn Tower>)
    }
}

pub fn run(args: Args) -> CmdResult {
    if !args.fixtures.is_dir() {
        return Err(anyhow::anyhow!(
            "{}: no fixtures directory here (run from the repository root, or pass --fixtures DIR)",
            args.fixtures.display()
        )
        .into());
    }
    let keep = |name: &str| args.only.as_deref().is_none_or(|o| name.contains(o));
    let mut results: Vec<FixtureResult> = Vec::new();
    let print = |r: &FixtureResult| {
        eprintln!(
            "  {:<5} {}/{} [{}] {:.1} s {}",
            match r.status {
                glm5v_conformance::suite::Status::Pass => "ok",
                glm5v_conformance::suite::Status::Fail => "FAIL",
                glm5v_conformance::suite::Status::Skipped => "skip",
            },
            r.kind,
            r.name,
            r.check,
            r.secs,
            r.detail
        )
    };

    // prep fixtures: backend-independent, run on every backend
    let prep_dir = args.fixtures.join("prep");
    if prep_dir.is_dir() && args.suite != "tower" {
        eprintln!("prep fixtures ({})", prep_dir.display());
        for r in run_prep_fixtures(&prep_dir)
            .into_iter()
            .filter(|r| keep(&r.name))
        {
            print(&r);
            results.push(r);
        }
    }

    // tower fixtures
    let tower_dir = args.fixtures.join("tower");
    if tower_dir.is_dir() && args.suite != "prep" {
        eprintln!(
            "tower fixtures ({}), backend {}",
            tower_dir.display(),
            args.backend
        );
        let fixtures = tower_fixtures(&tower_dir).context("reading the tower fixtures")?;
        let gpu_state = if args.backend == "gpu" {
            Some(glm5v_gpu::device_available())
        } else {
            None
        };
        for fx in fixtures.iter().filter(|f| keep(&f.name)) {
            let mut rs = Vec::new();
            match &gpu_state {
                None => {
                    rs.push(check_tower_fixture(
                        fx,
                        &args.scratch,
                        "cpu f32 vs upstream",
                        &cpu_f32,
                        Preset::F32VsUpstream,
                    ));
                    rs.push(check_tower_fixture(
                        fx,
                        &args.scratch,
                        "cpu bf16 vs upstream",
                        &cpu_bf16,
                        Preset::CpuBf16,
                    ));
                }
                Some(Err(e)) => {
                    let why = format!("no CUDA device: {e}");
                    for c in [
                        "gpu f32 vs upstream",
                        "gpu bf16 vs upstream",
                        "gpu f32 vs cpu f32",
                    ] {
                        rs.push(FixtureResult::skipped("tower", &fx.name, c, &why));
                    }
                }
                Some(Ok(_)) => {
                    let g32 = gpu(glm5v_gpu::Precision::F32);
                    let g16 = gpu(glm5v_gpu::Precision::Bf16);
                    rs.push(check_tower_fixture(
                        fx,
                        &args.scratch,
                        "gpu f32 vs upstream",
                        &g32,
                        Preset::GpuF32,
                    ));
                    rs.push(check_tower_fixture(
                        fx,
                        &args.scratch,
                        "gpu bf16 vs upstream",
                        &g16,
                        Preset::GpuBf16,
                    ));
                    rs.push(check_backends(
                        fx,
                        &args.scratch,
                        "gpu f32 vs cpu f32",
                        &g32,
                        &cpu_f32,
                        Preset::GpuF32,
                    ));
                }
            }
            for r in rs {
                print(&r);
                results.push(r);
            }
        }
    }
    if results.is_empty() {
        return Err(anyhow::anyhow!(
            "{}: no prep or tower fixtures found (expected prep/expected/*.safetensors and tower/*/fixture.json)",
            args.fixtures.display()
        )
        .into());
    }
    let summary = Summary::new(&args.backend, results);
    println!();
    print!("{}", summary.table());
    if let Some(p) = &args.summary_json {
        out::write_bytes(p, serde_json::to_string_pretty(&summary)?.as_bytes())?;
    }
    if summary.passed {
        Ok(())
    } else {
        Err(Failure::Verdict)
    }
}
