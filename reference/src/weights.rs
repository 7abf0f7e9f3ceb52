//! The tower's weights (TAPS.md section 1): read from a Hugging Face checkpoint directory
//! (`model.safetensors`, or `model.safetensors.index.json` + shards; BF16, F16 or F32; memory
//! mapped), validated tensor by tensor, converted once to `F`.
//!
//! Layouts after loading: every Linear weight stays `[out, in]`; the patch-embed Conv3d becomes
//! `[hidden, patch_dim]`; the downsample Conv2d `[O, D, m, m]` is permuted to `[O, m*m*D]` so the
//! downsample is one product over `[G, m*m*D]` (m*m consecutive rows = one merge block); the
//! gate and up projections of each MLP are stacked into one `[2 * width, in]` matrix.

use crate::config::VisionConfig;
use crate::error::WeightError;
use crate::real::Real;
use memmap2::Mmap;
use ndarray::{Array1, Array2};
use rayon::prelude::*;
use safetensors::{Dtype, SafeTensors, tensor::Metadata};
use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

/// Checkpoint names are `PREFIX + <upstream state_dict name>`.
pub const PREFIX: &str = "model.visual.";
/// The tensor whose absence marks a text-only checkpoint.
pub const PROBE: &str = "model.visual.patch_embed.proj.weight";

/// Every tensor the tower reads, as (upstream state_dict name, shape), for a config.
/// Biases of the blocks are present only when `attention_bias` is set.
pub fn tensor_specs(cfg: &VisionConfig) -> Vec<(String, Vec<usize>)> {
    let (d, hd, i, o, p, m) = (
        cfg.hidden_size,
        cfg.head_dim(),
        cfg.intermediate_size,
        cfg.out_hidden_size,
        cfg.projection_intermediate_size,
        cfg.spatial_merge_size,
    );
    let mut v: Vec<(String, Vec<usize>)> = vec![
        (
            "patch_embed.proj.weight".into(),
            vec![
                d,
                cfg.in_channels,
                cfg.temporal_patch_size,
                cfg.patch_size,
                cfg.patch_size,
            ],
        ),
        ("patch_embed.proj.bias".into(), vec![d]),
    ];
    for b in 0..cfg.depth {
        let mut add = |name: &str, shape: Vec<usize>| v.push((format!("blocks.{b}.{name}"), shape));
        add("norm1.weight", vec![d]);
        add("norm2.weight", vec![d]);
        add("attn.qkv.weight", vec![3 * d, d]);
        add("attn.proj.weight", vec![d, d]);
        add("attn.q_norm.weight", vec![hd]);
        add("attn.k_norm.weight", vec![hd]);
        add("mlp.gate_proj.weight", vec![i, d]);
        add("mlp.up_proj.weight", vec![i, d]);
        add("mlp.down_proj.weight", vec![d, i]);
        if cfg.attention_bias {
            add("attn.qkv.bias", vec![3 * d]);
            add("attn.proj.bias", vec![d]);
            add("mlp.gate_proj.bias", vec![i]);
            add("mlp.up_proj.bias", vec![i]);
            add("mlp.down_proj.bias", vec![d]);
        }
    }
    v.extend([
        ("post_layernorm.weight".into(), vec![d]),
        ("downsample.weight".into(), vec![o, d, m, m]),
        ("downsample.bias".into(), vec![o]),
        ("merger.proj.weight".into(), vec![o, o]),
        ("merger.post_projection_norm.weight".into(), vec![o]),
        ("merger.post_projection_norm.bias".into(), vec![o]),
        ("merger.gate_proj.weight".into(), vec![p, o]),
        ("merger.up_proj.weight".into(), vec![p, o]),
        ("merger.down_proj.weight".into(), vec![o, p]),
    ]);
    v
}

/// One vision block's weights.
#[derive(Debug, Clone)]
pub struct BlockWeights<F> {
    pub norm1: Array1<F>,             // [D]
    pub norm2: Array1<F>,             // [D]
    pub qkv_w: Array2<F>,             // [3D, D]
    pub qkv_b: Option<Array1<F>>,     // [3D]
    pub q_norm: Array1<F>,            // [head_dim]
    pub k_norm: Array1<F>,            // [head_dim]
    pub proj_w: Array2<F>,            // [D, D]
    pub proj_b: Option<Array1<F>>,    // [D]
    pub gate_up_w: Array2<F>,         // [2I, D]: gate rows, then up rows
    pub gate_up_b: Option<Array1<F>>, // [2I]
    pub down_w: Array2<F>,            // [D, I]
    pub down_b: Option<Array1<F>>,    // [D]
}

/// The patch merger's weights (no biases upstream, except the LayerNorm's).
#[derive(Debug, Clone)]
pub struct MergerWeights<F> {
    pub proj_w: Array2<F>,    // [O, O]
    pub norm_w: Array1<F>,    // [O]
    pub norm_b: Array1<F>,    // [O]
    pub gate_up_w: Array2<F>, // [2P, O]
    pub down_w: Array2<F>,    // [O, P]
}

/// All weights of the tower in `F`, plus the config they were loaded for.
#[derive(Debug, Clone)]
pub struct TowerWeights<F> {
    pub config: VisionConfig,
    pub patch_w: Array2<F>, // [D, patch_dim]
    pub patch_b: Array1<F>, // [D]
    pub blocks: Vec<BlockWeights<F>>,
    pub post_norm: Array1<F>, // [D]
    pub down_w: Array2<F>,    // [O, m*m*D], permuted from [O, D, m, m]
    pub down_b: Array1<F>,    // [O]
    pub merger: MergerWeights<F>,
    /// Problems that did not stop loading (non-finite values), each naming its tensor.
    pub warnings: Vec<String>,
}

/// A raw tensor as stored: dtype, shape, little-endian bytes.
#[derive(Debug, Clone, Copy)]
pub struct RawTensor<'a> {
    pub dtype: Dtype,
    pub shape: &'a [usize],
    pub bytes: &'a [u8],
}

/// Anything that can hand out raw tensors by full checkpoint name.
pub trait TensorSource {
    fn raw(&self, name: &str) -> Option<RawTensor<'_>>;
    /// The loader has converted `name` and will not read its bytes again (a mapped checkpoint
    /// gives its pages back, so a load's resident memory does not grow by the file's size).
    fn done(&self, _name: &str) {}
}

impl TensorSource for HashMap<String, (Vec<usize>, Vec<f32>)> {
    fn raw(&self, name: &str) -> Option<RawTensor<'_>> {
        self.get(name).map(|(shape, data)| RawTensor {
            dtype: Dtype::F32,
            shape,
            bytes: bytemuck::cast_slice(data),
        })
    }
}

struct Shard {
    path: PathBuf,
    map: Mmap,
    header_len: usize,
    meta: Metadata,
}

/// An opened checkpoint directory: its config and memory-mapped safetensors files.
pub struct Checkpoint {
    pub dir: PathBuf,
    pub config: VisionConfig,
    shards: Vec<Shard>,
    /// Tensor name -> shard index.
    names: HashMap<String, usize>,
}

impl Checkpoint {
    /// Opens `dir`: reads `config.json`, maps `model.safetensors` or the shards the index names
    /// for `model.visual.*` tensors, validates every header. Fails with
    /// [`WeightError::TextOnly`] when the probe tensor is absent.
    pub fn open(dir: &Path) -> Result<Self, WeightError> {
        let config = VisionConfig::from_path(dir)?;
        let single = dir.join("model.safetensors");
        let index = dir.join("model.safetensors.index.json");
        let mut shards = Vec::new();
        let mut names = HashMap::new();
        if single.is_file() {
            let shard = open_shard(&single)?;
            for name in shard.meta.tensors().into_keys() {
                names.insert(name, 0);
            }
            shards.push(shard);
        } else if index.is_file() {
            let ipath = index.display().to_string();
            let text = std::fs::read_to_string(&index).map_err(|source| WeightError::Io {
                path: ipath.clone(),
                source,
            })?;
            let json: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| WeightError::Index {
                    path: ipath.clone(),
                    reason: e.to_string(),
                })?;
            let map = json
                .get("weight_map")
                .and_then(|m| m.as_object())
                .ok_or_else(|| WeightError::Index {
                    path: ipath.clone(),
                    reason: "no \"weight_map\" object".into(),
                })?;
            let mut shard_of_file: HashMap<String, usize> = HashMap::new();
            for (name, file) in map {
                if !name.starts_with(PREFIX) {
                    continue; // text-model tensors: never opened
                }
                let file = file.as_str().ok_or_else(|| WeightError::Index {
                    path: ipath.clone(),
                    reason: format!("the shard of `{name}` is not a string"),
                })?;
                let idx = match shard_of_file.get(file) {
                    Some(&i) => i,
                    None => {
                        let spath = dir.join(file);
                        if !spath.is_file() {
                            return Err(WeightError::MissingShard {
                                index: ipath.clone(),
                                shard: spath.display().to_string(),
                            });
                        }
                        shards.push(open_shard(&spath)?);
                        shard_of_file.insert(file.to_string(), shards.len() - 1);
                        shards.len() - 1
                    }
                };
                if shards[idx].meta.info(name).is_none() {
                    return Err(WeightError::Index {
                        path: ipath.clone(),
                        reason: format!("`{name}` is mapped to {file}, which does not contain it"),
                    });
                }
                names.insert(name.clone(), idx);
            }
        } else {
            return Err(WeightError::NoWeights {
                dir: dir.display().to_string(),
            });
        }
        if !names.contains_key(PROBE) {
            return Err(WeightError::TextOnly {
                dir: dir.display().to_string(),
            });
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            config,
            shards,
            names,
        })
    }

    /// The files mapped.
    pub fn files(&self) -> Vec<&Path> {
        self.shards.iter().map(|s| s.path.as_path()).collect()
    }
}

impl TensorSource for Checkpoint {
    #[cfg(unix)]
    fn done(&self, name: &str) {
        let Some(&i) = self.names.get(name) else {
            return;
        };
        let shard = &self.shards[i];
        if let Some(info) = shard.meta.info(name) {
            let base = 8 + shard.header_len;
            // SAFETY: MADV_DONTNEED on a read-only file mapping only drops our page table
            // entries: a later read of these bytes (a neighbour's, in the partial pages at the
            // ends) faults them in again from the file, with the same contents. Advice only:
            // a refusal changes nothing.
            let _ = unsafe {
                shard.map.unchecked_advise_range(
                    memmap2::UncheckedAdvice::DontNeed,
                    base + info.data_offsets.0,
                    info.data_offsets.1 - info.data_offsets.0,
                )
            };
        }
    }

    fn raw(&self, name: &str) -> Option<RawTensor<'_>> {
        let shard = &self.shards[*self.names.get(name)?];
        let info = shard.meta.info(name)?;
        let base = 8 + shard.header_len;
        // In range: `read_metadata` checked the offsets against the file length.
        let bytes = &shard.map[base + info.data_offsets.0..base + info.data_offsets.1];
        Some(RawTensor {
            dtype: info.dtype,
            shape: &info.shape,
            bytes,
        })
    }
}

fn open_shard(path: &Path) -> Result<Shard, WeightError> {
    let p = path.display().to_string();
    let file = File::open(path).map_err(|source| WeightError::Io {
        path: p.clone(),
        source,
    })?;
    let len = file
        .metadata()
        .map_err(|source| WeightError::Io {
            path: p.clone(),
            source,
        })?
        .len();
    if len < 8 {
        return Err(WeightError::Header {
            path: p,
            reason: format!("the file is {len} bytes long"),
        });
    }
    // SAFETY: the file is opened read-only; a checkpoint modified while mapped is outside our
    // contract (as for every memory-mapped safetensors reader).
    let map = unsafe { Mmap::map(&file) }.map_err(|source| WeightError::Io {
        path: p.clone(),
        source,
    })?;
    let (header_len, meta) = SafeTensors::read_metadata(&map).map_err(|e| WeightError::Header {
        path: p.clone(),
        reason: e.to_string(),
    })?;
    Ok(Shard {
        path: path.to_path_buf(),
        map,
        header_len,
        meta,
    })
}

/// Converts stored values to `F` (in parallel), counting non-finite values.
fn convert<F: Real>(raw: &RawTensor<'_>) -> (Vec<F>, usize) {
    const CHUNK: usize = 1 << 16;
    let (size, to_f64): (usize, fn(&[u8]) -> f64) = match raw.dtype {
        Dtype::F32 => (4, |b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64),
        Dtype::BF16 => (2, |b| half::bf16::from_le_bytes([b[0], b[1]]).to_f64()),
        Dtype::F16 => (2, |b| half::f16::from_le_bytes([b[0], b[1]]).to_f64()),
        _ => unreachable!("dtype checked by the caller"),
    };
    let n = raw.bytes.len() / size;
    let mut out = vec![F::ZERO; n];
    let bad: usize = out
        .par_chunks_mut(CHUNK)
        .zip(raw.bytes.par_chunks(CHUNK * size))
        .map(|(dst, src)| {
            let mut bad = 0;
            for (d, s) in dst.iter_mut().zip(src.chunks_exact(size)) {
                let v = to_f64(s); // exact: every stored value is representable in f64 and in f32
                bad += !v.is_finite() as usize;
                *d = F::from_f64(v);
            }
            bad
        })
        .sum();
    (out, bad)
}

struct Fetcher<'s, S: TensorSource + ?Sized> {
    source: &'s S,
    warnings: Vec<String>,
}

impl<S: TensorSource + ?Sized> Fetcher<'_, S> {
    fn get<F: Real>(&mut self, name: &str, shape: &[usize]) -> Result<Vec<F>, WeightError> {
        let full = format!("{PREFIX}{name}");
        let raw = self.source.raw(&full).ok_or_else(|| WeightError::Missing {
            name: full.clone(),
            expected: shape.to_vec(),
        })?;
        if !matches!(raw.dtype, Dtype::F32 | Dtype::BF16 | Dtype::F16) {
            return Err(WeightError::Dtype {
                name: full,
                found: format!("{:?}", raw.dtype),
            });
        }
        if raw.shape != shape {
            return Err(WeightError::Shape {
                name: full,
                expected: shape.to_vec(),
                found: raw.shape.to_vec(),
            });
        }
        let (values, bad) = convert::<F>(&raw);
        self.source.done(&full);
        if bad > 0 {
            self.warnings.push(format!(
                "tensor `{full}` has {bad} non-finite values (NaN/Inf); loaded as they are"
            ));
        }
        Ok(values)
    }

    fn vec<F: Real>(&mut self, name: &str, len: usize) -> Result<Array1<F>, WeightError> {
        Ok(Array1::from(self.get(name, &[len])?))
    }

    /// A weight read as `[rows, cols]` (its stored shape is `shape`, whose product matches).
    fn mat<F: Real>(
        &mut self,
        name: &str,
        shape: &[usize],
        rows: usize,
        cols: usize,
    ) -> Result<Array2<F>, WeightError> {
        Ok(Array2::from_shape_vec((rows, cols), self.get(name, shape)?)
            .expect("element count checked"))
    }

    fn stacked<F: Real>(
        &mut self,
        a: &str,
        b: &str,
        rows: usize,
        cols: usize,
    ) -> Result<Array2<F>, WeightError> {
        let mut v = self.get::<F>(a, &[rows, cols])?;
        v.extend(self.get::<F>(b, &[rows, cols])?);
        Ok(Array2::from_shape_vec((2 * rows, cols), v).expect("element count checked"))
    }

    fn stacked_bias<F: Real>(
        &mut self,
        a: &str,
        b: &str,
        len: usize,
    ) -> Result<Array1<F>, WeightError> {
        let mut v = self.get::<F>(a, &[len])?;
        v.extend(self.get::<F>(b, &[len])?);
        Ok(Array1::from(v))
    }
}

impl<F: Real> TowerWeights<F> {
    /// Opens a checkpoint directory and loads its tower.
    pub fn load(dir: &Path) -> Result<Self, WeightError> {
        let ckpt = Checkpoint::open(dir)?;
        Self::from_source(&ckpt.config, &ckpt)
    }

    /// Loads the tower for `cfg` from any tensor source (a checkpoint, tensors in memory).
    pub fn from_source<S: TensorSource + ?Sized>(
        cfg: &VisionConfig,
        source: &S,
    ) -> Result<Self, WeightError> {
        Self::from_source_with(cfg, source, &mut |w| w)
    }

    /// [`TowerWeights::load`], handing each `Linear` weight, as soon as it is read, to `linear`,
    /// whose result is kept in its place: a caller that repacks the weights (and returns empty
    /// arrays) holds one f32 weight at a time instead of the whole tower. The order: the patch
    /// embedding; per block qkv, proj, gate|up, down; the downsample (as `[O, m*m*D]`); the
    /// merger's proj, gate|up, down.
    pub fn load_with(
        dir: &Path,
        linear: &mut dyn FnMut(Array2<F>) -> Array2<F>,
    ) -> Result<Self, WeightError> {
        let ckpt = Checkpoint::open(dir)?;
        Self::from_source_with(&ckpt.config, &ckpt, linear)
    }

    /// [`TowerWeights::from_source`] with [`TowerWeights::load_with`]'s hook.
    pub fn from_source_with<S: TensorSource + ?Sized>(
        cfg: &VisionConfig,
        source: &S,
        linear: &mut dyn FnMut(Array2<F>) -> Array2<F>,
    ) -> Result<Self, WeightError> {
        let (d, hd, i, o, p, m) = (
            cfg.hidden_size,
            cfg.head_dim(),
            cfg.intermediate_size,
            cfg.out_hidden_size,
            cfg.projection_intermediate_size,
            cfg.spatial_merge_size,
        );
        let mut f = Fetcher {
            source,
            warnings: Vec::new(),
        };
        let pe_shape = [
            d,
            cfg.in_channels,
            cfg.temporal_patch_size,
            cfg.patch_size,
            cfg.patch_size,
        ];
        let patch_w = linear(f.mat("patch_embed.proj.weight", &pe_shape, d, cfg.patch_dim())?);
        let patch_b = f.vec("patch_embed.proj.bias", d)?;
        // Not `with_capacity(depth)`: a hostile depth must fail at its first missing block,
        // not on the allocation.
        let mut blocks = Vec::new();
        for b in 0..cfg.depth {
            let n = |s: &str| format!("blocks.{b}.{s}");
            let bias = cfg.attention_bias;
            blocks.push(BlockWeights {
                norm1: f.vec(&n("norm1.weight"), d)?,
                norm2: f.vec(&n("norm2.weight"), d)?,
                qkv_w: linear(f.mat(&n("attn.qkv.weight"), &[3 * d, d], 3 * d, d)?),
                qkv_b: if bias {
                    Some(f.vec(&n("attn.qkv.bias"), 3 * d)?)
                } else {
                    None
                },
                q_norm: f.vec(&n("attn.q_norm.weight"), hd)?,
                k_norm: f.vec(&n("attn.k_norm.weight"), hd)?,
                proj_w: linear(f.mat(&n("attn.proj.weight"), &[d, d], d, d)?),
                proj_b: if bias {
                    Some(f.vec(&n("attn.proj.bias"), d)?)
                } else {
                    None
                },
                gate_up_w: linear(f.stacked(
                    &n("mlp.gate_proj.weight"),
                    &n("mlp.up_proj.weight"),
                    i,
                    d,
                )?),
                gate_up_b: if bias {
                    Some(f.stacked_bias(&n("mlp.gate_proj.bias"), &n("mlp.up_proj.bias"), i)?)
                } else {
                    None
                },
                down_w: linear(f.mat(&n("mlp.down_proj.weight"), &[d, i], d, i)?),
                down_b: if bias {
                    Some(f.vec(&n("mlp.down_proj.bias"), d)?)
                } else {
                    None
                },
            });
        }
        let post_norm = f.vec("post_layernorm.weight", d)?;
        let conv: Vec<F> = f.get("downsample.weight", &[o, d, m, m])?;
        // [O, D, m, m] -> [O, m*m*D]: column (i*m + j)*D + c holds weight[o, c, i, j]
        let down_w = linear(Array2::from_shape_fn((o, m * m * d), |(oo, col)| {
            let (ij, c) = (col / d, col % d);
            conv[((oo * d + c) * m + ij / m) * m + ij % m]
        }));
        drop(conv);
        let down_b = f.vec("downsample.bias", o)?;
        let merger = MergerWeights {
            proj_w: linear(f.mat("merger.proj.weight", &[o, o], o, o)?),
            norm_w: f.vec("merger.post_projection_norm.weight", o)?,
            norm_b: f.vec("merger.post_projection_norm.bias", o)?,
            gate_up_w: linear(f.stacked(
                "merger.gate_proj.weight",
                "merger.up_proj.weight",
                p,
                o,
            )?),
            down_w: linear(f.mat("merger.down_proj.weight", &[o, p], o, p)?),
        };
        Ok(Self {
            config: cfg.clone(),
            patch_w,
            patch_b,
            blocks,
            post_norm,
            down_w,
            down_b,
            merger,
            warnings: f.warnings,
        })
    }

    /// Weights whose values `fill(name, values)` writes, for every tensor of [`tensor_specs`]
    /// (synthetic towers for benchmarks and tests; `values` is the tensor row-major, `name` the
    /// upstream state_dict name).
    pub fn from_fn(
        cfg: &VisionConfig,
        fill: impl Fn(&str, &mut [f32]),
    ) -> Result<Self, WeightError> {
        let mut map = HashMap::new();
        for (name, shape) in tensor_specs(cfg) {
            let mut data = vec![0.0f32; shape.iter().product()];
            fill(&name, &mut data);
            map.insert(format!("{PREFIX}{name}"), (shape, data));
        }
        Self::from_source(cfg, &map)
    }
}
