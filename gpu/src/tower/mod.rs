//! `GpuTower`: the vision tower on one CUDA device, implementing the reference crate's
//! [`Tower`] trait with the same stages and taps.
//!
//! One file per stage, as the reference crate splits the CPU forward: `weights` (the resident
//! weights and the block workspace), `attention` (geometry, cuDNN plans, a block's attention),
//! `block` (the row kernels, SwiGLU, a block), `merger` (post_layernorm, downsample, merger),
//! `graphs` (the forward as CUDA graphs, one per segment layout, in a bounded cache), `queue`
//! (forwards queued with page-locked staging and overlapped transfers, for the batcher); this file
//! holds the types, the patch embedding, the forward that chains the stages on the device, and
//! the [`Tower`] impl.

mod attention;
mod block;
mod graphs;
mod merger;
mod queue;
mod weights;

pub use graphs::{GRAPH_TOKENS_DEFAULT, GRAPHS_DEFAULT, GraphLimits, GraphStats};

use crate::device::{DBuf, Dev, DeviceInfo, Dt, arg};
use crate::error::GpuError;
use attention::Geo;
use glm5v_reference::geometry::{self, Grid, check_cols, check_shape};
use glm5v_reference::kernels::rope;
use glm5v_reference::tower::progress;
use glm5v_reference::{InputError, QueuedTower, TapSink, Tower, TowerError, VisionConfig};
use graphs::Graphs;
use ndarray::{Array2, ArrayView2};
use std::sync::Mutex;
use weights::Weights;

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
    /// The CUDA device (its ordinal among the visible ones; 0 by default).
    pub device: usize,
}

impl GpuOptions {
    /// `precision` on device 0.
    pub fn new(precision: Precision) -> Self {
        Self {
            precision,
            device: 0,
        }
    }
}

/// The tower resident on a CUDA device (weights uploaded once at load).
pub struct GpuTower {
    cfg: VisionConfig,
    precision: Precision,
    /// Serialises work on the one stream and cuBLAS handle; holds the graph cache (declared
    /// before `dev`: the graphs are destroyed before the kernels' module and the handles).
    lock: Mutex<Graphs>,
    /// The queued forwards' streams, events and staging memory (declared before `dev`, as
    /// `lock`).
    queue: Mutex<queue::Queue>,
    dev: Dev,
    w: Weights,
    /// Bytes of weights on the device.
    weight_bytes: usize,
    /// The largest head stride of q, k, v used under cuDNN so far ([`GpuTower::stride_for`]).
    stride_floor: std::sync::atomic::AtomicUsize,
    warnings: Vec<String>,
}

type Taps<'a, 'b> = &'a mut Option<&'b mut dyn TapSink>;

fn wants(taps: &Option<&mut dyn TapSink>, name: &str) -> bool {
    taps.as_deref().is_some_and(|s| s.wants(name))
}

/// `Dt::F16` when a stage runs in IEEE half (proven in range by `half_bounds`), else `other`.
fn half_or(h: bool, other: Dt) -> Dt {
    if h { Dt::F16 } else { other }
}

impl GpuTower {
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

    fn guard(&self) -> std::sync::MutexGuard<'_, Graphs> {
        self.lock.lock().unwrap_or_else(|p| p.into_inner())
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

    /// The whole forward on device-resident pixels `px` (f32 [N, patch_dim]); returns the
    /// embeddings on the device (f32 [G, O]). No host round trip unless a tap is wanted.
    fn forward_dev(&self, px: &DBuf, geo: &Geo, taps: Taps<'_, '_>) -> Result<DBuf, GpuError> {
        let cfg = &self.cfg;
        let (n, d) = (geo.n, cfg.hidden_size);
        let total = cfg.depth + 2;
        let ws = self.ws(n, geo.stride, taps)?;
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
        let mut st = self.guard();
        let n = pixel_values.nrows();
        let g = n / cfg.merge_unit();
        if taps.is_none()
            && let Some(i) = self.graph_for(&mut st, grid_thw, n)?
        {
            let px = pixel_values.as_standard_layout();
            self.replay(&mut st, i, Some(px.as_slice().expect("contiguous")))?;
            let r = self.download2(st.output(i), g, cfg.out_hidden_size);
            self.dev.sync("forward (graph)")?;
            return r;
        }
        let geo = self.geo_for_grids(grid_thw, taps.is_some())?;
        let px = self.upload_pixels(pixel_values)?;
        let out = self.forward_dev(&px, &geo, &mut taps)?;
        let r = self.download2(&out, g, cfg.out_hidden_size);
        self.dev.sync("forward")?;
        r
    }

    /// Times the device forward (pixels already on the device, no taps) with CUDA events:
    /// `warmup` untimed runs, then `iters` timed ones. Returns each run's milliseconds. With
    /// graphs on, the second warm-up captures this layout's graph and the timed runs replay it
    /// (at least two warm-ups are run then).
    pub fn time_forward(
        &self,
        pixel_values: ArrayView2<f32>,
        grid_thw: &[Grid],
        warmup: usize,
        iters: usize,
    ) -> Result<Vec<f64>, GpuError> {
        let cfg = &self.cfg;
        geometry::validate_pixels(cfg, pixel_values.nrows(), pixel_values.ncols(), grid_thw)?;
        let mut st = self.guard();
        let n = pixel_values.nrows();
        let geo = self.geo_for_grids(grid_thw, false)?;
        let px = self.upload_pixels(pixel_values)?;
        let mut none: Option<&mut dyn TapSink> = None;
        let mut graph = None;
        let host = pixel_values.as_standard_layout();
        for _ in 0..warmup.max(if st.limits().entries > 0 { 2 } else { 0 }) {
            match self.graph_for(&mut st, grid_thw, n)? {
                Some(i) => {
                    let p = host.as_slice().expect("contiguous");
                    self.replay(&mut st, i, Some(p))?;
                    graph = Some(i);
                }
                None => drop(self.forward_dev(&px, &geo, &mut none)?),
            }
        }
        self.dev.sync("warm-up")?;
        let mut times = Vec::with_capacity(iters);
        for _ in 0..iters {
            let (e0, e1) = (self.dev.event()?, self.dev.event()?);
            e0.record(&self.dev.stream)
                .map_err(|e| GpuError::cuda("cuEventRecord", e))?;
            let out = match graph {
                Some(i) => {
                    self.replay(&mut st, i, None)?;
                    None
                }
                None => Some(self.forward_dev(&px, &geo, &mut none)?),
            };
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
    fn queued(&self) -> Option<&dyn QueuedTower> {
        queue::queue_enabled().then_some(self as &dyn QueuedTower)
    }

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
        let geo = self.geo(&cos.to_owned(), &sin.to_owned(), cu_seqlens, false, None)?;
        let ws = self.ws(n, geo.stride, &taps)?;
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
