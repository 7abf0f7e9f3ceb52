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

use crate::config::VisionConfig;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;
use rayon::prelude::*;
use safetensors::tensor::{Dtype, SafeTensors, TensorView};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// Elements per independently seeded chunk of a tensor (part of the stream definition).
pub const CHUNK_ELEMS: usize = 1 << 20;

/// Name prefix of the vision tensors in a full model checkpoint.
pub const PREFIX: &str = "model.visual.";

/// Version tag mixed into every stream key; change it only with a new stream definition.
const STREAM_TAG: &[u8] = b"glm5v-synth-v1";

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

/// How one tensor is drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Init {
    Uniform { lo: f32, hi: f32 },
    Normal { std: f32 },
}

/// One tensor of the vision tower: its upstream `state_dict` name (no prefix), shape and init.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorSpec {
    pub name: String,
    pub shape: Vec<usize>,
    pub init: Init,
}

impl TensorSpec {
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// Every tensor of upstream's `Glm5NextVisionModel(config).state_dict()`, in its order, with the
/// synth init of each (module docs). Biases of qkv, proj and the block MLPs exist only with
/// `attention_bias`.
pub fn tensor_specs(cfg: &VisionConfig) -> Vec<TensorSpec> {
    let d = cfg.hidden_size;
    let hd = cfg.head_dim();
    let i = cfg.intermediate_size;
    let o = cfg.out_hidden_size;
    let p = cfg.projection_intermediate_size;
    let m = cfg.spatial_merge_size;
    let l = cfg.swiglu_limit as f32;
    let sq = |n: usize| (n as f32).sqrt();
    let norm_w = Init::Uniform { lo: 0.5, hi: 1.5 };
    let qk_w = Init::Uniform { lo: 1.0, hi: 2.0 };
    let bias = Init::Uniform { lo: -0.2, hi: 0.2 };
    let normal = |std: f32| Init::Normal { std };
    // Standard deviations of the pre-activations, in units of the limit: a few percent clamp.
    let (gate_sd, up_sd) = (l / 1.9, l / 2.2);
    // RMS of the merger's GELU output for LayerNorm weights U[0.5,1.5] and biases U[-0.5,0.5].
    let act1_rms = 0.7;

    let mut v = Vec::new();
    let mut push =
        |name: String, shape: Vec<usize>, init: Init| v.push(TensorSpec { name, shape, init });
    push(
        "patch_embed.proj.weight".into(),
        vec![
            d,
            cfg.in_channels,
            cfg.temporal_patch_size,
            cfg.patch_size,
            cfg.patch_size,
        ],
        normal(1.0 / sq(cfg.patch_dim())),
    );
    push("patch_embed.proj.bias".into(), vec![d], bias);
    for b in 0..cfg.depth {
        let n = |s: &str| format!("blocks.{b}.{s}");
        push(n("norm1.weight"), vec![d], norm_w);
        push(n("norm2.weight"), vec![d], norm_w);
        push(n("attn.qkv.weight"), vec![3 * d, d], normal(1.0 / sq(d)));
        if cfg.attention_bias {
            push(n("attn.qkv.bias"), vec![3 * d], bias);
        }
        push(n("attn.proj.weight"), vec![d, d], normal(0.5 / sq(d)));
        if cfg.attention_bias {
            push(n("attn.proj.bias"), vec![d], bias);
        }
        push(n("attn.q_norm.weight"), vec![hd], qk_w);
        push(n("attn.k_norm.weight"), vec![hd], qk_w);
        push(
            n("mlp.gate_proj.weight"),
            vec![i, d],
            normal(gate_sd / sq(d)),
        );
        if cfg.attention_bias {
            push(n("mlp.gate_proj.bias"), vec![i], bias);
        }
        push(n("mlp.up_proj.weight"), vec![i, d], normal(up_sd / sq(d)));
        if cfg.attention_bias {
            push(n("mlp.up_proj.bias"), vec![i], bias);
        }
        push(
            n("mlp.down_proj.weight"),
            vec![d, i],
            normal(4.0 / (l * l) / sq(i)),
        );
        if cfg.attention_bias {
            push(n("mlp.down_proj.bias"), vec![d], bias);
        }
    }
    push("merger.proj.weight".into(), vec![o, o], normal(1.0 / sq(o)));
    push("merger.post_projection_norm.weight".into(), vec![o], norm_w);
    push(
        "merger.post_projection_norm.bias".into(),
        vec![o],
        Init::Uniform { lo: -0.5, hi: 0.5 },
    );
    push(
        "merger.gate_proj.weight".into(),
        vec![p, o],
        normal(gate_sd / act1_rms / sq(o)),
    );
    push(
        "merger.up_proj.weight".into(),
        vec![p, o],
        normal(up_sd / act1_rms / sq(o)),
    );
    push(
        "merger.down_proj.weight".into(),
        vec![o, p],
        normal(8.0 / (l * l) / sq(p)),
    );
    push(
        "downsample.weight".into(),
        vec![o, d, m, m],
        normal(1.0 / sq(d * m * m)),
    );
    push("downsample.bias".into(), vec![o], bias);
    push("post_layernorm.weight".into(), vec![d], norm_w);
    v
}

/// The key of chunk `chunk` of tensor `name` (full prefixed name) for `seed`.
fn stream_key(seed: u64, name: &str, chunk: u64) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(STREAM_TAG);
    h.update(seed.to_le_bytes());
    h.update(name.as_bytes());
    h.update([0u8]);
    h.update(chunk.to_le_bytes());
    h.finalize().into()
}

/// One generated tensor: full (prefixed) name, shape, stored bytes.
#[derive(Debug, Clone)]
pub struct SynthTensor {
    pub name: String,
    pub shape: Vec<usize>,
    pub dtype: Dtype,
    pub data: Vec<u8>,
}

fn fill_chunk(out: &mut [u8], dtype: SynthDtype, init: Init, key: [u8; 32]) {
    let mut rng = ChaCha8Rng::from_seed(key);
    let size = dtype.size();
    for cell in out.chunks_exact_mut(size) {
        let x: f32 = match init {
            Init::Uniform { lo, hi } => lo + (hi - lo) * rng.random::<f32>(),
            Init::Normal { std } => std * rng.sample::<f32, _>(StandardNormal),
        };
        match dtype {
            SynthDtype::F32 => cell.copy_from_slice(&x.to_le_bytes()),
            SynthDtype::Bf16 => cell.copy_from_slice(&half::bf16::from_f32(x).to_le_bytes()),
        }
    }
}

/// Draws every tensor of the tower in memory (names prefixed with [`PREFIX`]), in parallel.
pub fn generate_tensors(
    cfg: &VisionConfig,
    seed: u64,
    dtype: SynthDtype,
) -> Result<Vec<SynthTensor>, SynthError> {
    cfg.validate().map_err(SynthError::Config)?;
    let specs = tensor_specs(cfg);
    let mut tensors: Vec<(SynthTensor, Init)> = specs
        .into_iter()
        .map(|s| {
            let bytes = s.numel() * dtype.size();
            (
                SynthTensor {
                    name: format!("{PREFIX}{}", s.name),
                    shape: s.shape,
                    dtype: dtype.safetensors(),
                    data: vec![0u8; bytes],
                },
                s.init,
            )
        })
        .collect();
    tensors.par_iter_mut().for_each(|(t, init)| {
        let name = t.name.as_str();
        t.data
            .par_chunks_mut(CHUNK_ELEMS * dtype.size())
            .enumerate()
            .for_each(|(c, out)| {
                fill_chunk(out, dtype, *init, stream_key(seed, name, c as u64));
            });
    });
    Ok(tensors.into_iter().map(|(t, _)| t).collect())
}

fn dtype_name(d: Dtype) -> String {
    format!("{d:?}")
}

/// The content hash (module docs) of `(name, dtype, shape, bytes)` records, in any order.
pub fn content_sha256<'a, I>(tensors: I) -> String
where
    I: IntoIterator<Item = (&'a str, Dtype, &'a [usize], &'a [u8])>,
{
    let mut recs: Vec<(&str, Dtype, &[usize], &[u8])> = tensors.into_iter().collect();
    recs.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    let digests: Vec<[u8; 32]> = recs
        .par_iter()
        .map(|r| Sha256::digest(r.3).into())
        .collect();
    let mut h = Sha256::new();
    for ((name, dtype, shape, _), digest) in recs.iter().zip(&digests) {
        let dt = dtype_name(*dtype);
        h.update((name.len() as u64).to_le_bytes());
        h.update(name.as_bytes());
        h.update((dt.len() as u64).to_le_bytes());
        h.update(dt.as_bytes());
        h.update((shape.len() as u64).to_le_bytes());
        for d in shape.iter() {
            h.update((*d as u64).to_le_bytes());
        }
        h.update(digest);
    }
    hex(&h.finalize())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

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

/// The content hash (module docs) of every tensor in a checkpoint directory.
pub fn checkpoint_content_sha256(dir: &Path) -> Result<String, SynthError> {
    let files = weight_files(dir)?;
    let buffers: Vec<(PathBuf, Vec<u8>)> = files
        .into_iter()
        .map(|p| {
            std::fs::read(&p)
                .map(|b| (p.clone(), b))
                .map_err(io_err(&p))
        })
        .collect::<Result<_, _>>()?;
    let mut parsed = Vec::with_capacity(buffers.len());
    for (p, b) in &buffers {
        let st = SafeTensors::deserialize(b).map_err(|source| SynthError::Safetensors {
            path: p.display().to_string(),
            source,
        })?;
        parsed.push(st);
    }
    let views: Vec<(&str, TensorView<'_>)> = parsed.iter().flat_map(|st| st.iter()).collect();
    Ok(content_sha256(
        views
            .iter()
            .map(|(name, v)| (*name, v.dtype(), v.shape(), v.data())),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("glm5v-synth-test-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn specs_match_upstream_state_dict_shapes() {
        // Names and shapes of `Glm5NextVisionModel(tiny).state_dict()` (transformers 5.23.0).
        let cfg = Preset::Tiny.config();
        let specs = tensor_specs(&cfg);
        assert_eq!(specs.len(), 2 + 2 * 14 + 9);
        let get = |n: &str| {
            specs
                .iter()
                .find(|s| s.name == n)
                .unwrap_or_else(|| panic!("{n} missing"))
                .shape
                .clone()
        };
        assert_eq!(get("patch_embed.proj.weight"), vec![64, 3, 2, 14, 14]);
        assert_eq!(get("blocks.1.attn.qkv.weight"), vec![192, 64]);
        assert_eq!(get("blocks.1.attn.q_norm.weight"), vec![16]);
        assert_eq!(get("blocks.0.mlp.down_proj.weight"), vec![64, 128]);
        assert_eq!(get("downsample.weight"), vec![96, 64, 2, 2]);
        assert_eq!(get("merger.proj.weight"), vec![96, 96]);
        assert_eq!(get("merger.gate_proj.weight"), vec![160, 96]);
        assert_eq!(get("merger.post_projection_norm.bias"), vec![96]);
        assert_eq!(get("post_layernorm.weight"), vec![64]);
        let no_bias = VisionConfig {
            attention_bias: false,
            ..cfg
        };
        let s2 = tensor_specs(&no_bias);
        assert_eq!(s2.len(), 2 + 2 * 9 + 9);
        assert!(
            s2.iter()
                .all(|s| !s.name.starts_with("blocks.") || !s.name.ends_with(".bias"))
        );
    }

    #[test]
    fn specs_agree_with_the_loader() {
        // What synth writes is exactly what the weights loader reads.
        for cfg in [
            Preset::Tiny.config(),
            Preset::Full.config(),
            VisionConfig {
                attention_bias: false,
                ..Preset::Tiny.config()
            },
        ] {
            let mut ours: Vec<(String, Vec<usize>)> = tensor_specs(&cfg)
                .into_iter()
                .map(|s| (s.name, s.shape))
                .collect();
            let mut loader = crate::weights::tensor_specs(&cfg);
            ours.sort();
            loader.sort();
            assert_eq!(ours, loader);
        }
    }

    #[test]
    fn full_preset_has_about_560m_parameters() {
        let n: usize = tensor_specs(&Preset::Full.config())
            .iter()
            .map(|s| s.numel())
            .sum();
        assert!((550_000_000..570_000_000).contains(&n), "{n}");
    }

    #[test]
    fn same_seed_same_hash_other_seed_other_hash() {
        let cfg = Preset::Tiny.config();
        let h = |seed, dt| {
            let t = generate_tensors(&cfg, seed, dt).unwrap();
            content_sha256(t.iter().map(|t| {
                (
                    t.name.as_str(),
                    t.dtype,
                    t.shape.as_slice(),
                    t.data.as_slice(),
                )
            }))
        };
        assert_eq!(h(7, SynthDtype::F32), h(7, SynthDtype::F32));
        assert_ne!(h(7, SynthDtype::F32), h(8, SynthDtype::F32));
        assert_ne!(h(7, SynthDtype::F32), h(7, SynthDtype::Bf16));
    }

    #[test]
    fn independent_of_thread_count() {
        let cfg = Preset::Tiny.config();
        let run = |threads| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| generate_tensors(&cfg, 3, SynthDtype::Bf16).unwrap())
        };
        let (a, b) = (run(1), run(3));
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.name, y.name);
            assert!(
                x.data == y.data,
                "{} differs between 1 and 3 threads",
                x.name
            );
        }
    }

    #[test]
    fn values_follow_their_distributions() {
        let cfg = Preset::Tiny.config();
        let ts = generate_tensors(&cfg, 1, SynthDtype::F32).unwrap();
        let vals = |n: &str| -> Vec<f32> {
            let t = ts
                .iter()
                .find(|t| t.name == format!("{PREFIX}{n}"))
                .unwrap();
            t.data
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect()
        };
        let norm = vals("blocks.0.norm1.weight");
        assert!(norm.iter().all(|&x| (0.5..1.5).contains(&x)));
        assert!(
            norm.iter().any(|&x| (x - 1.0).abs() > 0.3),
            "norm weights should move away from 1"
        );
        let qk = vals("blocks.1.attn.k_norm.weight");
        assert!(qk.iter().all(|&x| (1.0..2.0).contains(&x)));
        let b = vals("blocks.0.attn.qkv.bias");
        assert!(
            b.iter().all(|&x| x.abs() <= 0.2) && b.iter().filter(|&&x| x != 0.0).count() == b.len()
        );
        // gate weights: std L/1.9/sqrt(D) = 10/1.9/8
        let g = vals("blocks.0.mlp.gate_proj.weight");
        let sd = (g.iter().map(|x| (x * x) as f64).sum::<f64>() / g.len() as f64).sqrt();
        let want = 10.0 / 1.9 / 8.0;
        assert!((sd / want - 1.0).abs() < 0.03, "gate std {sd} vs {want}");
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
