//! Synthetic checkpoints (`glm5v synth`): a GLM-5.3-Flash model directory with random vision
//! weights, laid out as a real one (`shared/TAPS.md` section 1).
//!
//! A fresh PyTorch init (norm weights 1, zero biases, tiny projections) leaves most rules of the
//! tower untested: an eps or a norm-weight mix-up, a swapped bias, a missing clamp all vanish in it.
//! The weights written here are drawn so that every rule moves the output:
//!
//! | tensors | distribution |
//! | --- | --- |
//! | RMS norm weights (`norm1`, `norm2`, `post_layernorm`), merger LayerNorm weight | U[0.5, 1.5] |
//! | `q_norm`, `k_norm` weights | U[1.0, 2.0] (sharpens attention: softmax far from uniform) |
//! | biases (patch embed, qkv, proj, MLP, downsample) | U[-0.2, 0.2] |
//! | merger LayerNorm bias | U[-0.5, 0.5] |
//! | `patch_embed.proj.weight` | N(0, 1/sqrt(patch_dim)) |
//! | `attn.qkv.weight` | N(0, 1/sqrt(D)) |
//! | `attn.proj.weight` | N(0, 0.5/sqrt(D)) |
//! | block `mlp.gate_proj.weight` / `up_proj.weight` | N(0, L/1.9/sqrt(D)) / N(0, L/2.2/sqrt(D)) |
//! | block `mlp.down_proj.weight` | N(0, (4/L^2)/sqrt(I)) |
//! | `downsample.weight` | N(0, 1/sqrt(D*m^2)) |
//! | `merger.proj.weight` | N(0, 1/sqrt(O)) |
//! | `merger.gate_proj` / `up_proj` | N(0, L/(1.9*0.7)/sqrt(O)) / N(0, L/(2.2*0.7)/sqrt(O)) |
//! | `merger.down_proj.weight` | N(0, (8/L^2)/sqrt(P)) |
//!
//! with D `hidden_size`, I `intermediate_size`, O `out_hidden_size`, P
//! `projection_intermediate_size`, m `spatial_merge_size`, L `swiglu_limit`. The gate/up scales put
//! the pre-activations at about L/1.9 and L/2.2 standard deviations, so that a few percent of the
//! gate entries exceed L and a few percent of the up entries leave [-L, L] (measured through
//! upstream on the `fixtures/tower` images: 2.5% to 4% in the block MLPs and in the merger, also
//! for L = 3.5); the residual stream grows slowly and stays well scaled through 24 blocks (RMS
//! about 1 after the patch embedding, 3.8 after block 23), and attention is sharp (full preset,
//! 64-patch image: the mean largest softmax weight is 0.23 to 0.28 where uniform would be 0.016,
//! normalized entropy about 0.67).
//!
//! Determinism: every tensor is cut into chunks of [`CHUNK_ELEMS`] elements; chunk `c` of tensor
//! `name` is drawn from a ChaCha8 stream keyed by SHA-256(`"glm5v-synth-v1"` ‖ seed (u64 LE) ‖
//! name ‖ 0x00 ‖ c (u64 LE)), in f32, then rounded to the stored dtype (bf16: round to nearest
//! even). The result does not depend on the thread count or on the shard layout.
//!
//! The content hash ([`SynthReport::content_sha256`], [`checkpoint_content_sha256`]) is the SHA-256
//! of, for every tensor in byte order of its name: u64 LE length of the name ‖ name ‖ u64 LE length
//! of the dtype string (`"BF16"`, `"F16"`, `"F32"`, ... as safetensors spells it) ‖ dtype ‖ u64 LE
//! rank ‖ each dim as u64 LE ‖ the 32-byte SHA-256 of the tensor's bytes (little-endian,
//! row-major, as stored). It ignores the file layout (single file or shards) and the metadata.
//!
//! The tensors and how they are drawn are in `synth/tensors.rs`, the content hash in
//! `synth/hash.rs`, the writing of a checkpoint directory (and finding its weight files) in
//! `synth/checkpoint.rs`.

use crate::config::VisionConfig;
use safetensors::tensor::Dtype;
use std::path::{Path, PathBuf};

mod checkpoint;
mod hash;
mod tensors;

pub use checkpoint::{config_json, weight_files, write_checkpoint};
pub use hash::{checkpoint_content_sha256, content_sha256};
pub use tensors::{
    CHUNK_ELEMS, Init, PREFIX, SynthTensor, TensorSpec, generate_tensors, tensor_specs,
};

/// Errors of [`write_checkpoint`] and [`checkpoint_content_sha256`]; each names what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid vision config for a synthetic checkpoint: {0}")]
    Config(String),
    #[error("invalid synth request: {0}")]
    Spec(String),
    #[error("{0} exists and is not an empty directory: refusing to overwrite it")]
    NotEmpty(String),
    #[error("{path}: safetensors: {source}")]
    Safetensors {
        path: String,
        #[source]
        source: safetensors::SafeTensorError,
    },
    #[error("{path}: {reason}")]
    Checkpoint { path: String, reason: String },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> SynthError + '_ {
    move |source| SynthError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// A named geometry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    /// GLM-5.3-Flash: depth 24, hidden 1024, 16 heads, MLP 4096, out 4096, merger 10240 (~560M parameters).
    Full,
    /// Depth 2, hidden 64, 4 heads, MLP 128, out 96, merger 160: fast tests and committed fixtures.
    Tiny,
}

impl Preset {
    /// The preset's vision config (all other fields are upstream's defaults).
    pub fn config(self) -> VisionConfig {
        match self {
            Preset::Full => VisionConfig::glm53_flash(),
            Preset::Tiny => VisionConfig {
                depth: 2,
                hidden_size: 64,
                num_heads: 4,
                intermediate_size: 128,
                out_hidden_size: 96,
                projection_intermediate_size: 160,
                ..VisionConfig::default()
            },
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Preset::Full => "full",
            Preset::Tiny => "tiny",
        }
    }
}

impl std::str::FromStr for Preset {
    type Err = SynthError;
    fn from_str(s: &str) -> Result<Self, SynthError> {
        match s {
            "full" => Ok(Preset::Full),
            "tiny" => Ok(Preset::Tiny),
            other => Err(SynthError::Spec(format!(
                "unknown preset {other:?} (expected \"full\" or \"tiny\")"
            ))),
        }
    }
}

/// The stored dtype of the weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SynthDtype {
    Bf16,
    F32,
}

impl SynthDtype {
    fn safetensors(self) -> Dtype {
        match self {
            SynthDtype::Bf16 => Dtype::BF16,
            SynthDtype::F32 => Dtype::F32,
        }
    }
    fn size(self) -> usize {
        match self {
            SynthDtype::Bf16 => 2,
            SynthDtype::F32 => 4,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            SynthDtype::Bf16 => "bf16",
            SynthDtype::F32 => "f32",
        }
    }
}

impl std::str::FromStr for SynthDtype {
    type Err = SynthError;
    fn from_str(s: &str) -> Result<Self, SynthError> {
        match s.to_ascii_lowercase().as_str() {
            "bf16" | "bfloat16" => Ok(SynthDtype::Bf16),
            "f32" | "float32" => Ok(SynthDtype::F32),
            other => Err(SynthError::Spec(format!(
                "unknown dtype {other:?} (expected \"bf16\" or \"f32\")"
            ))),
        }
    }
}

/// What to write.
#[derive(Debug, Clone)]
pub struct SynthSpec {
    pub preset: Preset,
    pub seed: u64,
    pub dtype: SynthDtype,
    /// 1: `model.safetensors`; N > 1: `model-0000K-of-0000N.safetensors` + `model.safetensors.index.json`.
    pub shards: usize,
    /// Overrides the preset's geometry (and eps, swiglu_limit, rope theta, ...) when set.
    pub config: Option<VisionConfig>,
}

impl SynthSpec {
    /// The preset's name, or `"custom"` when a config overrides it.
    pub fn preset_name(&self) -> &'static str {
        if self.config.is_some() {
            "custom"
        } else {
            self.preset.name()
        }
    }

    pub fn new(preset: Preset, seed: u64) -> Self {
        Self {
            preset,
            seed,
            dtype: SynthDtype::Bf16,
            shards: 1,
            config: None,
        }
    }

    /// The vision config that will be written: the custom one, else the preset's.
    pub fn vision_config(&self) -> VisionConfig {
        self.config.clone().unwrap_or_else(|| self.preset.config())
    }
}

/// What was written.
#[derive(Debug, Clone)]
pub struct SynthReport {
    /// The checkpoint directory.
    pub dir: PathBuf,
    /// The vision config written to `config.json`.
    pub config: VisionConfig,
    pub seed: u64,
    pub dtype: SynthDtype,
    /// File names written under `dir` (config, weights, index).
    pub files: Vec<String>,
    pub num_tensors: usize,
    pub num_params: u64,
    /// Bytes of tensor data (excluding safetensors headers).
    pub tensor_bytes: u64,
    /// The content hash (module docs), lowercase hex.
    pub content_sha256: String,
}
