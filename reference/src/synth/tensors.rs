//! The tensors of a synthetic checkpoint: every tensor of upstream's vision tower with the
//! distribution it is drawn from (the table in the `synth` module docs), and the draw itself,
//! chunk by chunk from seeded ChaCha8 streams, in parallel.

use super::{SynthDtype, SynthError};
use crate::config::VisionConfig;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;
use rayon::prelude::*;
use safetensors::tensor::Dtype;
use sha2::{Digest, Sha256};

/// Elements per independently seeded chunk of a tensor (part of the stream definition).
pub const CHUNK_ELEMS: usize = 1 << 20;

/// Name prefix of the vision tensors in a full model checkpoint.
pub const PREFIX: &str = "model.visual.";

/// Version tag mixed into every stream key; change it only with a new stream definition.
const STREAM_TAG: &[u8] = b"glm5v-synth-v1";

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::{Preset, content_sha256};

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
}
