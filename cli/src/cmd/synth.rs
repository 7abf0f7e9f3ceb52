//! `glm5v synth`: write a deterministic synthetic checkpoint (reference crate's `synth` module).

use crate::CmdResult;
use glm5v_reference::VisionConfig;
use glm5v_reference::synth::{Preset, SynthDtype, SynthSpec, write_checkpoint};
use std::path::PathBuf;

/// Write a synthetic GLM-5.3-Flash checkpoint (config.json + safetensors, model.visual.* names).
///
/// The weights are deterministic for a seed and drawn so that every rule of the tower matters:
/// norm weights away from 1, non-zero biases, sharpening q/k norms, clamps that bite.
/// The directory must not exist or be empty; it appears only once complete.
#[derive(clap::Args)]
pub struct Args {
    /// Output directory.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Geometry: `full` (GLM-5.3-Flash: depth 24, hidden 1024, out 4096) or `tiny` (depth 2, hidden 64).
    #[arg(long, default_value = "full", value_parser = ["full", "tiny"])]
    preset: String,
    /// Random seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Stored dtype of the weights.
    #[arg(long, default_value = "bf16", value_parser = ["bf16", "f32"])]
    dtype: String,
    /// Number of safetensors shards (1: model.safetensors; more: an index + shards).
    #[arg(long, default_value_t = 1, value_name = "K")]
    shards: usize,
    /// A config.json (full or bare vision config) whose geometry, eps, swiglu_limit and rope theta
    /// replace the preset's.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

pub fn run(args: Args) -> CmdResult {
    let preset: Preset = args.preset.parse()?;
    let mut spec = SynthSpec::new(preset, args.seed);
    spec.dtype = args.dtype.parse::<SynthDtype>()?;
    spec.shards = args.shards;
    if let Some(c) = &args.config {
        spec.config = Some(VisionConfig::from_path(c)?);
    }
    let r = write_checkpoint(&args.out, &spec)?;
    println!(
        "{}: preset {}, seed {}, {} weights, {} tensors, {} parameters ({:.1} MB) in {} file(s)",
        r.dir.display(),
        preset.name(),
        r.seed,
        r.dtype.name(),
        r.num_tensors,
        r.num_params,
        r.tensor_bytes as f64 / 1e6,
        r.files.len()
    );
    println!("content sha256 {}", r.content_sha256);
    Ok(())
}
