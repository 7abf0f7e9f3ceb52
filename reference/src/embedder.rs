//! `Embedder`: the library entry point. Loads a checkpoint once, then turns batches of pixels
//! (or images, through `glm5v_prep`) into embeddings with their placeholder spans and prompts.

use crate::config::VisionConfig;
use crate::cpu::CpuTower;
use crate::error::EmbedError;
use crate::geometry::{self, Grid};
use crate::taps::{TapSink, WithProgress};
use crate::tower::Tower;
use crate::weights::TowerWeights;
use glm5v_prep::{ImageSource, PrepOptions};
use ndarray::{Array2, ArrayView2};
use std::path::Path;

/// Token strings of the prompt (UPSTREAM.md, pixel contract item 9).
pub use glm5v_prep::prompt::{BEGIN_OF_IMAGE, END_OF_IMAGE, IMAGE_TOKEN};

/// The float type the CPU tower computes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    /// Upstream's f32 path (the default).
    #[default]
    F32,
    /// Everything in f64: slower, the tighter oracle.
    F64,
    /// The GPU's bf16 policy on the CPU ([`CpuTower::new_bf16`]): bf16 weights and product
    /// inputs, f32 accumulation and f32 everywhere else; on the CPU's matrix unit (AMX) or its
    /// bf16 dot products (AVX512-BF16) where it has them.
    Bf16,
}

impl Precision {
    /// The name the CLI takes and tap dumps record: `f32`, `f64` or `bf16`.
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F64 => "f64",
            Precision::Bf16 => "bf16",
        }
    }

    /// The precision named `s` ([`Precision::name`]).
    pub fn parse(s: &str) -> Option<Precision> {
        [Precision::F32, Precision::F64, Precision::Bf16]
            .into_iter()
            .find(|p| p.name() == s)
    }
}

/// Which threads run the forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Threads {
    /// rayon's global pool (its size follows `RAYON_NUM_THREADS`, else the core count).
    #[default]
    Global,
    /// A pool of this many threads owned by the embedder.
    Count(usize),
}

/// How to load and run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EmbedOptions {
    pub precision: Precision,
    pub threads: Threads,
}

/// One input's place in the output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemSpan {
    /// `[t, h, w]` in patches.
    pub grid: Grid,
    /// First output row (token) of this input.
    pub token_offset: usize,
    /// Rows of this input: t*h*w / merge^2, one per `<|image|>` placeholder.
    pub token_count: usize,
    /// The prompt text whose `<|image|>` placeholders these rows replace.
    pub prompt: String,
}

/// Embeddings `[tokens, out_hidden]` of a batch, and where each input's rows are.
#[derive(Debug, Clone)]
pub struct Embeddings {
    pub embeddings: Array2<f32>,
    pub items: Vec<ItemSpan>,
}

/// Loads the tower once; embeds from any number of threads (`Send + Sync`).
///
/// ```
/// use glm5v_reference::{EmbedOptions, Embedder, Precision, Threads};
/// use ndarray::Array2;
///
/// // The tiny test checkpoint of this crate (depth 2, hidden 64, out 96).
/// let dir = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/tiny"));
/// let options = EmbedOptions { precision: Precision::F32, threads: Threads::Count(2) };
/// let embedder = Embedder::load(dir, options)?;
///
/// // One 4x6-patch image: 24 rows of 1176 pixel values, as upstream's processor makes them.
/// let grid = [[1, 4, 6]];
/// let pixels = Array2::from_shape_fn((24, 1176), |(r, c)| ((r * 1176 + c) % 17) as f32 / 8.0 - 1.0);
/// let mut steps = 0;
/// let mut on_progress = |_done: usize, _total: usize| steps += 1;
/// let out = embedder.embed_pixels_with(pixels.view(), &grid, None, Some(&mut on_progress))?;
///
/// assert_eq!(out.embeddings.dim(), (6, 96)); // 24 patches / (2x2 merge) = 6 tokens
/// assert_eq!((out.items[0].token_offset, out.items[0].token_count), (0, 6));
/// assert!(out.items[0].prompt.starts_with("<|begin_of_image|><|image|>"));
/// assert_eq!(steps, 2 + 2); // embed, two blocks, head
/// # Ok::<(), glm5v_reference::EmbedError>(())
/// ```
pub struct Embedder {
    tower: Box<dyn Tower>,
    pool: Option<rayon::ThreadPool>,
    warnings: Vec<String>,
    prep: PrepOptions,
}

impl Embedder {
    /// Loads the checkpoint in `dir` (config.json + safetensors, TAPS.md section 1).
    /// The image processor's options come from the same directory
    /// (`preprocessor_config.json` when present, else upstream's defaults).
    pub fn load(dir: &Path, options: EmbedOptions) -> Result<Self, EmbedError> {
        let pool = build_pool(options.threads)?;
        let prep = PrepOptions::with_model_dir(dir)?;
        // Loading converts in parallel: do it in the embedder's pool too.
        let run = || -> Result<(Box<dyn Tower>, Vec<String>), EmbedError> {
            Ok(match options.precision {
                Precision::F32 | Precision::Bf16 => {
                    let bf16 = options.precision == Precision::Bf16;
                    let t = CpuTower::<f32>::load(dir, bf16)?;
                    let warnings = t.warnings().to_vec();
                    (Box::new(t), warnings)
                }
                Precision::F64 => {
                    let mut w = TowerWeights::<f64>::load(dir)?;
                    let warnings = std::mem::take(&mut w.warnings);
                    (Box::new(CpuTower::new(w)), warnings)
                }
            })
        };
        let (tower, warnings) = match &pool {
            Some(p) => p.install(run)?,
            None => run()?,
        };
        Ok(Self {
            tower,
            pool,
            warnings,
            prep,
        })
    }

    /// Wraps an already built tower (any backend), with upstream's default image processor.
    pub fn from_tower(tower: Box<dyn Tower>, threads: Threads) -> Result<Self, EmbedError> {
        Ok(Self {
            tower,
            pool: build_pool(threads)?,
            warnings: Vec::new(),
            prep: PrepOptions::default(),
        })
    }

    /// The image processor's options (from the model directory).
    pub fn prep_options(&self) -> &PrepOptions {
        &self.prep
    }

    /// Replaces the image processor's options (e.g. `alpha: white`, another token budget).
    pub fn set_prep_options(&mut self, prep: PrepOptions) {
        self.prep = prep;
    }

    /// Decodes and preprocesses images (`glm5v_prep::prep_images`, upstream's image
    /// processor) and embeds them as one packed batch; one span per image, in order.
    pub fn embed_images(&self, sources: &[ImageSource]) -> Result<Embeddings, EmbedError> {
        self.embed_images_with(sources, None, None)
    }

    /// As [`embed_images`](Self::embed_images), with taps and a progress callback.
    pub fn embed_images_with(
        &self,
        sources: &[ImageSource],
        taps: Option<&mut dyn TapSink>,
        on_progress: Option<&mut (dyn FnMut(usize, usize) + Send)>,
    ) -> Result<Embeddings, EmbedError> {
        let batch = self.install(|| glm5v_prep::prep_images(sources, &self.prep))?;
        let rows = batch.pixel_values.len() / batch.patch_dim.max(1);
        let pixels = ArrayView2::from_shape((rows, batch.patch_dim), &batch.pixel_values)
            .expect("prep returns whole rows");
        let grids: Vec<Grid> = batch
            .image_grid_thw
            .iter()
            .map(|g| g.map(|v| v as usize))
            .collect();
        self.embed_pixels_with(pixels, &grids, taps, on_progress)
    }

    /// Images, then video files (`glm5v_prep::prep_video_file`: decoded with FFmpeg, sampled at
    /// the video processor's fps and paired as upstream's `Glm5NextVideoProcessor` does with
    /// torchcodec), embedded as one packed batch; one span per image, then one per video (its
    /// frame pairs' rows in order). The timestamps a video's prompt needs come from
    /// `glm5v_prep::plan_video` (metadata only). Video files need glm5v-prep's `video` feature
    /// (this crate's `video`); without it they fail with `PrepError::VideoSupport`.
    pub fn embed_media(
        &self,
        images: &[ImageSource],
        videos: &[&Path],
    ) -> Result<Embeddings, EmbedError> {
        let batch = self.install(|| -> Result<_, glm5v_prep::PrepError> {
            let mut b = if images.is_empty() {
                glm5v_prep::PixelBatch::new(self.prep.image.patch_dim())
            } else {
                glm5v_prep::prep_images(images, &self.prep)?
            };
            for v in videos {
                glm5v_prep::push_video(&mut b, &glm5v_prep::prep_video_file(v, &self.prep)?);
            }
            Ok(b)
        })?;
        let mut values = batch.pixel_values;
        values.extend_from_slice(&batch.pixel_values_videos);
        let rows = values.len() / batch.patch_dim.max(1);
        let pixels = ArrayView2::from_shape((rows, batch.patch_dim), &values)
            .expect("prep returns whole rows");
        let grids: Vec<Grid> = batch
            .image_grid_thw
            .iter()
            .chain(&batch.video_grid_thw)
            .map(|g| g.map(|v| v as usize))
            .collect();
        self.embed_pixels_with(pixels, &grids, None, None)
    }

    pub fn tower(&self) -> &dyn Tower {
        self.tower.as_ref()
    }

    pub fn config(&self) -> &VisionConfig {
        self.tower.config()
    }

    /// Load-time warnings (non-finite weights), each naming its tensor.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Runs `f` in the embedder's thread pool (or directly, with the global pool).
    pub fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        match &self.pool {
            Some(p) => p.install(f),
            None => f(),
        }
    }

    /// Embeds a pre-made pixel batch: `pixel_values` `[N, patch_dim]` and its grids, in the
    /// layout of upstream's processor.
    pub fn embed_pixels(
        &self,
        pixel_values: ArrayView2<f32>,
        grid_thw: &[Grid],
    ) -> Result<Embeddings, EmbedError> {
        self.embed_pixels_with(pixel_values, grid_thw, None, None)
    }

    /// As [`embed_pixels`](Self::embed_pixels), handing taps to `taps` and calling
    /// `on_progress(done, total)` after patch embedding, after each block and after the head.
    pub fn embed_pixels_with(
        &self,
        pixel_values: ArrayView2<f32>,
        grid_thw: &[Grid],
        taps: Option<&mut dyn TapSink>,
        on_progress: Option<&mut (dyn FnMut(usize, usize) + Send)>,
    ) -> Result<Embeddings, EmbedError> {
        let embeddings = match on_progress {
            Some(cb) => {
                let mut sink = WithProgress {
                    inner: taps,
                    on_progress: cb,
                };
                self.install(|| self.tower.forward(pixel_values, grid_thw, Some(&mut sink)))?
            }
            None => self.install(|| self.tower.forward(pixel_values, grid_thw, taps))?,
        };
        let items = spans(self.config(), grid_thw);
        Ok(Embeddings { embeddings, items })
    }
}

fn build_pool(threads: Threads) -> Result<Option<rayon::ThreadPool>, EmbedError> {
    match threads {
        Threads::Global => Ok(None),
        Threads::Count(n) => rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .thread_name(|i| format!("glm5v-ref-{i}"))
            .build()
            .map(Some)
            .map_err(|e| EmbedError::Threads {
                threads: n,
                reason: e.to_string(),
            }),
    }
}

/// The prompt of one image (or one video frame pair) of grid `h x w`.
pub fn image_prompt(h: usize, w: usize, merge: usize) -> String {
    glm5v_prep::prompt::image_block_text([1, h, w], merge)
}

/// Output spans of the inputs of a batch, in order. A grid with t > 1 (a video given as
/// pixels) gets one image prompt per frame pair; its `N seconds` captions need the frame
/// timestamps, which only the video path of `glm5v_prep` knows.
pub fn spans(cfg: &VisionConfig, grid_thw: &[Grid]) -> Vec<ItemSpan> {
    let unit = cfg.merge_unit();
    let mut offset = 0;
    grid_thw
        .iter()
        .map(|&grid @ [t, h, w]| {
            let count = t * h * w / unit;
            let prompt = image_prompt(h, w, cfg.spatial_merge_size).repeat(t);
            let span = ItemSpan {
                grid,
                token_offset: offset,
                token_count: count,
                prompt,
            };
            offset += count;
            span
        })
        .collect()
}

/// Checks a pixel batch without running it (the same checks `embed_pixels` makes).
pub fn validate_batch(
    cfg: &VisionConfig,
    pixel_values: ArrayView2<f32>,
    grid_thw: &[Grid],
) -> Result<(), EmbedError> {
    geometry::validate_pixels(cfg, pixel_values.nrows(), pixel_values.ncols(), grid_thw)
        .map_err(|e| EmbedError::Tower(e.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_follow_the_grids() {
        let cfg = VisionConfig::default();
        let s = spans(&cfg, &[[1, 4, 6], [2, 2, 2]]);
        assert_eq!((s[0].token_offset, s[0].token_count), (0, 6));
        assert_eq!((s[1].token_offset, s[1].token_count), (6, 2));
        assert_eq!(s[0].prompt.matches(IMAGE_TOKEN).count(), 6);
        assert_eq!(s[1].prompt.matches(BEGIN_OF_IMAGE).count(), 2);
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Embedder>();
    }
}
