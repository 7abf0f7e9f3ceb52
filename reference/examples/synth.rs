//! Writes a synthetic checkpoint (until `glm5v synth` exists):
//!
//! ```text
//! cargo run --release -p glm5v-reference --example synth -- OUT_DIR \
//!     [--preset tiny|full] [--seed N] [--dtype bf16|f32] [--shards N] [--config CONFIG_JSON]
//! ```
//!
//! `--config` takes a full or bare vision config (`config.json` layout); it overrides the preset.
//! Prints the report as one JSON object on stdout.

use glm5v_reference::VisionConfig;
use glm5v_reference::synth::{Preset, SynthDtype, SynthSpec, write_checkpoint};
use std::path::PathBuf;
use std::time::Instant;

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mut out: Option<PathBuf> = None;
    let mut spec = SynthSpec::new(Preset::Tiny, 0);
    while let Some(a) = args.next() {
        let mut val = |flag: &str| args.next().ok_or_else(|| format!("{flag} needs a value"));
        match a.as_str() {
            "--preset" => spec.preset = val("--preset")?.parse()?,
            "--seed" => spec.seed = val("--seed")?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--dtype" => spec.dtype = val("--dtype")?.parse::<SynthDtype>()?,
            "--shards" => {
                spec.shards = val("--shards")?
                    .parse()
                    .map_err(|e| format!("--shards: {e}"))?
            }
            "--config" => {
                spec.config = Some(VisionConfig::from_path(&PathBuf::from(val("--config")?))?)
            }
            s if s.starts_with("--") => return Err(format!("unknown flag {s}").into()),
            s => {
                if out.replace(PathBuf::from(s)).is_some() {
                    return Err("only one output directory".into());
                }
            }
        }
    }
    let out = out.ok_or("usage: synth OUT_DIR [--preset tiny|full] [--seed N] [--dtype bf16|f32] [--shards N] [--config FILE]")?;
    let t0 = Instant::now();
    let r = write_checkpoint(&out, &spec)?;
    let secs = t0.elapsed().as_secs_f64();
    let report = serde_json::json!({
        "dir": r.dir.display().to_string(),
        "preset": spec.preset_name(),
        "seed": r.seed,
        "dtype": r.dtype.name(),
        "files": r.files,
        "num_tensors": r.num_tensors,
        "num_params": r.num_params,
        "tensor_bytes": r.tensor_bytes,
        "content_sha256": r.content_sha256,
        "seconds": secs,
    });
    println!("{report}");
    Ok(())
}
