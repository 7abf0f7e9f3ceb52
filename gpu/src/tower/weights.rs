//! The GPU tower's weights (uploaded once, each GEMM weight in the type its bounds allow) and
//! the block workspace a forward allocates.

use super::graphs::{GraphLimits, Graphs};
use super::{GpuOptions, GpuTower, Precision};
use crate::device::{DBuf, Dev, Dt};
use crate::error::GpuError;
use crate::half_bounds::{
    F16_BOUND, attention_input_bound, gemm_half_bounds, max_abs, proj_out_bound,
};
use glm5v_reference::{TapSink, TowerWeights};
use ndarray::Array2;
use std::path::Path;
use std::sync::Mutex;

pub(super) struct BlockW {
    pub(super) norm1: DBuf,
    pub(super) norm2: DBuf,
    pub(super) qkv_w: DBuf,
    pub(super) qkv_b: Option<DBuf>,
    pub(super) q_norm: DBuf,
    pub(super) k_norm: DBuf,
    pub(super) proj_w: DBuf,
    pub(super) proj_b: Option<DBuf>,
    pub(super) gate_up_w: DBuf,
    pub(super) gate_up_b: Option<DBuf>,
    pub(super) down_w: DBuf,
    pub(super) down_b: Option<DBuf>,
    /// q, k, v of this block go to the tensor cores as IEEE half: the weights bound them far
    /// inside its range (see [`attention_input_bound`]).
    pub(super) attn_f16: bool,
    /// The qkv GEMM (norm1 output, weight, output) runs in IEEE half (see [`gemm_half_bounds`]).
    pub(super) qkv_f16: bool,
    /// The gate|up and down GEMMs (norm2 output, SwiGLU output, weights, gate|up output) run in
    /// IEEE half.
    pub(super) mlp_f16: bool,
    /// The projection GEMM reads the attention output as IEEE half (half weight): set with
    /// `attn_f16` when the weight fits.
    pub(super) proj_f16: bool,
    /// The projection GEMM writes IEEE half (with `proj_f16`, where [`proj_out_bound`] allows).
    pub(super) proj_out_f16: bool,
    /// The down GEMM writes IEEE half (with `mlp_f16`, where [`crate::half_bounds::HalfBounds::down_out`] allows).
    pub(super) down_out_f16: bool,
}

pub(super) struct Weights {
    pub(super) patch_w: DBuf,
    pub(super) patch_b: DBuf,
    pub(super) blocks: Vec<BlockW>,
    pub(super) post_norm: DBuf,
    pub(super) down_w: DBuf,
    pub(super) down_b: DBuf,
    pub(super) m_proj_w: DBuf,
    pub(super) m_norm_w: DBuf,
    pub(super) m_norm_b: DBuf,
    pub(super) m_gate_up_w: DBuf,
    pub(super) m_down_w: DBuf,
}

/// Block activations for `n` tokens.
pub(super) struct Ws {
    pub(super) x: DBuf,   // f32 [N, D] residual stream
    pub(super) xn: DBuf,  // act [N, D]
    pub(super) qkv: DBuf, // f32 [N, 3D]
    pub(super) q: DBuf,   // act [H, stride, hd]
    pub(super) k: DBuf,   // act
    pub(super) v: DBuf,   // act
    pub(super) att: DBuf, // act [N, D]
    pub(super) h: DBuf,   // f32 [N, D]
    pub(super) gu: DBuf,  // f32 [N, 2I]
    pub(super) m: DBuf,   // act [N, I]
    pub(super) tq: Option<DBuf>,
    pub(super) tk: Option<DBuf>,
}

impl GpuTower {
    /// Loads a checkpoint directory (TAPS.md section 1) onto `options.device`.
    pub fn load(dir: &Path, options: GpuOptions) -> Result<Self, GpuError> {
        // Fail fast (before reading gigabytes) when there is no device.
        crate::device::device_info(options.device)?;
        let weights = TowerWeights::<f32>::load(dir)?;
        Self::from_weights(&weights, options)
    }

    /// Uploads weights already in memory (f32 on the host) to device 0.
    pub fn from_weights(tw: &TowerWeights<f32>, options: GpuOptions) -> Result<Self, GpuError> {
        // a bad GLM5V_GPU_GRAPHS* value is refused before any upload
        let graph_limits = GraphLimits::from_env()?;
        let cfg = tw.config.clone();
        cfg.validate()
            .map_err(|r| GpuError::Unsupported(format!("invalid config: {r}")))?;
        let hd = cfg.head_dim();
        if hd > 256 {
            return Err(GpuError::Unsupported(format!("head_dim {hd} > 256")));
        }
        if i32::try_from(cfg.patch_dim() * 4).is_err() {
            return Err(GpuError::Unsupported("patch dimension too large".into()));
        }
        let bf16 = options.precision == Precision::Bf16;
        let dev = Dev::open(options.device, bf16, hd)?;
        let act = dev.act();
        let mut bytes = 0usize;
        let mut up = |what: String, data: &[f32], dt: Dt| -> Result<DBuf, GpuError> {
            bytes += data.len() * dt.size();
            dev.upload_f32(&what, data, dt)
        };
        let s = |a: &ndarray::Array1<f32>| a.as_slice().expect("contiguous").to_vec();
        let m = |a: &Array2<f32>| {
            a.as_standard_layout()
                .as_slice()
                .expect("contiguous")
                .to_vec()
        };
        let mut blocks = Vec::with_capacity(cfg.depth);
        // GLM5V_GPU_ATTN_F16=0 keeps every block's attention inputs in bf16, GLM5V_GPU_GEMM_F16=0
        // every block GEMM (bisecting, A/B timing).
        let f16_ok = std::env::var("GLM5V_GPU_ATTN_F16").as_deref() != Ok("0");
        let gemm_f16_ok = bf16 && std::env::var("GLM5V_GPU_GEMM_F16").as_deref() != Ok("0");
        for (i, b) in tw.blocks.iter().enumerate() {
            let n = |x: &str| format!("blocks.{i}.{x}");
            let att_bound = attention_input_bound(b, cfg.hidden_size, cfg.head_dim());
            let attn_f16 = f16_ok && att_bound < F16_BOUND;
            let hb = gemm_half_bounds(b, cfg.hidden_size, cfg.swiglu_limit);
            let (qkv_f16, mlp_f16) = (
                gemm_f16_ok && hb.qkv < F16_BOUND,
                gemm_f16_ok && hb.mlp < F16_BOUND,
            );
            // |attention output| <= max|v| (a convex combination), inside the attn_f16 bound
            let proj_f16 = gemm_f16_ok && attn_f16 && max_abs(b.proj_w.iter()) < F16_BOUND;
            // GLM5V_GPU_OUT_F16=0 keeps the projection and down outputs f32 (A/B, bisecting)
            let out_ok = std::env::var("GLM5V_GPU_OUT_F16").as_deref() != Ok("0");
            let proj_out_f16 =
                out_ok && proj_f16 && proj_out_bound(b, cfg.hidden_size, att_bound) < F16_BOUND;
            let down_out_f16 = out_ok && mlp_f16 && hb.down_out < F16_BOUND;
            let (qkv_dt, mlp_dt, proj_dt) = (
                if qkv_f16 { Dt::F16 } else { act },
                if mlp_f16 { Dt::F16 } else { act },
                if proj_f16 { Dt::F16 } else { act },
            );
            blocks.push(BlockW {
                attn_f16,
                qkv_f16,
                mlp_f16,
                proj_f16,
                proj_out_f16,
                down_out_f16,
                norm1: up(n("norm1"), &s(&b.norm1), Dt::F32)?,
                norm2: up(n("norm2"), &s(&b.norm2), Dt::F32)?,
                qkv_w: up(n("attn.qkv.weight"), &m(&b.qkv_w), qkv_dt)?,
                qkv_b: b
                    .qkv_b
                    .as_ref()
                    .map(|v| up(n("attn.qkv.bias"), &s(v), Dt::F32))
                    .transpose()?,
                q_norm: up(n("attn.q_norm"), &s(&b.q_norm), Dt::F32)?,
                k_norm: up(n("attn.k_norm"), &s(&b.k_norm), Dt::F32)?,
                proj_w: up(n("attn.proj.weight"), &m(&b.proj_w), proj_dt)?,
                proj_b: b
                    .proj_b
                    .as_ref()
                    .map(|v| up(n("attn.proj.bias"), &s(v), Dt::F32))
                    .transpose()?,
                gate_up_w: up(n("mlp.gate_up.weight"), &m(&b.gate_up_w), mlp_dt)?,
                gate_up_b: b
                    .gate_up_b
                    .as_ref()
                    .map(|v| up(n("mlp.gate_up.bias"), &s(v), Dt::F32))
                    .transpose()?,
                down_w: up(n("mlp.down_proj.weight"), &m(&b.down_w), mlp_dt)?,
                down_b: b
                    .down_b
                    .as_ref()
                    .map(|v| up(n("mlp.down_proj.bias"), &s(v), Dt::F32))
                    .transpose()?,
            });
        }
        let mw = &tw.merger;
        let w = Weights {
            patch_w: up("patch_embed.proj.weight".into(), &m(&tw.patch_w), act)?,
            patch_b: up("patch_embed.proj.bias".into(), &s(&tw.patch_b), Dt::F32)?,
            blocks,
            post_norm: up("post_layernorm".into(), &s(&tw.post_norm), Dt::F32)?,
            down_w: up("downsample.weight".into(), &m(&tw.down_w), act)?,
            down_b: up("downsample.bias".into(), &s(&tw.down_b), Dt::F32)?,
            m_proj_w: up("merger.proj.weight".into(), &m(&mw.proj_w), act)?,
            m_norm_w: up(
                "merger.post_projection_norm.weight".into(),
                &s(&mw.norm_w),
                Dt::F32,
            )?,
            m_norm_b: up(
                "merger.post_projection_norm.bias".into(),
                &s(&mw.norm_b),
                Dt::F32,
            )?,
            m_gate_up_w: up("merger.gate_up.weight".into(), &m(&mw.gate_up_w), act)?,
            m_down_w: up("merger.down_proj.weight".into(), &m(&mw.down_w), act)?,
        };
        let queue = Mutex::new(super::queue::Queue::new(&dev.ctx, &dev.stream)?);
        Ok(Self {
            cfg,
            precision: options.precision,
            queue,
            dev,
            w,
            weight_bytes: bytes,
            stride_floor: Default::default(),
            warnings: tw.warnings.clone(),
            lock: Mutex::new(Graphs::new(graph_limits)),
        })
    }

    /// The workspace of `n` tokens; q, k, v hold `stride` tokens a head (`Geo::stride`).
    pub(super) fn ws(
        &self,
        n: usize,
        stride: usize,
        taps: &Option<&mut dyn TapSink>,
    ) -> Result<Ws, GpuError> {
        let (d, i) = (self.cfg.hidden_size, self.cfg.intermediate_size);
        let act = self.dev.act();
        let a = |what: &str, len: usize, dt: Dt| self.dev.alloc(what, len, dt);
        let want_qk = taps.is_some();
        Ok(Ws {
            x: a("hidden states [N, D] f32", n * d, Dt::F32)?,
            xn: a("normed hidden [N, D]", n * d, act)?,
            qkv: a("qkv [N, 3D] f32", n * 3 * d, Dt::F32)?,
            q: a("q [H, stride, hd]", stride * d, act)?,
            k: a("k [H, stride, hd]", stride * d, act)?,
            v: a("v [H, stride, hd]", stride * d, act)?,
            att: a("attention output [N, D]", n * d, act)?,
            h: a("branch output [N, D] f32", n * d, Dt::F32)?,
            gu: a("MLP gate|up [N, 2I] f32", n * 2 * i, Dt::F32)?,
            m: a("MLP hidden [N, I]", n * i, act)?,
            tq: if want_qk {
                Some(a("q_norm tap [N, D] f32", n * d, Dt::F32)?)
            } else {
                None
            },
            tk: if want_qk {
                Some(a("k_norm tap [N, D] f32", n * d, Dt::F32)?)
            } else {
                None
            },
        })
    }
}
