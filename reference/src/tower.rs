//! The `Tower` trait: the vision tower as stages, implemented by every backend.
//!
//! Each stage takes and returns host f32 arrays, so a conformance tool can feed one backend's
//! stage input into another's. `forward` runs the whole tower over a packed batch; its default
//! body composes the stages (a backend overrides it to keep data on its device or in f64).

use crate::config::VisionConfig;
use crate::error::TowerError;
use crate::geometry::{self, Grid};
use crate::taps::TapSink;
use ndarray::{Array2, ArrayView2};
use std::time::Duration;

/// A queued forward (see [`QueuedTower::enqueue`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ticket(pub u64);

/// A finished queued forward.
#[derive(Debug)]
pub struct Finished {
    /// `[N/4, O]`, as [`Tower::forward`] returns them.
    pub embeddings: Array2<f32>,
    /// The device's own time for the forward (CUDA events around it), without the transfers
    /// and without the time it waited behind another forward.
    pub device: Duration,
    /// The copy of its pixels to the device (events around it): with the fill, the time a
    /// batch must be taken ahead of the forward before it ending.
    pub upload: Duration,
}

/// Forwards queued on a device: pixels staged in memory the device copies from (page-locked on
/// a GPU), uploaded, run and downloaded in order on the device while the host goes on. Up to
/// [`depth`](Self::depth) forwards may be queued at once on the tower, whoever queued them
/// (a batcher drives one tower from one worker); each is finished, in any order, by
/// [`finish`](Self::finish). The rows are the bits [`Tower::forward`] gives for the same batch.
pub trait QueuedTower: Send + Sync {
    /// Forwards that may be queued (enqueued and not yet finished) at once.
    fn depth(&self) -> usize;
    /// Sets aside the staging memory of one more queue slot for batches of up to `rows` patch
    /// rows now, so that no forward waits for an allocation (page-locked memory costs tens of
    /// ms per hundred MB); `true` when a slot is still without it: call again, as the batcher
    /// does after queueing its first forward, so that the next slot's allocation runs beside
    /// that forward instead of before it. A larger batch later still runs (its memory is then
    /// grown). The default sets nothing aside and returns `false`.
    fn reserve(&self, rows: usize) -> Result<bool, TowerError> {
        let _ = rows;
        Ok(false)
    }
    /// Queues the forward of a packed batch of `rows` patch rows with these grids: `fill` writes
    /// the `rows x patch_dim` pixel values (row-major, [`Tower::forward`]'s layout) into the
    /// tower's staging memory, then the upload, the forward and the download of the embeddings
    /// are queued, and this returns without waiting for them. An error when `depth` forwards are
    /// queued already, or for a batch [`Tower::forward`] would refuse.
    fn enqueue(
        &self,
        rows: usize,
        grid_thw: &[Grid],
        fill: &mut (dyn FnMut(&mut [f32]) + Send),
    ) -> Result<Ticket, TowerError>;
    /// Waits for a queued forward; its embeddings. A ticket is finished once.
    fn finish(&self, ticket: Ticket) -> Result<Finished, TowerError>;
}

pub trait Tower: Send + Sync {
    /// The config the weights were loaded for.
    fn config(&self) -> &VisionConfig;
    /// A short name for messages and tap metadata ("reference f32").
    fn describe(&self) -> String;

    /// The tower as a queue of asynchronous forwards, when it runs on a device of its own (a
    /// GPU): the batcher then prepares the next batch and hands out the last one's rows while a
    /// forward runs. `None` (the default) for towers whose forward is the host's own work.
    fn queued(&self) -> Option<&dyn QueuedTower> {
        None
    }

    /// Forwards this tower may hold at once: its queue's depth, or 1 (the forward itself).
    fn queue_depth(&self) -> usize {
        self.queued().map_or(1, |q| q.depth())
    }

    /// `[N, patch_dim]` pixel rows -> `[N, D]` (the Conv3d patch embedding).
    fn patch_embed(&self, pixel_values: ArrayView2<f32>) -> Result<Array2<f32>, TowerError>;
    /// The rope tables `(cos, sin)`, each `[N, head_dim]`, for a batch of grids.
    fn rope(&self, grid_thw: &[Grid]) -> Result<(Array2<f32>, Array2<f32>), TowerError>;
    /// Block `index` on `hidden` `[N, D]` with the rope tables and the attention segments
    /// `cu_seqlens` (`[0, ..., N]`). Emits the `blocks.{index}.*` taps and `blocks.{index}`.
    fn block(
        &self,
        index: usize,
        hidden: ArrayView2<f32>,
        cos: ArrayView2<f32>,
        sin: ArrayView2<f32>,
        cu_seqlens: &[usize],
        taps: Option<&mut dyn TapSink>,
    ) -> Result<Array2<f32>, TowerError>;
    /// `post_layernorm`: `[N, D]` -> `[N, D]`.
    fn post_norm(&self, hidden: ArrayView2<f32>) -> Result<Array2<f32>, TowerError>;
    /// The 2x2 Conv2d: `[N, D]` (merge blocks of consecutive rows) -> `[N/4, O]`.
    fn downsample(&self, hidden: ArrayView2<f32>) -> Result<Array2<f32>, TowerError>;
    /// The patch merger: `[G, O]` -> `[G, O]` embeddings. Emits the `merger.*` taps and `merger`.
    fn merger(
        &self,
        x: ArrayView2<f32>,
        taps: Option<&mut dyn TapSink>,
    ) -> Result<Array2<f32>, TowerError>;

    /// The whole tower on a packed batch: `pixel_values` `[N, patch_dim]`, one grid row
    /// `[t, h, w]` per image or video (N = sum of t*h*w). Returns the embeddings `[N/4, O]`.
    /// Every TAPS.md tap goes to `taps`, with a progress call after each step.
    fn forward(
        &self,
        pixel_values: ArrayView2<f32>,
        grid_thw: &[Grid],
        mut taps: Option<&mut dyn TapSink>,
    ) -> Result<Array2<f32>, TowerError> {
        let cfg = self.config();
        geometry::validate_pixels(cfg, pixel_values.nrows(), pixel_values.ncols(), grid_thw)?;
        let total = cfg.depth + 2;
        let mut x = self.patch_embed(pixel_values)?;
        emit(&mut taps, "patch_embed", x.view());
        let (cos, sin) = self.rope(grid_thw)?;
        emit(&mut taps, "rotary_pos_emb.cos", cos.view());
        emit(&mut taps, "rotary_pos_emb.sin", sin.view());
        progress(&mut taps, 1, total);
        let cu = geometry::cu_seqlens(grid_thw);
        for i in 0..cfg.depth {
            x = self.block(
                i,
                x.view(),
                cos.view(),
                sin.view(),
                &cu,
                reborrow(&mut taps),
            )?;
            progress(&mut taps, i + 2, total);
        }
        let x = self.post_norm(x.view())?;
        emit(&mut taps, "post_layernorm", x.view());
        let x = self.downsample(x.view())?;
        emit(&mut taps, "downsample", x.view());
        let out = self.merger(x.view(), reborrow(&mut taps))?;
        progress(&mut taps, total, total);
        Ok(out)
    }
}

/// A shorter-lived `Option<&mut dyn TapSink>` from a longer-lived one (to pass it on and
/// keep using it).
pub fn reborrow<'s>(taps: &'s mut Option<&mut dyn TapSink>) -> Option<&'s mut dyn TapSink> {
    match taps {
        Some(t) => Some(&mut **t),
        None => None,
    }
}

/// Hands `value` to the sink when there is one and it wants `name`.
pub fn emit(taps: &mut Option<&mut dyn TapSink>, name: &str, value: ArrayView2<f32>) {
    if let Some(sink) = reborrow(taps)
        && sink.wants(name)
    {
        let value = value.as_standard_layout();
        sink.tap(
            name,
            value.nrows(),
            value.ncols(),
            value.as_slice().expect("standard layout"),
        );
    }
}

/// Reports progress to the sink, if any.
pub fn progress(taps: &mut Option<&mut dyn TapSink>, done: usize, total: usize) {
    if let Some(sink) = reborrow(taps) {
        sink.progress(done, total);
    }
}
