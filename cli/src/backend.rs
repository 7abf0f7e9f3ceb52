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
    /// Where the tower runs: cpu (the reference) or gpu (CUDA device 0, or --gpus).
    #[arg(long, default_value = "cpu", value_parser = ["cpu", "gpu"])]
    pub backend: String,
    /// With --backend gpu: the CUDA devices, `all` or ordinals `0,1,...` (as CUDA numbers the
    /// visible ones, after CUDA_VISIBLE_DEVICES). Corpus runs and `serve` keep one worker per
    /// device, each batch going to the next idle one; a packed `embed` (pixels, videos, taps)
    /// runs on the first. Default: device 0.
    #[arg(long, value_name = "all|0,1,...")]
    pub gpus: Option<String>,
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

    /// The embedder (on the first of `--gpus` for the GPU), with its load warnings printed.
    pub fn load(&self) -> Result<Embedder> {
        let mut all = self.load_devices(true)?;
        Ok(all.remove(0))
    }

    /// One embedder per device of `--gpus` (one for the CPU), with the first's load warnings
    /// printed.
    pub fn load_workers(&self) -> Result<Vec<Embedder>> {
        self.load_devices(false)
    }

    fn load_devices(&self, first_only: bool) -> Result<Vec<Embedder>> {
        let precision = self.precision();
        let threads = match self.threads {
            None => Threads::Global,
            Some(0) => bail!("--threads must be at least 1"),
            Some(n) => Threads::Count(n),
        };
        let embedders = if self.backend == "gpu" {
            let mut devices = self.devices()?;
            if first_only {
                devices.truncate(1);
            }
            load_gpu(&self.model, &precision, &devices, threads)?
        } else {
            if self.gpus.is_some() {
                bail!("--gpus needs --backend gpu");
            }
            vec![load_cpu(&self.model, &precision, threads)?]
        };
        for w in embedders[0].warnings() {
            eprintln!("glm5v: warning: {w}");
        }
        Ok(embedders)
    }

    /// The device ordinals `--gpus` names (`[0]` without it), checked against the driver's
    /// count.
    pub fn devices(&self) -> Result<Vec<usize>> {
        let Some(spec) = &self.gpus else {
            return Ok(vec![0]);
        };
        let count = glm5v_gpu::device_available()
            .context("--gpus: no CUDA device")?
            .device_count;
        parse_gpus(spec, count)
    }
}

/// Decode threads when none are asked for: 2 beside the CPU tower (which wants the cores),
/// the cores less one (2 to 16) beside the GPU's, whose forwards leave the CPU to decoding
/// (on the H200 machine's 16 cores, 2 threads kept a 448x448 server at 52 images/s, an eighth
/// of what the GPU packs).
pub fn default_decode_threads(backend: &str) -> usize {
    if backend == "gpu" {
        std::thread::available_parallelism()
            .map_or(2, |n| n.get().saturating_sub(1))
            .clamp(2, 16)
    } else {
        2
    }
}

/// `all` (every one of `count` devices) or distinct ordinals below `count`, comma-separated.
pub fn parse_gpus(spec: &str, count: usize) -> Result<Vec<usize>> {
    let spec = spec.trim();
    if spec == "all" {
        return Ok((0..count).collect());
    }
    let mut out = Vec::new();
    for part in spec.split(',') {
        let part = part.trim();
        let d: usize = part.parse().map_err(|_| {
            anyhow::anyhow!(
                "--gpus {spec:?}: {part:?} is not a device ordinal (give all or 0,1,...)"
            )
        })?;
        if d >= count {
            bail!(
                "--gpus {spec:?}: device {d} does not exist (the driver reports {count}: 0..{})",
                count.saturating_sub(1)
            );
        }
        if out.contains(&d) {
            bail!("--gpus {spec:?}: device {d} is named twice");
        }
        out.push(d);
    }
    Ok(out)
}

fn load_gpu(
    model: &Path,
    precision: &str,
    devices: &[usize],
    threads: Threads,
) -> Result<Vec<Embedder>> {
    let precision = match precision {
        "bf16" => glm5v_gpu::Precision::Bf16,
        "f32" => glm5v_gpu::Precision::F32,
        _ => bail!("--precision f64 runs only on the CPU backend; the GPU computes in bf16 or f32"),
    };
    // the checkpoint is read once, then uploaded to each device
    glm5v_gpu::device_info(devices[0])
        .with_context(|| format!("--backend gpu: device {}", devices[0]))?;
    let weights = glm5v_reference::TowerWeights::<f32>::load(model)
        .with_context(|| format!("--backend gpu: loading {}", model.display()))?;
    // the GPU tower takes upstream's processor; a model directory's own config wins
    let prep = glm5v_prep::PrepOptions::with_model_dir(model)?;
    devices
        .iter()
        .map(|&device| {
            let options = glm5v_gpu::GpuOptions { precision, device };
            let tower =
                glm5v_gpu::GpuTower::from_weights(&weights, options).with_context(|| {
                    format!(
                        "--backend gpu: loading {} onto device {device}",
                        model.display()
                    )
                })?;
            let mut e = Embedder::from_tower(Box::new(tower), threads)?;
            e.set_prep_options(prep.clone());
            Ok(e)
        })
        .collect()
}

fn load_cpu(model: &Path, precision: &str, threads: Threads) -> Result<Embedder> {
    let precision = Precision::parse(precision)
        .with_context(|| format!("--precision {precision}: not f32, f64 or bf16"))?;
    Embedder::load(model, EmbedOptions { precision, threads })
        .with_context(|| format!("loading {}", model.display()))
}

#[cfg(test)]
mod tests {
    use super::parse_gpus;

    #[test]
    fn gpus_lists_parse_and_name_bad_entries() {
        assert_eq!(parse_gpus("all", 3).unwrap(), vec![0, 1, 2]);
        assert_eq!(parse_gpus(" 2, 0 ", 3).unwrap(), vec![2, 0]);
        assert_eq!(parse_gpus("0", 1).unwrap(), vec![0]);
        for (spec, want) in [
            ("1", "device 1 does not exist (the driver reports 1: 0..0)"),
            ("0,0", "device 0 is named twice"),
            ("0,x", "\"x\" is not a device ordinal"),
            ("", "\"\" is not a device ordinal"),
        ] {
            let e = parse_gpus(spec, 1).unwrap_err().to_string();
            assert!(e.contains(want), "{spec:?}: {e}");
        }
    }
}
