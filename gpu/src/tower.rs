//! `GpuTower`: the vision tower on one CUDA device, implementing the reference crate's
//! [`Tower`] trait with the same stages and taps.

use crate::device::{DBuf, Dev, DeviceInfo, Dt, arg};
use crate::error::GpuError;
use crate::half_bounds::{
    F16_BOUND, attention_input_bound, gemm_half_bounds, max_abs, proj_out_bound,
};
use glm5v_reference::geometry::{self, Grid, check_cols, check_shape};
use glm5v_reference::kernels::rope;
use glm5v_reference::tower::progress;
use glm5v_reference::{InputError, TapSink, Tower, TowerError, TowerWeights, VisionConfig};
use ndarray::{Array2, ArrayView2};
use std::path::Path;
use std::sync::Mutex;

/// Arithmetic of the GPU forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    /// Weights and GEMM inputs in bf16, f32 accumulation; norms, rope, softmax and the residual
    /// stream in f32 (the default).
    #[default]
    Bf16,
    /// Everything in f32, TF32 off (cuBLAS pedantic math): the parity mode for bisecting.
    F32,
}

impl Precision {
    pub fn name(self) -> &'static str {
        match self {
            Precision::Bf16 => "bf16",
            Precision::F32 => "f32",
        }
    }
}

/// How to load the GPU tower.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GpuOptions {
    pub precision: Precision,
}

struct BlockW {
    norm1: DBuf,
    norm2: DBuf,
    qkv_w: DBuf,
    qkv_b: Option<DBuf>,
    q_norm: DBuf,
    k_norm: DBuf,
    proj_w: DBuf,
    proj_b: Option<DBuf>,
    gate_up_w: DBuf,
    gate_up_b: Option<DBuf>,
    down_w: DBuf,
    down_b: Option<DBuf>,
    /// q, k, v of this block go to the tensor cores as IEEE half: the weights bound them far
    /// inside its range (see [`attention_input_bound`]).
    attn_f16: bool,
    /// The qkv GEMM (norm1 output, weight, output) runs in IEEE half (see [`gemm_half_bounds`]).
    qkv_f16: bool,
    /// The gate|up and down GEMMs (norm2 output, SwiGLU output, weights, gate|up output) run in
    /// IEEE half.
    mlp_f16: bool,
    /// The projection GEMM reads the attention output as IEEE half (half weight): set with
    /// `attn_f16` when the weight fits.
    proj_f16: bool,
    /// The projection GEMM writes IEEE half (with `proj_f16`, where [`proj_out_bound`] allows).
    proj_out_f16: bool,
    /// The down GEMM writes IEEE half (with `mlp_f16`, where [`crate::half_bounds::HalfBounds::down_out`] allows).
    down_out_f16: bool,
}

struct Weights {
    patch_w: DBuf,
    patch_b: DBuf,
    blocks: Vec<BlockW>,
    post_norm: DBuf,
    down_w: DBuf,
    down_b: DBuf,
    m_proj_w: DBuf,
    m_norm_w: DBuf,
    m_norm_b: DBuf,
    m_gate_up_w: DBuf,
    m_down_w: DBuf,
}

/// The tower resident on a CUDA device (weights uploaded once at load).
pub struct GpuTower {
    cfg: VisionConfig,
    precision: Precision,
    dev: Dev,
    w: Weights,
    /// Bytes of weights on the device.
    weight_bytes: usize,
    warnings: Vec<String>,
    /// Serialises work on the one stream and cuBLAS handle.
    lock: Mutex<()>,
}

/// Per-forward geometry on the device.
struct Geo {
    n: usize,
    cos: DBuf,
    sin: DBuf,
    tiles: DBuf,
    ntiles: usize,
    /// Runs of consecutive equal-length segments (one cuDNN call each).
    runs: Vec<Run>,
    /// Attention through cuDNN (every run has a plan); else our kernels over `tiles`.
    dnn: bool,
    /// cuDNN's workspace (when its plans ask for one) and its half output [N, D].
    dnn_ws: Option<DBuf>,
    dnn_out: Option<DBuf>,
    host_cos_sin: Option<(Array2<f32>, Array2<f32>)>,
}

/// Block activations for `n` tokens.
struct Ws {
    x: DBuf,   // f32 [N, D] residual stream
    xn: DBuf,  // act [N, D]
    qkv: DBuf, // f32 [N, 3D]
    q: DBuf,   // act [H, N, hd]
    k: DBuf,   // act
    v: DBuf,   // act
    att: DBuf, // act [N, D]
    h: DBuf,   // f32 [N, D]
    gu: DBuf,  // f32 [N, 2I]
    m: DBuf,   // act [N, I]
    tq: Option<DBuf>,
    tk: Option<DBuf>,
}

type Taps<'a, 'b> = &'a mut Option<&'b mut dyn TapSink>;

fn wants(taps: &Option<&mut dyn TapSink>, name: &str) -> bool {
    taps.as_deref().is_some_and(|s| s.wants(name))
}

/// Queries per block of the scalar attention kernel (`attention`, one thread per query).
const ATT_BQ: usize = 64;
/// Queries per block of the tensor-core kernels (`MMA_BQ` of kernels/attention.cu).
const MMA_BQ: usize = 128;

/// Consecutive segments of one length: tokens `start..start + batch * len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    start: usize,
    batch: usize,
    len: usize,
}

/// The runs of equal-length consecutive segments of `cu` (empty segments are skipped).
fn runs_of(cu: &[usize]) -> Vec<Run> {
    let mut runs: Vec<Run> = Vec::new();
    for seg in cu.windows(2) {
        let (s0, len) = (seg[0], seg[1] - seg[0]);
        if len == 0 {
            continue;
        }
        match runs.last_mut() {
            Some(r) if r.len == len && r.start + r.batch * r.len == s0 => r.batch += 1,
            _ => runs.push(Run {
                start: s0,
                batch: 1,
                len,
            }),
        }
    }
    runs
}

/// Query tiles of the attention kernels: (segment start, segment end, first query, end query),
/// at most `bq` queries each, never crossing a segment.
fn tiles_of(cu: &[usize], bq: usize) -> Vec<i32> {
    let mut t = Vec::new();
    for seg in cu.windows(2) {
        let (s0, s1) = (seg[0], seg[1]);
        let mut q = s0;
        while q < s1 {
            let e = (q + bq).min(s1);
            t.extend([s0 as i32, s1 as i32, q as i32, e as i32]);
            q = e;
        }
    }
    t
}

impl GpuTower {
    /// Loads a checkpoint directory (TAPS.md section 1) onto device 0.
    pub fn load(dir: &Path, options: GpuOptions) -> Result<Self, GpuError> {
        // Fail fast (before reading gigabytes) when there is no device.
        crate::device::device_available()?;
        let weights = TowerWeights::<f32>::load(dir)?;
        Self::from_weights(&weights, options)
    }

    /// Uploads weights already in memory (f32 on the host) to device 0.
    pub fn from_weights(tw: &TowerWeights<f32>, options: GpuOptions) -> Result<Self, GpuError> {
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
        let dev = Dev::open(bf16, hd)?;
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
        Ok(Self {
            cfg,
            precision: options.precision,
            dev,
            w,
            weight_bytes: bytes,
            warnings: tw.warnings.clone(),
            lock: Mutex::new(()),
        })
    }

    pub fn precision(&self) -> Precision {
        self.precision
    }
    pub fn device(&self) -> &DeviceInfo {
        &self.dev.info
    }
    /// Bytes of weights resident on the device.
    pub fn weight_bytes(&self) -> usize {
        self.weight_bytes
    }
    /// Loader warnings (non-finite weights), each naming its tensor.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    fn guard(&self) -> std::sync::MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(|p| p.into_inner())
    }

    // ------------------------------------------------------------------ device-side pieces

    fn geo(
        &self,
        cos: &Array2<f32>,
        sin: &Array2<f32>,
        cu: &[usize],
        keep_host: bool,
    ) -> Result<Geo, GpuError> {
        let n = cos.nrows();
        let tiles = tiles_of(
            cu,
            if self.dev.has("attention_mma") || self.dev.has("attention_mma_w4") {
                MMA_BQ
            } else {
                ATT_BQ
            },
        );
        if n > i32::MAX as usize / 4 {
            return Err(GpuError::Unsupported(format!(
                "{n} tokens exceed the kernels' i32 indexing"
            )));
        }
        let cs = |a: &Array2<f32>| {
            a.as_standard_layout()
                .as_slice()
                .expect("contiguous")
                .to_vec()
        };
        let runs = runs_of(cu);
        let dnn_ws_bytes = self.cudnn_plans(&runs, n)?;
        let dnn = dnn_ws_bytes.is_some();
        let dnn_ws = match dnn_ws_bytes {
            Some(b) if b > 0 => Some(self.dev.alloc("cuDNN attention workspace", b, Dt::I32)?),
            _ => None,
        };
        let dnn_out = if dnn && self.w.blocks.iter().any(|b| self.attn_half(b)) {
            Some(self.dev.alloc(
                "cuDNN attention output [N, D] half",
                n * self.cfg.hidden_size,
                Dt::Bf16,
            )?)
        } else {
            None
        };
        Ok(Geo {
            runs,
            dnn,
            dnn_ws,
            dnn_out,
            n,
            cos: self.dev.upload_f32("rope cos", &cs(cos), Dt::F32)?,
            sin: self.dev.upload_f32("rope sin", &cs(sin), Dt::F32)?,
            ntiles: tiles.len() / 4,
            tiles: self.dev.upload_i32("attention tiles", &tiles)?,
            host_cos_sin: if keep_host {
                Some((cos.clone(), sin.clone()))
            } else {
                None
            },
        })
    }

    /// Whether block `b` feeds the attention IEEE half (see [`attention_input_bound`]): only
    /// when a kernel that reads half is loaded.
    fn attn_half(&self, b: &BlockW) -> bool {
        b.attn_f16 && (self.dev.has("attention_mma_f16") || self.dev.has("attention_mma_w4_f16"))
    }

    /// When every run of `runs` goes to cuDNN: builds (or finds) its plans for the input types
    /// the blocks use and returns the largest workspace in bytes; `None` when our kernels run
    /// instead (no cuDNN, a segment shorter than the threshold, or no plan, which is an error
    /// only when cuDNN was forced).
    fn cudnn_plans(&self, runs: &[Run], n: usize) -> Result<Option<usize>, GpuError> {
        let Some(c) = &self.dev.cudnn else {
            return Ok(None);
        };
        if runs.is_empty() || runs.iter().any(|r| r.len < self.dev.cudnn_min_len) {
            return Ok(None);
        }
        let mut halves: Vec<bool> = self.w.blocks.iter().map(|b| self.attn_half(b)).collect();
        halves.sort_unstable();
        halves.dedup();
        let mut ws = 0usize;
        for r in runs {
            for &half in &halves {
                match c.prepare(self.sdpa_shape(r, n, half)) {
                    Ok(bytes) => ws = ws.max(bytes),
                    Err(e) if self.dev.cudnn_forced => return Err(e),
                    Err(e) => {
                        static ONCE: std::sync::Once = std::sync::Once::new();
                        ONCE.call_once(|| {
                            eprintln!(
                                "glm5v: cuDNN attention has no plan for {} segments of {} tokens ({e}); \
                                 using the built-in kernels",
                                r.batch, r.len
                            )
                        });
                        return Ok(None);
                    }
                }
            }
        }
        Ok(Some(ws))
    }

    fn sdpa_shape(&self, r: &Run, n: usize, half: bool) -> crate::cudnn::SdpaShape {
        crate::cudnn::SdpaShape {
            batch: r.batch,
            len: r.len,
            n,
            heads: self.cfg.num_heads,
            head_dim: self.cfg.head_dim(),
            half,
        }
    }

    /// cuDNN's planning log (shape, engine, timed candidates), empty without cuDNN.
    pub fn attention_log(&self) -> Vec<String> {
        self.dev.cudnn.as_ref().map_or_else(Vec::new, |c| c.log())
    }

    /// Which attention runs for `grid_thw` (cuDNN or the built-in kernels), for reports.
    pub fn attention_engine(&self, grid_thw: &[Grid]) -> Result<String, GpuError> {
        let cu = geometry::cu_seqlens(grid_thw);
        let runs = runs_of(&cu);
        let n = *cu.last().unwrap_or(&0);
        Ok(match (self.cudnn_plans(&runs, n)?, &self.dev.cudnn) {
            (Some(_), Some(c)) => format!("cudnn {}", c.version),
            _ => {
                let tiles = tiles_of(&cu, MMA_BQ).len() / 4;
                let (k, _) = self.dev.attention_kernel(tiles * self.cfg.num_heads, true);
                match &self.dev.cudnn_note {
                    Some(why) => format!("{k} (cuDNN: {why})"),
                    None => k.to_string(),
                }
            }
        })
    }

    fn geo_for_grids(&self, grid_thw: &[Grid], keep_host: bool) -> Result<Geo, GpuError> {
        let pos = geometry::positions(grid_thw, self.cfg.spatial_merge_size);
        let (cos, sin) = rope::tables::<f32>(
            &pos,
            self.cfg.head_dim(),
            self.cfg.rope_parameters.rope_theta,
        );
        self.geo(&cos, &sin, &geometry::cu_seqlens(grid_thw), keep_host)
    }

    fn ws(&self, n: usize, taps: &Option<&mut dyn TapSink>) -> Result<Ws, GpuError> {
        let (d, i) = (self.cfg.hidden_size, self.cfg.intermediate_size);
        let act = self.dev.act();
        let a = |what: &str, len: usize, dt: Dt| self.dev.alloc(what, len, dt);
        let want_qk = taps.is_some();
        Ok(Ws {
            x: a("hidden states [N, D] f32", n * d, Dt::F32)?,
            xn: a("normed hidden [N, D]", n * d, act)?,
            qkv: a("qkv [N, 3D] f32", n * 3 * d, Dt::F32)?,
            q: a("q [N, D]", n * d, act)?,
            k: a("k [N, D]", n * d, act)?,
            v: a("v [N, D]", n * d, act)?,
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

    /// Hands a device buffer (rows x cols, or a column range of a wider row) to the sink.
    /// `stride` is the buffer's row length, `col0` the first column handed over.
    #[allow(clippy::too_many_arguments)]
    fn emit(
        &self,
        taps: Taps<'_, '_>,
        name: &str,
        buf: &DBuf,
        rows: usize,
        cols: usize,
        stride: usize,
        col0: usize,
    ) -> Result<(), GpuError> {
        self.emit_as(taps, name, buf, buf.dt, rows, cols, stride, col0)
    }

    /// [`GpuTower::emit`] of a buffer holding elements of `dt` (see [`Dev::download_as`]).
    #[allow(clippy::too_many_arguments)]
    fn emit_as(
        &self,
        taps: Taps<'_, '_>,
        name: &str,
        buf: &DBuf,
        dt: Dt,
        rows: usize,
        cols: usize,
        stride: usize,
        col0: usize,
    ) -> Result<(), GpuError> {
        if let Some(sink) = taps.as_deref_mut()
            && sink.wants(name)
        {
            let all = self.dev.download_as(buf, dt, 0, rows * stride)?;
            let data: Vec<f32> = if stride == cols && col0 == 0 {
                all
            } else {
                all.chunks_exact(stride)
                    .flat_map(|r| r[col0..col0 + cols].iter().copied())
                    .collect()
            };
            sink.tap(name, rows, cols, &data);
        }
        Ok(())
    }

    fn patch_embed_dev(&self, px: &DBuf, n: usize, x: &DBuf) -> Result<(), GpuError> {
        let (p, d) = (self.cfg.patch_dim(), self.cfg.hidden_size);
        let dev = &self.dev;
        let pa = if dev.bf16 {
            let pa = dev.alloc("pixel values [N, patch_dim] bf16", n * p, Dt::Bf16)?;
            let cnt = (n * p) as i64;
            dev.launch(
                "cast_act",
                dev.grid_for(n * p),
                256,
                &[arg(px.ptr), arg(pa.ptr), arg(cnt)],
            )?;
            Some(pa)
        } else {
            None
        };
        dev.linear(pa.as_ref().unwrap_or(px), &self.w.patch_w, x, n, p, d)?;
        self.add_bias(x, &self.w.patch_b, n, d)
    }

    fn add_bias(&self, y: &DBuf, b: &DBuf, rows: usize, cols: usize) -> Result<(), GpuError> {
        let (r, c) = (rows as i64, cols as i32);
        self.dev.launch(
            "add_bias",
            self.dev.grid_for(rows * cols),
            256,
            &[arg(y.ptr), arg(b.ptr), arg(r), arg(c)],
        )
    }

    /// Launch shape of the row kernels (one warp a row): 8 rows a block (`ROW_WARPS`), or one
    /// when there are few rows, so that they spread over the SMs (64 rows in blocks of 8 kept
    /// 8 of 132 SMs busy; measured on the 112x112 image: bias_residual_rms 12.6 us a launch).
    fn row_launch(rows: usize) -> Result<((u32, u32, u32), u32), GpuError> {
        let per = if rows < 2 * 132 * 8 { 1 } else { 8 };
        let blocks = u32::try_from(rows.div_ceil(per).max(1))
            .map_err(|_| GpuError::Unsupported(format!("{rows} rows for a row kernel")))?;
        Ok(((blocks, 1, 1), 32 * per as u32))
    }

    /// RMSNorm of `x` (f32) into `y`: act, or IEEE half when `f16`.
    fn rms(
        &self,
        x: &DBuf,
        w: &DBuf,
        y: &DBuf,
        rows: usize,
        cols: usize,
        f16: bool,
    ) -> Result<(), GpuError> {
        let (r, c, eps) = (rows as i64, cols as i32, self.cfg.rms_norm_eps as f32);
        let (grid, threads) = Self::row_launch(rows)?;
        self.dev.launch(
            "rms_norm",
            grid,
            threads,
            &[
                arg(x.ptr),
                arg(w.ptr),
                arg(y.ptr),
                arg(r),
                arg(c),
                arg(eps),
                arg(f16 as i32),
            ],
        )
    }

    /// `v = h + b` (`h` f32, or IEEE half when `h16`), `x += v`; `h_out` (`h` itself when that is
    /// f32, see [`GpuTower::branch_tap`]) gets `v` (a wanted tap).
    #[allow(clippy::too_many_arguments)]
    fn bias_residual(
        &self,
        h: &DBuf,
        h16: bool,
        b: Option<&DBuf>,
        x: &DBuf,
        h_out: Option<&DBuf>,
        rows: usize,
        cols: usize,
    ) -> Result<(), GpuError> {
        let (r, c) = (rows as i64, cols as i32);
        let bp = b.map_or(0u64, |b| b.ptr);
        let (keep, op) = Self::keep_args(h, h_out);
        self.dev.launch(
            "bias_residual",
            self.dev.grid_for(rows * cols),
            256,
            &[
                arg(h.ptr),
                arg(bp),
                arg(x.ptr),
                arg(op),
                arg(r),
                arg(c),
                arg(keep),
                arg(h16 as i32),
            ],
        )
    }

    /// The kernels' `keep_h` flag and `h_out` pointer for a branch tap going to `h_out`: the
    /// kernels write through `h` itself when `h_out` is `h` (their pointers are restrict).
    fn keep_args(h: &DBuf, h_out: Option<&DBuf>) -> (i32, u64) {
        match h_out {
            None => (0, 0),
            Some(o) if o.ptr == h.ptr => (1, 0),
            Some(o) => (1, o.ptr),
        }
    }

    /// `bias_residual` then `rms` (weight `norm_w`, into `y`; IEEE half when `f16`) as one
    /// kernel when the row fits in a warp's registers (`cols <= 2048`), else the two kernels.
    #[allow(clippy::too_many_arguments)]
    fn bias_residual_norm(
        &self,
        h: &DBuf,
        h16: bool,
        b: Option<&DBuf>,
        x: &DBuf,
        h_out: Option<&DBuf>,
        norm_w: &DBuf,
        y: &DBuf,
        rows: usize,
        cols: usize,
        f16: bool,
    ) -> Result<(), GpuError> {
        if cols > 32 * 64 {
            self.bias_residual(h, h16, b, x, h_out, rows, cols)?;
            return self.rms(x, norm_w, y, rows, cols, f16);
        }
        let (r, c) = (rows as i64, cols as i32);
        let eps = self.cfg.rms_norm_eps as f32;
        let bp = b.map_or(0u64, |b| b.ptr);
        let (keep, op) = Self::keep_args(h, h_out);
        let (grid, threads) = Self::row_launch(rows)?;
        // the model's hidden size has a kernel of its own (fewer registers a thread)
        let kernel = if cols == 1024 {
            "bias_residual_rms_1024"
        } else {
            "bias_residual_rms"
        };
        self.dev.launch(
            kernel,
            grid,
            threads,
            &[
                arg(h.ptr),
                arg(bp),
                arg(x.ptr),
                arg(norm_w.ptr),
                arg(y.ptr),
                arg(r),
                arg(c),
                arg(op),
                arg(keep),
                arg(eps),
                arg(f16 as i32),
                arg(h16 as i32),
            ],
        )
    }

    /// Where a block's branch output `h + b` goes when its tap `wanted`: back into `ws.h` when
    /// that holds f32, else (a half GEMM output) the f32 scratch `ws.tq` (its q_norm tap was
    /// handed over already); nowhere when not wanted.
    fn branch_tap<'w>(&self, ws: &'w Ws, wanted: bool, h16: bool) -> Option<&'w DBuf> {
        match (wanted, h16) {
            (false, _) => None,
            (true, false) => Some(&ws.h),
            (true, true) => Some(ws.tq.as_ref().expect("allocated when taps are wanted")),
        }
    }

    /// The clamped SwiGLU of `gu` (+ `b`) into `out`; `half`: `gu` holds IEEE half and `out`
    /// gets IEEE half (else f32 in, act out).
    #[allow(clippy::too_many_arguments)]
    fn swiglu(
        &self,
        gu: &DBuf,
        b: Option<&DBuf>,
        out: &DBuf,
        rows: usize,
        width: usize,
        half: bool,
    ) -> Result<(), GpuError> {
        let (r, wdt, lim) = (rows as i64, width as i32, self.cfg.swiglu_limit as f32);
        let bp = b.map_or(0u64, |b| b.ptr);
        // x: column groups (8 or 4 columns a thread when the types and width allow: the
        // kernel's SWIGLU_PER), y: rows (grid-stride).
        let per = if half && width.is_multiple_of(8) {
            8
        } else if width.is_multiple_of(4) {
            4
        } else {
            1
        };
        let gx = width.div_ceil(per * 256).max(1);
        let gy = rows.clamp(1, 65535);
        self.dev.launch(
            "swiglu",
            (gx as u32, gy as u32, 1),
            256,
            &[
                arg(gu.ptr),
                arg(bp),
                arg(out.ptr),
                arg(r),
                arg(wdt),
                arg(lim),
                arg(half as i32),
                arg(half as i32),
            ],
        )
    }

    /// Block `i` on the residual stream `ws.x`. `xn_ready`: `ws.xn` already holds this block's
    /// norm1 output (fused into the previous block's last residual add, in this block's qkv
    /// input type). `next`: the next block, to fuse its norm1 into this block's last residual add.
    #[allow(clippy::too_many_arguments)]
    fn block_dev(
        &self,
        i: usize,
        ws: &Ws,
        geo: &Geo,
        taps: Taps<'_, '_>,
        xn_ready: bool,
        next: Option<&BlockW>,
    ) -> Result<(), GpuError> {
        let cfg = &self.cfg;
        let (n, d, heads, hd, inter) = (
            geo.n,
            cfg.hidden_size,
            cfg.num_heads,
            cfg.head_dim(),
            cfg.intermediate_size,
        );
        let w = &self.w.blocks[i];
        let dev = &self.dev;
        let name = |s: &str| {
            if s.is_empty() {
                format!("blocks.{i}")
            } else {
                format!("blocks.{i}.{s}")
            }
        };

        // The GEMM input/output types of this block: act / f32, or IEEE half where proven.
        let (qh, mh) = (w.qkv_f16, w.mlp_f16);
        let half_or = |h: bool, other: Dt| if h { Dt::F16 } else { other };
        if !xn_ready {
            self.rms(&ws.x, &w.norm1, &ws.xn, n, d, qh)?;
        }
        self.emit_as(
            taps,
            &name("norm1"),
            &ws.xn,
            half_or(qh, ws.xn.dt),
            n,
            d,
            d,
            0,
        )?;
        let qkv_dt = half_or(qh, Dt::F32);
        dev.linear_to(&ws.xn, &w.qkv_w, &ws.qkv, qkv_dt, n, d, 3 * d)?;
        // The qkv bias is added inside qk_norm_rope, unless the qkv tap (which includes it) is
        // wanted: then it is added to an f32 buffer first, or on the host to a copy of a half one
        // (the sum qk_norm_rope makes, in f32).
        let mut qkv_bias = w.qkv_b.as_ref().map_or(0u64, |b| b.ptr);
        if wants(taps, &name("attn.qkv")) {
            match (&w.qkv_b, qh) {
                (Some(b), false) => {
                    self.add_bias(&ws.qkv, b, n, 3 * d)?;
                    qkv_bias = 0;
                    self.emit(taps, &name("attn.qkv"), &ws.qkv, n, 3 * d, 3 * d, 0)?;
                }
                (Some(b), true) => {
                    let mut v = dev.download_as(&ws.qkv, Dt::F16, 0, n * 3 * d)?;
                    let bias = dev.download_f32(b, 0, 3 * d)?;
                    for row in v.chunks_exact_mut(3 * d) {
                        row.iter_mut().zip(&bias).for_each(|(x, b)| *x += b);
                    }
                    if let Some(sink) = taps.as_deref_mut() {
                        sink.tap(&name("attn.qkv"), n, 3 * d, &v);
                    }
                }
                (None, _) => {
                    self.emit_as(taps, &name("attn.qkv"), &ws.qkv, qkv_dt, n, 3 * d, 3 * d, 0)?
                }
            }
        }
        let want_q = wants(taps, &name("attn.q_norm")) || wants(taps, &name("attn.k_norm"));
        let (tq, tk) = match (&ws.tq, &ws.tk, want_q) {
            (Some(a), Some(b), true) => (a.ptr, b.ptr),
            _ => (0u64, 0u64),
        };
        let (ni, hi, eps) = (n as i32, heads as i32, cfg.rms_norm_eps as f32);
        let blocks_att = geo.ntiles * heads;
        let (att_kernel, att_threads) = dev.attention_kernel(blocks_att, w.attn_f16);
        // half q/k/v only for the tensor-core kernels (or cuDNN) that read them so
        let f16 = if geo.dnn {
            self.attn_half(w) as i32
        } else {
            att_kernel.ends_with("_f16") as i32
        };
        // Grid-stride; a warp takes four (token, head) items at head_dim 64, else one; 4 warps
        // a block, or one when there are few items (over more SMs, as `row_launch`).
        let per_warp = if hd == 64 { 4 } else { 1 };
        let warps = if n * heads < 2 * 132 * 4 * per_warp {
            1
        } else {
            4
        };
        let qkr_blocks = (n * heads).div_ceil(per_warp * warps).clamp(1, 132 * 64);
        dev.launch(
            "qk_norm_rope",
            (qkr_blocks as u32, 1, 1),
            32 * warps as u32,
            &[
                arg(ws.qkv.ptr),
                arg(qkv_bias),
                arg(w.q_norm.ptr),
                arg(w.k_norm.ptr),
                arg(geo.cos.ptr),
                arg(geo.sin.ptr),
                arg(ws.q.ptr),
                arg(ws.k.ptr),
                arg(ws.v.ptr),
                arg(tq),
                arg(tk),
                arg(ni),
                arg(hi),
                arg(eps),
                arg(f16),
                arg(qh as i32),
            ],
        )?;
        if tq != 0 {
            self.emit(
                taps,
                &name("attn.q_norm"),
                ws.tq.as_ref().expect("allocated"),
                n,
                d,
                d,
                0,
            )?;
            self.emit(
                taps,
                &name("attn.k_norm"),
                ws.tk.as_ref().expect("allocated"),
                n,
                d,
                d,
                0,
            )?;
        }
        let scale_log2 = ((hd as f64).powf(-0.5) * std::f64::consts::LOG2_E) as f32;
        // The attention output is half when its inputs were (cuDNN, our `_f16` kernels); the
        // projection wants half exactly when `proj_f16`; one conversion in place otherwise.
        let att_half = f16 != 0;
        if geo.dnn {
            self.attention_cudnn(&ws.q, &ws.k, &ws.v, &ws.att, geo, att_half, w.proj_f16)?;
        } else if geo.ntiles > 0 {
            if geo.ntiles > i32::MAX as usize || heads > 65535 {
                return Err(GpuError::Unsupported(format!(
                    "{} attention tiles x {heads} heads",
                    geo.ntiles
                )));
            }
            let (kernel, threads) = (att_kernel, att_threads);
            dev.launch(
                kernel,
                (geo.ntiles as u32, heads as u32, 1),
                threads,
                &[
                    arg(ws.q.ptr),
                    arg(ws.k.ptr),
                    arg(ws.v.ptr),
                    arg(geo.tiles.ptr),
                    arg(ws.att.ptr),
                    arg(ni),
                    arg(hi),
                    arg(scale_log2),
                ],
            )?;
        }
        // cuDNN's half output went straight to `att` only when the projection wants half
        let att_is_half = if geo.dnn {
            att_half && w.proj_f16
        } else {
            att_half
        };
        if (geo.dnn || geo.ntiles > 0) && att_is_half != w.proj_f16 {
            let kernel = if att_is_half {
                "half_to_bf16_inplace"
            } else {
                "bf16_to_half"
            };
            let total = (n * d) as i64;
            let blocks = (n * d).div_ceil(256).clamp(1, 132 * 32) as u32;
            dev.launch(kernel, (blocks, 1, 1), 256, &[arg(ws.att.ptr), arg(total)])?;
        }
        let att_dt = if w.proj_f16 { Dt::F16 } else { ws.att.dt };
        self.emit_as(taps, &name("attn.proj.input"), &ws.att, att_dt, n, d, d, 0)?;
        let (po, dno) = (w.proj_out_f16, w.down_out_f16);
        dev.linear_to(&ws.att, &w.proj_w, &ws.h, half_or(po, Dt::F32), n, d, d)?;
        let h_tap = self.branch_tap(ws, wants(taps, &name("attn")), po);
        self.bias_residual_norm(
            &ws.h,
            po,
            w.proj_b.as_ref(),
            &ws.x,
            h_tap,
            &w.norm2,
            &ws.xn,
            n,
            d,
            mh,
        )?;
        if let Some(t) = h_tap {
            self.emit(taps, &name("attn"), t, n, d, d, 0)?;
        }
        self.emit_as(
            taps,
            &name("norm2"),
            &ws.xn,
            half_or(mh, ws.xn.dt),
            n,
            d,
            d,
            0,
        )?;
        dev.linear_to(
            &ws.xn,
            &w.gate_up_w,
            &ws.gu,
            half_or(mh, Dt::F32),
            n,
            d,
            2 * inter,
        )?;
        self.swiglu(&ws.gu, w.gate_up_b.as_ref(), &ws.m, n, inter, mh)?;
        dev.linear_to(&ws.m, &w.down_w, &ws.h, half_or(dno, Dt::F32), n, inter, d)?;
        let h_tap = self.branch_tap(ws, wants(taps, &name("mlp")), dno);
        match next {
            Some(nb) => self.bias_residual_norm(
                &ws.h,
                dno,
                w.down_b.as_ref(),
                &ws.x,
                h_tap,
                &nb.norm1,
                &ws.xn,
                n,
                d,
                nb.qkv_f16,
            )?,
            None => self.bias_residual(&ws.h, dno, w.down_b.as_ref(), &ws.x, h_tap, n, d)?,
        }
        if let Some(t) = h_tap {
            self.emit(taps, &name("mlp"), t, n, d, d, 0)?;
        }
        self.emit(taps, &name(""), &ws.x, n, d, d, 0)?;
        Ok(())
    }

    /// post_layernorm of `x` [N, D] f32 into a new act buffer.
    fn post_norm_dev(&self, x: &DBuf, n: usize) -> Result<DBuf, GpuError> {
        let d = self.cfg.hidden_size;
        let y = self
            .dev
            .alloc("post_layernorm [N, D]", n * d, self.dev.act())?;
        self.rms(x, &self.w.post_norm, &y, n, d, false)?;
        Ok(y)
    }

    /// The 2x2 downsample: act [N, D] viewed as [G, m*m*D] -> f32 [G, O].
    fn downsample_dev(&self, y: &DBuf, n: usize) -> Result<DBuf, GpuError> {
        let (d, o, unit) = (
            self.cfg.hidden_size,
            self.cfg.out_hidden_size,
            self.cfg.merge_unit(),
        );
        let g = n / unit;
        let ds = self.dev.alloc("downsample [G, O] f32", g * o, Dt::F32)?;
        self.dev.linear(y, &self.w.down_w, &ds, g, unit * d, o)?;
        self.add_bias(&ds, &self.w.down_b, g, o)?;
        Ok(ds)
    }

    /// The merger on f32 [G, O]; returns f32 [G, O].
    fn merger_dev(&self, ds: &DBuf, g: usize, taps: Taps<'_, '_>) -> Result<DBuf, GpuError> {
        let (o, p) = (
            self.cfg.out_hidden_size,
            self.cfg.projection_intermediate_size,
        );
        let dev = &self.dev;
        let act = dev.act();
        let xin = if dev.bf16 {
            let xa = dev.alloc("merger input [G, O] bf16", g * o, act)?;
            let cnt = (g * o) as i64;
            dev.launch(
                "cast_act",
                dev.grid_for(g * o),
                256,
                &[arg(ds.ptr), arg(xa.ptr), arg(cnt)],
            )?;
            Some(xa)
        } else {
            None
        };
        let mp = dev.alloc("merger.proj [G, O] f32", g * o, Dt::F32)?;
        dev.linear(xin.as_ref().unwrap_or(ds), &self.w.m_proj_w, &mp, g, o, o)?;
        drop(xin);
        self.emit(taps, "merger.proj", &mp, g, o, o, 0)?;
        let ln = if wants(taps, "merger.post_projection_norm") {
            Some(dev.alloc("merger.post_projection_norm tap [G, O] f32", g * o, Dt::F32)?)
        } else {
            None
        };
        let a1 = dev.alloc("merger.act1 [G, O]", g * o, act)?;
        let (lnp, cols, eps) = (ln.as_ref().map_or(0u64, |b| b.ptr), o as i32, 1e-5f32);
        dev.launch(
            "layer_norm_gelu",
            (g as u32, 1, 1),
            256,
            &[
                arg(mp.ptr),
                arg(self.w.m_norm_w.ptr),
                arg(self.w.m_norm_b.ptr),
                arg(lnp),
                arg(a1.ptr),
                arg(cols),
                arg(eps),
            ],
        )?;
        if let Some(ln) = &ln {
            self.emit(taps, "merger.post_projection_norm", ln, g, o, o, 0)?;
        }
        self.emit(taps, "merger.act1", &a1, g, o, o, 0)?;
        let gu = dev.alloc("merger gate|up [G, 2P] f32", g * 2 * p, Dt::F32)?;
        dev.linear(&a1, &self.w.m_gate_up_w, &gu, g, o, 2 * p)?;
        self.emit(taps, "merger.gate_proj", &gu, g, p, 2 * p, 0)?;
        self.emit(taps, "merger.up_proj", &gu, g, p, 2 * p, p)?;
        let mm = dev.alloc("merger hidden [G, P]", g * p, act)?;
        self.swiglu(&gu, None, &mm, g, p, false)?;
        drop(gu);
        let out = dev.alloc("merger output [G, O] f32", g * o, Dt::F32)?;
        dev.linear(&mm, &self.w.m_down_w, &out, g, p, o)?;
        self.emit(taps, "merger.down_proj", &out, g, o, o, 0)?;
        self.emit(taps, "merger", &out, g, o, o, 0)?;
        Ok(out)
    }

    /// The whole forward on device-resident pixels `px` (f32 [N, patch_dim]); returns the
    /// The attention through cuDNN, one call per run of equal segments; q, k, v head-major
    /// [H, N, hd] (half when `half`, else bf16), the output bf16 [N, D] in `att` (cuDNN writes
    /// half into `geo.dnn_out` first when the inputs are half).
    #[allow(clippy::too_many_arguments)]
    fn attention_cudnn(
        &self,
        q: &DBuf,
        k: &DBuf,
        v: &DBuf,
        att: &DBuf,
        geo: &Geo,
        half: bool,
        half_out: bool,
    ) -> Result<(), GpuError> {
        let dev = &self.dev;
        let c = dev.cudnn.as_ref().expect("geo.dnn implies a cuDNN handle");
        let (n, d, hd) = (geo.n, self.cfg.hidden_size, self.cfg.head_dim());
        // half inputs give a half output: straight into `att` when half is wanted there
        let convert = half && !half_out;
        let out = if convert {
            geo.dnn_out
                .as_ref()
                .expect("allocated with geo.dnn for half blocks")
        } else {
            att
        };
        let ws = geo.dnn_ws.as_ref().map_or(0, |b| b.ptr);
        // Every element is 2 bytes (bf16 or half).
        for r in &geo.runs {
            let (qo, oo) = ((r.start * hd * 2) as u64, (r.start * d * 2) as u64);
            c.run(
                self.sdpa_shape(r, n, half),
                q.ptr + qo,
                k.ptr + qo,
                v.ptr + qo,
                out.ptr + oo,
                ws,
            )?;
        }
        if convert {
            let total = (n * d) as i64;
            let blocks = (n * d).div_ceil(256).clamp(1, 132 * 32) as u32;
            dev.launch(
                "half_to_bf16",
                (blocks, 1, 1),
                256,
                &[arg(out.ptr), arg(att.ptr), arg(total)],
            )?;
        }
        Ok(())
    }

    /// embeddings on the device (f32 [G, O]). No host round trip unless a tap is wanted.
    fn forward_dev(&self, px: &DBuf, geo: &Geo, taps: Taps<'_, '_>) -> Result<DBuf, GpuError> {
        let cfg = &self.cfg;
        let (n, d) = (geo.n, cfg.hidden_size);
        let total = cfg.depth + 2;
        let ws = self.ws(n, taps)?;
        self.patch_embed_dev(px, n, &ws.x)?;
        self.emit(taps, "patch_embed", &ws.x, n, d, d, 0)?;
        if let (Some(sink), Some((c, s))) = (taps.as_deref_mut(), &geo.host_cos_sin) {
            for (name, a) in [("rotary_pos_emb.cos", c), ("rotary_pos_emb.sin", s)] {
                if sink.wants(name) {
                    sink.tap(
                        name,
                        a.nrows(),
                        a.ncols(),
                        a.as_slice().expect("contiguous"),
                    );
                }
            }
        }
        progress(taps, 1, total);
        for i in 0..cfg.depth {
            self.block_dev(i, &ws, geo, taps, i > 0, self.w.blocks.get(i + 1))?;
            progress(taps, i + 2, total);
        }
        let post = self.post_norm_dev(&ws.x, n)?;
        drop(ws);
        self.emit(taps, "post_layernorm", &post, n, d, d, 0)?;
        let ds = self.downsample_dev(&post, n)?;
        drop(post);
        let g = n / cfg.merge_unit();
        self.emit(
            taps,
            "downsample",
            &ds,
            g,
            cfg.out_hidden_size,
            cfg.out_hidden_size,
            0,
        )?;
        let out = self.merger_dev(&ds, g, taps)?;
        progress(taps, total, total);
        Ok(out)
    }

    fn upload_pixels(&self, pixel_values: ArrayView2<f32>) -> Result<DBuf, GpuError> {
        let px = pixel_values.as_standard_layout();
        self.dev.upload_f32(
            "pixel values [N, patch_dim] f32",
            px.as_slice().expect("contiguous"),
            Dt::F32,
        )
    }

    fn download2(&self, buf: &DBuf, rows: usize, cols: usize) -> Result<Array2<f32>, GpuError> {
        let v = self.dev.download_f32(buf, 0, rows * cols)?;
        Ok(Array2::from_shape_vec((rows, cols), v).expect("sizes match"))
    }

    /// The forward with typed errors (the [`Tower::forward`] body).
    pub fn forward_gpu(
        &self,
        pixel_values: ArrayView2<f32>,
        grid_thw: &[Grid],
        mut taps: Option<&mut dyn TapSink>,
    ) -> Result<Array2<f32>, GpuError> {
        let cfg = &self.cfg;
        geometry::validate_pixels(cfg, pixel_values.nrows(), pixel_values.ncols(), grid_thw)?;
        let _g = self.guard();
        let geo = self.geo_for_grids(grid_thw, taps.is_some())?;
        let px = self.upload_pixels(pixel_values)?;
        let out = self.forward_dev(&px, &geo, &mut taps)?;
        let g = geo.n / cfg.merge_unit();
        let r = self.download2(&out, g, cfg.out_hidden_size);
        self.dev.sync("forward")?;
        r
    }

    /// Times the device forward (pixels already on the device, no taps) with CUDA events:
    /// `warmup` untimed runs, then `iters` timed ones. Returns each run's milliseconds.
    pub fn time_forward(
        &self,
        pixel_values: ArrayView2<f32>,
        grid_thw: &[Grid],
        warmup: usize,
        iters: usize,
    ) -> Result<Vec<f64>, GpuError> {
        let cfg = &self.cfg;
        geometry::validate_pixels(cfg, pixel_values.nrows(), pixel_values.ncols(), grid_thw)?;
        let _g = self.guard();
        let geo = self.geo_for_grids(grid_thw, false)?;
        let px = self.upload_pixels(pixel_values)?;
        let mut none: Option<&mut dyn TapSink> = None;
        for _ in 0..warmup {
            drop(self.forward_dev(&px, &geo, &mut none)?);
        }
        self.dev.sync("warm-up")?;
        let mut times = Vec::with_capacity(iters);
        for _ in 0..iters {
            let (e0, e1) = (self.dev.event()?, self.dev.event()?);
            e0.record(&self.dev.stream)
                .map_err(|e| GpuError::cuda("cuEventRecord", e))?;
            let out = self.forward_dev(&px, &geo, &mut none)?;
            e1.record(&self.dev.stream)
                .map_err(|e| GpuError::cuda("cuEventRecord", e))?;
            let ms = e0
                .elapsed_ms(&e1)
                .map_err(|e| GpuError::cuda("cuEventElapsedTime", e))?;
            drop(out);
            times.push(ms as f64);
        }
        self.dev.sync("timing")?;
        Ok(times)
    }
}

impl Tower for GpuTower {
    fn config(&self) -> &VisionConfig {
        &self.cfg
    }

    fn describe(&self) -> String {
        format!("gpu {} ({})", self.precision.name(), self.dev.info.name)
    }

    fn patch_embed(&self, pixel_values: ArrayView2<f32>) -> Result<Array2<f32>, TowerError> {
        check_cols("pixel_values", pixel_values.dim(), self.cfg.patch_dim())?;
        let _g = self.guard();
        let n = pixel_values.nrows();
        let px = self.upload_pixels(pixel_values)?;
        let x = self
            .dev
            .alloc("patch_embed [N, D] f32", n * self.cfg.hidden_size, Dt::F32)?;
        self.patch_embed_dev(&px, n, &x)?;
        Ok(self.download2(&x, n, self.cfg.hidden_size)?)
    }

    fn rope(&self, grid_thw: &[Grid]) -> Result<(Array2<f32>, Array2<f32>), TowerError> {
        geometry::validate_grids(&self.cfg, grid_thw)?;
        // Computed on the host (f32, the reference's formula) and uploaded once per forward.
        let pos = geometry::positions(grid_thw, self.cfg.spatial_merge_size);
        Ok(rope::tables::<f32>(
            &pos,
            self.cfg.head_dim(),
            self.cfg.rope_parameters.rope_theta,
        ))
    }

    fn block(
        &self,
        index: usize,
        hidden: ArrayView2<f32>,
        cos: ArrayView2<f32>,
        sin: ArrayView2<f32>,
        cu_seqlens: &[usize],
        mut taps: Option<&mut dyn TapSink>,
    ) -> Result<Array2<f32>, TowerError> {
        let cfg = &self.cfg;
        if index >= cfg.depth {
            return Err(InputError::Block {
                index,
                depth: cfg.depth,
            }
            .into());
        }
        let n = hidden.nrows();
        let hd = cfg.head_dim();
        check_cols("block hidden states", hidden.dim(), cfg.hidden_size)?;
        check_shape("rope cos", cos.dim(), (n, hd))?;
        check_shape("rope sin", sin.dim(), (n, hd))?;
        geometry::validate_cu_seqlens(cu_seqlens, n)?;
        let _g = self.guard();
        let geo = self.geo(&cos.to_owned(), &sin.to_owned(), cu_seqlens, false)?;
        let ws = self.ws(n, &taps)?;
        let h = hidden.as_standard_layout();
        self.dev
            .upload_into(&ws.x, h.as_slice().expect("contiguous"))?;
        self.block_dev(index, &ws, &geo, &mut taps, false, None)?;
        Ok(self.download2(&ws.x, n, cfg.hidden_size)?)
    }

    fn post_norm(&self, hidden: ArrayView2<f32>) -> Result<Array2<f32>, TowerError> {
        check_cols("post_layernorm input", hidden.dim(), self.cfg.hidden_size)?;
        let _g = self.guard();
        let n = hidden.nrows();
        let h = hidden.as_standard_layout();
        let x = self.dev.upload_f32(
            "post_layernorm input",
            h.as_slice().expect("contiguous"),
            Dt::F32,
        )?;
        let y = self.post_norm_dev(&x, n)?;
        Ok(self.download2(&y, n, self.cfg.hidden_size)?)
    }

    fn downsample(&self, hidden: ArrayView2<f32>) -> Result<Array2<f32>, TowerError> {
        geometry::check_downsample_input(&self.cfg, hidden.dim())?;
        let _g = self.guard();
        let n = hidden.nrows();
        let h = hidden.as_standard_layout();
        let x = self.dev.upload_f32(
            "downsample input",
            h.as_slice().expect("contiguous"),
            self.dev.act(),
        )?;
        let ds = self.downsample_dev(&x, n)?;
        Ok(self.download2(&ds, n / self.cfg.merge_unit(), self.cfg.out_hidden_size)?)
    }

    fn merger(
        &self,
        x: ArrayView2<f32>,
        mut taps: Option<&mut dyn TapSink>,
    ) -> Result<Array2<f32>, TowerError> {
        let cfg = &self.cfg;
        check_cols("merger input", x.dim(), cfg.out_hidden_size)?;
        let _g = self.guard();
        let g = x.nrows();
        let h = x.as_standard_layout();
        let xd = self
            .dev
            .upload_f32("merger input", h.as_slice().expect("contiguous"), Dt::F32)?;
        let out = self.merger_dev(&xd, g, &mut taps)?;
        Ok(self.download2(&out, g, cfg.out_hidden_size)?)
    }

    fn forward(
        &self,
        pixel_values: ArrayView2<f32>,
        grid_thw: &[Grid],
        taps: Option<&mut dyn TapSink>,
    ) -> Result<Array2<f32>, TowerError> {
        Ok(self.forward_gpu(pixel_values, grid_thw, taps)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_of_groups_consecutive_equal_segments() {
        let r = |start, batch, len| Run { start, batch, len };
        assert_eq!(
            runs_of(&[0, 4, 8, 12, 15, 15, 18, 22]),
            vec![r(0, 3, 4), r(12, 2, 3), r(18, 1, 4)]
        );
        assert_eq!(runs_of(&[0]), vec![]);
        assert_eq!(runs_of(&[0, 0, 5]), vec![r(0, 1, 5)]);
    }
}
