//! The attention stage of the GPU tower: the per-forward geometry (rope tables, query tiles,
//! runs of equal segments and their cuDNN plans), and a block's attention from the qkv GEMM to
//! the projection (`reference/src/kernels/attention.rs` and `rope.rs` on the CPU).

use super::weights::{BlockW, Ws};
use super::{GpuTower, Taps, half_or, wants};
use crate::device::{DBuf, Dt, arg};
use crate::error::GpuError;
use glm5v_reference::geometry::{self, Grid};
use glm5v_reference::kernels::rope;
use ndarray::Array2;

/// Per-forward geometry on the device.
pub(super) struct Geo {
    pub(super) n: usize,
    pub(super) cos: DBuf,
    pub(super) sin: DBuf,
    pub(super) tiles: DBuf,
    pub(super) ntiles: usize,
    /// Runs of consecutive equal-length segments that cuDNN takes (one call each; every run
    /// has a plan); the other segments are `tiles` for our kernels.
    pub(super) runs: Vec<Run>,
    /// Tokens per head in q, k, v (head-major [H, stride, hd]): [`head_stride`] of n when
    /// cuDNN takes a run, else n (our kernels read at any stride).
    pub(super) stride: usize,
    /// cuDNN's workspace (when its plans ask for one) and its half output [N, D].
    pub(super) dnn_ws: Option<DBuf>,
    pub(super) dnn_out: Option<DBuf>,
    pub(super) host_cos_sin: Option<(Array2<f32>, Array2<f32>)>,
}

/// The head stride (tokens) of q, k, v for cuDNN: n rounded up to a power of two, at least
/// 4096. A cuDNN plan holds the strides, so one per packed length would cost a plan (~0.3 s on
/// the H200, 2.2 s for the first on an H100) for every new batch total; with this, a segment
/// length has one plan per bucket. The padding rows are never read; it costs at most n more
/// tokens of q, k and v. A tower keeps the largest stride it has used ([`GpuTower::stride_for`]).
pub(super) fn head_stride(n: usize) -> usize {
    n.next_power_of_two().max(4096)
}

/// How a forward's attention splits between cuDNN and our kernels
/// ([`GpuTower::attention_split`]).
pub(super) struct Split {
    /// The runs cuDNN takes, each planned (empty: our kernels take every segment).
    pub(super) runs: Vec<Run>,
    /// The largest workspace of their plans.
    pub(super) ws_bytes: usize,
    /// Our kernels take the segments shorter than this.
    pub(super) ours_below: usize,
}

/// Queries per block of the scalar attention kernel (`attention`, one thread per query).
pub(super) const ATT_BQ: usize = 64;
/// Queries per block of the tensor-core kernels (`MMA_BQ` of kernels/attention.cu).
pub(super) const MMA_BQ: usize = 128;

/// Values of page-locked staging that a forward of `rows` tokens' geometry needs at most: the
/// rope tables (`rows` x `head_dim` each) and the query tiles (4 values a tile, at most one
/// tile a token).
pub(super) fn geo_stage_len(rows: usize, head_dim: usize) -> usize {
    rows * (2 * head_dim + 4)
}

/// Consecutive segments of one length: tokens `start..start + batch * len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Run {
    start: usize,
    batch: usize,
    len: usize,
}

/// The runs of equal-length consecutive segments of `cu` of at least `min_len` tokens (empty
/// and shorter segments are skipped, and no run spans one); with `merge` false, one run per
/// segment (a cuDNN plan for a batch of segments chosen by the heuristics could pick another
/// engine than the one for a segment alone: the batch-invariant mode merges only when the batch
/// runs the single segment's engine and knobs, `GLM5V_CUDNN_BATCHED`).
pub(super) fn runs_of(cu: &[usize], merge: bool, min_len: usize) -> Vec<Run> {
    let mut runs: Vec<Run> = Vec::new();
    for seg in cu.windows(2) {
        let (s0, len) = (seg[0], seg[1] - seg[0]);
        if len == 0 || len < min_len {
            continue;
        }
        match runs.last_mut() {
            Some(r) if merge && r.len == len && r.start + r.batch * r.len == s0 => r.batch += 1,
            _ => runs.push(Run {
                start: s0,
                batch: 1,
                len,
            }),
        }
    }
    runs
}

/// `runs` with each run of several segments cut into runs of powers of two, the largest first
/// (13 segments: 8, 4, 1). A cuDNN plan holds its batch size, so a server's batches of 1 to 32
/// images of one size would build up to 32 plans of that length (0.03-0.04 s each on an H100,
/// the first time each count comes); cut this way they need at most 6, all built after a few
/// batches. Each call still runs the single segment's engine and knobs in the batch-invariant
/// mode, so the bits are the same however a run is cut (`GLM5V_CUDNN_POW2=0`: runs uncut).
pub(super) fn pow2_runs(runs: Vec<Run>) -> Vec<Run> {
    let mut out = Vec::with_capacity(runs.len());
    for r in runs {
        let (mut start, mut left) = (r.start, r.batch);
        while left > 0 {
            let batch = 1usize << left.ilog2();
            out.push(Run { batch, start, ..r });
            start += batch * r.len;
            left -= batch;
        }
    }
    out
}

/// Query tiles of the attention kernels: (segment start, segment end, first query, end query),
/// at most `bq` queries each, never crossing a segment, for the segments shorter than
/// `below` tokens.
pub(super) fn tiles_of(cu: &[usize], bq: usize, below: usize) -> Vec<i32> {
    let mut t = Vec::new();
    for seg in cu.windows(2) {
        let (s0, s1) = (seg[0], seg[1]);
        if s1 - s0 >= below {
            continue;
        }
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
    pub(super) fn geo(
        &self,
        cos: &Array2<f32>,
        sin: &Array2<f32>,
        cu: &[usize],
        keep_host: bool,
        stage: Option<&mut [f32]>,
    ) -> Result<Geo, GpuError> {
        let n = cos.nrows();
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
        let padded = self.stride_for(n);
        let Split {
            runs,
            ws_bytes,
            ours_below,
        } = self.attention_split(cu, padded)?;
        let dnn = !runs.is_empty();
        if dnn {
            self.stride_floor
                .fetch_max(padded, std::sync::atomic::Ordering::Relaxed);
        }
        let stride = if dnn { padded } else { n };
        let tiles = tiles_of(
            cu,
            if self.dev.has("attention_mma") || self.dev.has("attention_mma_w4") {
                MMA_BQ
            } else {
                ATT_BQ
            },
            ours_below,
        );
        let dnn_ws = if ws_bytes > 0 {
            Some(
                self.dev
                    .alloc("cuDNN attention workspace", ws_bytes, Dt::I32)?,
            )
        } else {
            None
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
        let (cos_d, sin_d, tiles_d) = match stage {
            // page-locked staging the caller keeps until this forward is done: copies in stream
            // order, without waiting for the forward before (a queued forward's geometry)
            Some(stage) if stage.len() >= cos.len() + sin.len() + tiles.len() => {
                let (c, rest) = stage.split_at_mut(cos.len());
                let (s, rest) = rest.split_at_mut(sin.len());
                let t = &mut rest[..tiles.len()];
                let copy = |from: &Array2<f32>, to: &mut [f32]| match from.as_slice() {
                    Some(v) => to.copy_from_slice(v),
                    None => to.copy_from_slice(&cs(from)),
                };
                copy(cos, c);
                copy(sin, s);
                bytemuck::cast_slice_mut::<f32, i32>(t).copy_from_slice(&tiles);
                let cos_d = self.dev.alloc("rope cos", cos.len(), Dt::F32)?;
                let sin_d = self.dev.alloc("rope sin", sin.len(), Dt::F32)?;
                let tiles_d = self.dev.alloc("attention tiles", tiles.len(), Dt::I32)?;
                // SAFETY: the staging is page-locked and untouched until the forward is done
                // (the caller's contract); each buffer holds its slice.
                unsafe {
                    self.dev.htod_staged(bytemuck::cast_slice(c), &cos_d)?;
                    self.dev.htod_staged(bytemuck::cast_slice(s), &sin_d)?;
                    self.dev.htod_staged(bytemuck::cast_slice(t), &tiles_d)?;
                }
                (cos_d, sin_d, tiles_d)
            }
            _ => (
                self.dev.upload_f32("rope cos", &cs(cos), Dt::F32)?,
                self.dev.upload_f32("rope sin", &cs(sin), Dt::F32)?,
                self.dev.upload_i32("attention tiles", &tiles)?,
            ),
        };
        Ok(Geo {
            runs,
            stride,
            dnn_ws,
            dnn_out,
            n,
            cos: cos_d,
            sin: sin_d,
            ntiles: tiles.len() / 4,
            tiles: tiles_d,
            host_cos_sin: if keep_host {
                Some((cos.clone(), sin.clone()))
            } else {
                None
            },
        })
    }

    /// The head stride of q, k, v under cuDNN for a batch of `n` tokens: [`head_stride`], or
    /// the largest this tower has used when that is larger. A segment length then has one
    /// plan once the largest batch has run, whatever the batches after it hold (a corpus of
    /// mixed sizes with batches of every total: one plan per image size, not one per size and
    /// batch bucket). The stride changes no value (the padding rows are never read:
    /// `packings_are_batch_invariant` packs the same images at several strides); it costs q,
    /// k and v memory for the largest batch in every forward.
    pub(super) fn stride_for(&self, n: usize) -> usize {
        head_stride(n).max(self.stride_floor.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Whether block `b` feeds the attention IEEE half (see [`attention_input_bound`]): only
    /// when a kernel that reads half is loaded.
    pub(super) fn attn_half(&self, b: &BlockW) -> bool {
        b.attn_f16 && (self.dev.has("attention_mma_f16") || self.dev.has("attention_mma_w4_f16"))
    }

    /// How the attention of the segments `cu` splits (for the forward and for reports alike):
    /// cuDNN takes the segments of at least `cudnn_min_len` tokens when libcudnn loaded and
    /// their runs plan, our kernels the others. Each segment's path follows from its own length,
    /// so the batch-invariant mode stays invariant. `stride`: q, k, v's tokens per head.
    pub(super) fn attention_split(&self, cu: &[usize], stride: usize) -> Result<Split, GpuError> {
        let merge = !self.dev.batch_invariant || self.dev.cudnn_batched;
        let mut runs = if self.dev.cudnn.is_some() {
            runs_of(cu, merge, self.dev.cudnn_min_len)
        } else {
            Vec::new()
        };
        if self.dev.cudnn_pow2 {
            runs = pow2_runs(runs);
        }
        let mut plans = self.cudnn_plans(&runs, stride);
        if self.dev.batch_invariant && plans.is_err() && runs.iter().any(|r| r.batch > 1) {
            // the single segments' plans give the same bits (one call a segment)
            runs = runs_of(cu, false, self.dev.cudnn_min_len);
            plans = self.cudnn_plans(&runs, stride);
        }
        Ok(match plans? {
            Some(ws_bytes) => Split {
                runs,
                ws_bytes,
                ours_below: self.dev.cudnn_min_len,
            },
            None => Split {
                runs: Vec::new(),
                ws_bytes: 0,
                ours_below: usize::MAX,
            },
        })
    }

    /// Builds (or finds) the plans of `runs` for the input types the blocks use and returns the
    /// largest workspace in bytes; `None` when our kernels take every segment instead (no
    /// runs, no cuDNN, or, in the fast mode, no plan: an error when cuDNN was forced or in the
    /// batch-invariant mode, where a fallback would depend on the batch).
    /// `stride`: q, k, v's tokens per head ([`head_stride`]).
    pub(super) fn cudnn_plans(
        &self,
        runs: &[Run],
        stride: usize,
    ) -> Result<Option<usize>, GpuError> {
        let Some(c) = &self.dev.cudnn else {
            return Ok(None);
        };
        if runs.is_empty() {
            return Ok(None);
        }
        let mut halves: Vec<bool> = self.w.blocks.iter().map(|b| self.attn_half(b)).collect();
        halves.sort_unstable();
        halves.dedup();
        let mut ws = 0usize;
        for r in runs {
            for &half in &halves {
                match c.prepare(self.sdpa_shape(r, stride, half)) {
                    Ok(bytes) => ws = ws.max(bytes),
                    // batch-invariant: no fallback that depends on the batch's other segments
                    Err(e) if self.dev.cudnn_forced || self.dev.batch_invariant => return Err(e),
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

    pub(super) fn sdpa_shape(&self, r: &Run, n: usize, half: bool) -> crate::cudnn::SdpaShape {
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

    /// Which attention runs for `grid_thw` (cuDNN, the built-in kernels, or cuDNN for the
    /// long segments and ours for the others), for reports.
    pub fn attention_engine(&self, grid_thw: &[Grid]) -> Result<String, GpuError> {
        let cu = geometry::cu_seqlens(grid_thw);
        let n = *cu.last().unwrap_or(&0);
        let split = self.attention_split(&cu, self.stride_for(n))?;
        let dnn = match (split.runs.is_empty(), &self.dev.cudnn) {
            (false, Some(c)) => Some(c.version),
            _ => None,
        };
        let below = split.ours_below;
        let tiles = tiles_of(&cu, MMA_BQ, below).len() / 4;
        let (k, _) = self.dev.attention_kernel(tiles * self.cfg.num_heads, true);
        Ok(match dnn {
            Some(v) if tiles == 0 => format!("cudnn {v}"),
            Some(v) => format!("cudnn {v}; {k} for segments under {below} tokens"),
            None => match &self.dev.cudnn_note {
                Some(why) => format!("{k} (cuDNN: {why})"),
                None => k.to_string(),
            },
        })
    }

    pub(super) fn geo_for_grids(
        &self,
        grid_thw: &[Grid],
        keep_host: bool,
    ) -> Result<Geo, GpuError> {
        self.geo_staged(grid_thw, keep_host, None)
    }

    /// [`Self::geo_for_grids`], its tables copied through `stage` (page-locked, at least
    /// [`geo_stage_len`] values, untouched until the forward is done) when given.
    pub(super) fn geo_staged(
        &self,
        grid_thw: &[Grid],
        keep_host: bool,
        stage: Option<&mut [f32]>,
    ) -> Result<Geo, GpuError> {
        let pos = geometry::positions(grid_thw, self.cfg.spatial_merge_size);
        let (cos, sin) = rope::tables::<f32>(
            &pos,
            self.cfg.head_dim(),
            self.cfg.rope_parameters.rope_theta,
        );
        self.geo(
            &cos,
            &sin,
            &geometry::cu_seqlens(grid_thw),
            keep_host,
            stage,
        )
    }

    /// The attention of block `i` on `ws.xn` (its norm1 output, in the qkv GEMM's input type):
    /// the fused qkv GEMM and its bias, the per-head q/k RMSNorm and rope (`qk_norm_rope`), the
    /// attention over `geo`'s segments (cuDNN or our kernels, never across a segment), and the
    /// projection GEMM into `ws.h` without its bias (the residual add takes it; IEEE half when
    /// `proj_out_f16`).
    pub(super) fn attention_dev(
        &self,
        i: usize,
        ws: &Ws,
        geo: &Geo,
        taps: Taps<'_, '_>,
    ) -> Result<(), GpuError> {
        let cfg = &self.cfg;
        let (n, d, heads, hd) = (geo.n, cfg.hidden_size, cfg.num_heads, cfg.head_dim());
        let w = &self.w.blocks[i];
        let dev = &self.dev;
        let name = |s: &str| format!("blocks.{i}.{s}");
        let qh = w.qkv_f16;
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
        // half q/k/v only for the tensor-core kernels (or cuDNN) that read them so; cuDNN and
        // our kernels read the same q, k, v when both run ([`GpuTower::attn_half`] holds only
        // when one of our `_f16` kernels is loaded, and a kernel of ours for every launch
        // size has its `_f16` variant in the bf16 build)
        let f16 = if geo.ntiles > 0 {
            att_kernel.ends_with("_f16") as i32
        } else {
            self.attn_half(w) as i32
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
                arg(geo.stride as i32),
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
        // The attention output is half when its inputs were (cuDNN, our `_f16` kernels). Both
        // paths write their segments' rows into one buffer: `att`, or cuDNN's half buffer when
        // cuDNN runs with half inputs and the projection wants bf16 (then converted into `att`
        // in one pass); otherwise one conversion in place when the projection wants the other
        // type.
        let att_half = f16 != 0;
        let dnn = !geo.runs.is_empty();
        let staged = dnn && att_half && !w.proj_f16;
        let out = if staged {
            geo.dnn_out
                .as_ref()
                .expect("allocated with cuDNN runs for half blocks")
        } else {
            &ws.att
        };
        if dnn {
            self.attention_cudnn(&ws.q, &ws.k, &ws.v, out, geo, att_half)?;
        }
        if geo.ntiles > 0 {
            if geo.ntiles > i32::MAX as usize || heads > 65535 {
                return Err(GpuError::Unsupported(format!(
                    "{} attention tiles x {heads} heads",
                    geo.ntiles
                )));
            }
            let (kernel, threads) = (att_kernel, att_threads);
            // the kernels' `n` is q, k, v's head stride
            dev.launch(
                kernel,
                (geo.ntiles as u32, heads as u32, 1),
                threads,
                &[
                    arg(ws.q.ptr),
                    arg(ws.k.ptr),
                    arg(ws.v.ptr),
                    arg(geo.tiles.ptr),
                    arg(out.ptr),
                    arg(geo.stride as i32),
                    arg(hi),
                    arg(scale_log2),
                ],
            )?;
        }
        if staged {
            let total = (n * d) as i64;
            let blocks = (n * d).div_ceil(256).clamp(1, 132 * 32) as u32;
            dev.launch(
                "half_to_bf16",
                (blocks, 1, 1),
                256,
                &[arg(out.ptr), arg(ws.att.ptr), arg(total)],
            )?;
        } else if (dnn || geo.ntiles > 0) && att_half != w.proj_f16 {
            let kernel = if att_half {
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
        dev.linear_to(
            &ws.att,
            &w.proj_w,
            &ws.h,
            half_or(w.proj_out_f16, Dt::F32),
            n,
            d,
            d,
        )
    }

    /// The attention of `geo.runs` through cuDNN, one call per run of equal segments; q, k, v
    /// head-major [H, stride, hd] (half when `half`, else bf16), the output [N, D] of the
    /// inputs' type into `out` (only the runs' rows).
    pub(super) fn attention_cudnn(
        &self,
        q: &DBuf,
        k: &DBuf,
        v: &DBuf,
        out: &DBuf,
        geo: &Geo,
        half: bool,
    ) -> Result<(), GpuError> {
        let c = self
            .dev
            .cudnn
            .as_ref()
            .expect("cuDNN runs imply a cuDNN handle");
        let (d, hd) = (self.cfg.hidden_size, self.cfg.head_dim());
        let ws = geo.dnn_ws.as_ref().map_or(0, |b| b.ptr);
        // Every element is 2 bytes (bf16 or half).
        for r in &geo.runs {
            let (qo, oo) = ((r.start * hd * 2) as u64, (r.start * d * 2) as u64);
            c.run(
                self.sdpa_shape(r, geo.stride, half),
                q.ptr + qo,
                k.ptr + qo,
                v.ptr + qo,
                out.ptr + oo,
                ws,
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_of_groups_consecutive_equal_segments() {
        let r = |start, batch, len| Run { start, batch, len };
        assert_eq!(
            runs_of(&[0, 4, 8, 12, 15, 15, 18, 22], true, 1),
            vec![r(0, 3, 4), r(12, 2, 3), r(18, 1, 4)]
        );
        assert_eq!(runs_of(&[0], true, 1), vec![]);
        assert_eq!(runs_of(&[0, 0, 5], true, 1), vec![r(0, 1, 5)]);
        // unmerged (batch-invariant): one run per non-empty segment
        assert_eq!(
            runs_of(&[0, 4, 8, 8, 12], false, 1),
            vec![r(0, 1, 4), r(4, 1, 4), r(8, 1, 4)]
        );
        // segments under min_len are left out, and no run spans one
        assert_eq!(
            runs_of(&[0, 4, 8, 11, 15, 19], true, 4),
            vec![r(0, 2, 4), r(11, 2, 4)]
        );
    }

    #[test]
    fn runs_are_cut_into_powers_of_two_covering_the_same_segments() {
        let r = |start, batch, len| Run { start, batch, len };
        assert_eq!(
            pow2_runs(vec![r(0, 13, 4), r(60, 1, 5), r(65, 2, 3), r(71, 7, 2)]),
            vec![
                r(0, 8, 4),
                r(32, 4, 4),
                r(48, 1, 4),
                r(60, 1, 5),
                r(65, 2, 3),
                r(71, 4, 2),
                r(79, 2, 2),
                r(83, 1, 2)
            ]
        );
        // every count up to 64: the same tokens, in order, at most 7 distinct batch sizes
        let mut sizes = std::collections::BTreeSet::new();
        for b in 1..=64 {
            let cut = pow2_runs(vec![r(10, b, 3)]);
            let mut at = 10;
            for c in &cut {
                assert!(
                    c.batch.is_power_of_two() && c.len == 3 && c.start == at,
                    "{b}: {cut:?}"
                );
                at += c.batch * c.len;
                sizes.insert(c.batch);
            }
            assert_eq!(at, 10 + 3 * b);
            assert!(
                cut.windows(2).all(|w| w[0].batch > w[1].batch),
                "{b}: {cut:?}"
            );
        }
        assert_eq!(sizes.len(), 7);
    }

    #[test]
    fn tiles_cover_exactly_the_segments_below_the_threshold() {
        // segments of 5, 2 and 9 tokens; tiles of at most 4 queries
        let cu = [0, 5, 7, 16];
        assert_eq!(
            tiles_of(&cu, 4, usize::MAX),
            vec![
                0, 5, 0, 4, 0, 5, 4, 5, 5, 7, 5, 7, 7, 16, 7, 11, 7, 16, 11, 15, 7, 16, 15, 16
            ]
        );
        // the 9-token segment left to cuDNN
        assert_eq!(
            tiles_of(&cu, 4, 9),
            vec![0, 5, 0, 4, 0, 5, 4, 5, 5, 7, 5, 7]
        );
        // the segments cuDNN takes and the tiles partition the tokens
        for min in [1, 3, 6, 10] {
            let mut covered = vec![0u8; 16];
            for r in runs_of(&cu, false, min) {
                covered[r.start..r.start + r.batch * r.len]
                    .iter_mut()
                    .for_each(|c| *c += 1);
            }
            for t in tiles_of(&cu, 4, min).chunks(4) {
                covered[t[2] as usize..t[3] as usize]
                    .iter_mut()
                    .for_each(|c| *c += 1);
            }
            assert!(covered.iter().all(|&c| c == 1), "min {min}: {covered:?}");
        }
    }
}
