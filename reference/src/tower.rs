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

pub trait Tower: Send + Sync {
    /// The config the weights were loaded for.
    fn config(&self) -> &VisionConfig;
    /// A short name for messages and tap metadata ("reference f32").
    fn describe(&self) -> String;

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
