//! Loading the tower for `embed` and `serve`: the CPU reference, or the CUDA tower.

use anyhow::{Context, Result, bail};
use glm5v_reference::{EmbedOptions, Embedder, Precision, Threads};
use std::path::Path;

/// Where and how the tower runs, as the commands' flags give it.
#[derive(clap::Args, Clone, Debug)]
pub struct BackendArgs {
    /// Checkpoint directory (config.json + model.safetensors or an index with shards).
    #[arg(long, value_name = "DIR")]
    pub model: std::path::PathBuf,
    /// Where the tower runs: cpu (the reference) or gpu (CUDA device 0).
    #[arg(long, default_value = "cpu", value_parser = ["cpu", "gpu"])]
    pub backend: String,
    /// Arithmetic: f32 (upstream's path; on the GPU its parity mode), f64 (the CPU oracle only),
    /// bf16 (bf16 weights and product inputs, f32 accumulation: fastest on both backends).
    /// Default: f32 on the CPU, bf16 on the GPU.
    #[arg(long, value_parser = ["f32", "f64", "bf16"])]
    pub precision: Option<String>,
    /// Worker threads of the CPU tower (default: all cores, or RAYON_NUM_THREADS).
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
}

impl BackendArgs {
    /// The precision asked for, or the backend's default.
    pub fn precision(&self) -> String {
        self.precision
            .clone()
            .unwrap_or_else(|| if self.backend == "gpu" { "bf16" } else { "f32" }.to_string())
    }

    /// The embedder, with its load warnings printed.
    pub fn load(&self) -> Result<Embedder> {
        let precision = self.precision();
        let threads = match self.threads {
            None => Threads::Global,
            Some(0) => bail!("--threads must be at least 1"),
            Some(n) => Threads::Count(n),
        };
        let embedder = load(&self.model, &self.backend, &precision, threads)?;
        for w in embedder.warnings() {
            eprintln!("glm5v: warning: {w}");
        }
        Ok(embedder)
    }
}

fn load(model: &Path, backend: &str, precision: &str, threads: Threads) -> Result<Embedder> {
    if backend == "gpu" {
        let precision = match precision {
            "bf16" => glm5v_gpu::Precision::Bf16,
            "f32" => glm5v_gpu::Precision::F32,
            _ => bail!(
                "--precision f64 runs only on the CPU backend; the GPU computes in bf16 or f32"
            ),
        };
        let tower = glm5v_gpu::GpuTower::load(model, glm5v_gpu::GpuOptions { precision })
            .with_context(|| format!("--backend gpu: loading {}", model.display()))?;
        let mut e = Embedder::from_tower(Box::new(tower), threads)?;
        // the GPU tower takes upstream's processor; a model directory's own config wins
        e.set_prep_options(glm5v_prep::PrepOptions::with_model_dir(model)?);
        Ok(e)
    } else {
        let precision = Precision::parse(precision)
            .with_context(|| format!("--precision {precision}: not f32, f64 or bf16"))?;
        Embedder::load(model, EmbedOptions { precision, threads })
            .with_context(|| format!("loading {}", model.display()))
    }
}
