//! `glm5v bisect`: two backends on one batch, each stage's own error next to the error it inherited.

use crate::CmdResult;
use crate::inputs::InputArgs;
use anyhow::{Context, bail};
use glm5v_conformance::bisect::bisect;
use glm5v_reference::{CpuTower, Tower, TowerWeights};
use std::path::{Path, PathBuf};

/// Find the stage that adds drift between two backends (layer-local vs inherited error).
///
/// Runs backend A (the reference) stage by stage, then for every stage runs backend B twice: on
/// its own previous output (the total error, what a tap diff shows) and on A's input of that stage
/// (the local error: what the stage adds by itself). A drifting kernel stands out by its local
/// error even when the drift inherited from earlier stages is already large.
///
/// Backends: cpu-f32, cpu-f64 (the tighter oracle), cpu-bf16 (the CPU's bf16 mode), gpu-f32,
/// gpu-bf16.
#[derive(clap::Args)]
pub struct Args {
    /// Checkpoint directory.
    #[arg(long, value_name = "DIR")]
    model: PathBuf,
    /// Backend A, the reference.
    #[arg(long, default_value = "cpu-f64", value_parser = BACKENDS)]
    reference: String,
    /// Backend B, the candidate.
    #[arg(long, default_value = "cpu-f32", value_parser = BACKENDS)]
    candidate: String,
    #[command(flatten)]
    input: InputArgs,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

const BACKENDS: [&str; 5] = ["cpu-f32", "cpu-f64", "cpu-bf16", "gpu-f32", "gpu-bf16"];

fn load(spec: &str, dir: &Path) -> anyhow::Result<Box<dyn Tower>> {
    let ctx = || format!("{spec}: loading {}", dir.display());
    Ok(match spec {
        "cpu-f32" => Box::new(CpuTower::new(
            TowerWeights::<f32>::load(dir).with_context(ctx)?,
        )),
        "cpu-f64" => Box::new(CpuTower::new(
            TowerWeights::<f64>::load(dir).with_context(ctx)?,
        )),
        "cpu-bf16" => Box::new(CpuTower::new_bf16(
            TowerWeights::<f32>::load(dir).with_context(ctx)?,
        )),
        "gpu-f32" | "gpu-bf16" => {
            let precision = if spec == "gpu-f32" {
                glm5v_gpu::Precision::F32
            } else {
                glm5v_gpu::Precision::Bf16
            };
            Box::new(
                glm5v_gpu::GpuTower::load(dir, glm5v_gpu::GpuOptions::new(precision))
                    .with_context(ctx)?,
            )
        }
        other => bail!("unknown backend {other}"),
    })
}

pub fn run(args: Args) -> CmdResult {
    let a = load(&args.reference, &args.model)?;
    let b = load(&args.candidate, &args.model)?;
    let batch = args.input.load(Some(&args.model))?;
    let r = bisect(
        a.as_ref(),
        b.as_ref(),
        batch.pixel_values.view(),
        &batch.grids,
    )
    .context("running the bisect")?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print!("{}", r.table());
    }
    Ok(())
}
