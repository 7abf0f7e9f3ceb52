//! `glm5v.Embedder`: a checkpoint loaded once (`glm5v_reference::Embedder`), images in,
//! embeddings out, with the GIL released during preprocessing and the forward.

use crate::errors::{embed_err, prep_err, raise};
use crate::inputs::extract;
use crate::processor::prep_items;
use crate::stream::{EmbedStream, PoolTower};
use glm5v_prep::PrepOptions;
use glm5v_reference::{
    BatcherOptions, EmbedOptions, Embedder, Grid, Precision, TapFilter, TapMap, Threads,
};
use ndarray::ArrayView2;
use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray2};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyIterator};
use std::sync::Arc;

/// One input's place in the output: `(grid, token_offset, token_count, prompt)`.
type Span = ([usize; 3], usize, usize, String);

/// What `embed` returns: embeddings, spans, and the taps `(name, array)` when asked.
type EmbedOut<'py> = (
    Bound<'py, PyAny>,
    Vec<Span>,
    Vec<(String, Bound<'py, PyAny>)>,
);

#[pyclass(frozen, module = "glm5v._glm5v")]
pub struct Embed {
    /// Shared with the batchers of `embed_many` streams (each runs on threads of its own).
    inner: Arc<Embedder>,
    prep: PrepOptions,
    precision: &'static str,
}

fn parse_precision(p: &str) -> PyResult<Precision> {
    let alias = match p {
        "float32" => "f32",
        "float64" => "f64",
        "bfloat16" => "bf16",
        other => other,
    };
    Precision::parse(alias).ok_or_else(|| {
        raise(
            "OptionsError",
            format!(
                "precision {p:?} is not available on the CPU backend (it has \"f32\", \"f64\" and \"bf16\")"
            ),
        )
    })
}

impl Embed {
    #[cfg(feature = "gpu")]
    fn new_gpu(
        py: Python<'_>,
        model_dir: std::path::PathBuf,
        precision: &str,
        threads: Option<usize>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        use glm5v_gpu::{GpuOptions, GpuTower, Precision as GpuPrecision};
        let (precision, name) = match precision {
            "bf16" | "bfloat16" => (GpuPrecision::Bf16, "bf16"),
            "f32" | "float32" => (GpuPrecision::F32, "f32"),
            other => {
                return Err(raise(
                    "OptionsError",
                    format!(
                        "precision {other:?} is not available on the GPU backend (it has \"bf16\" and \"f32\")"
                    ),
                ));
            }
        };
        let threads = match threads {
            None => Threads::Global,
            Some(0) => {
                return Err(raise(
                    "OptionsError",
                    "threads must be positive (or None for the global pool)".into(),
                ));
            }
            Some(n) => Threads::Count(n),
        };
        let prep = crate::options::build(Some(model_dir.clone()), options, false)?;
        let tower = crate::pool::detached(py, || {
            GpuTower::load(&model_dir, GpuOptions::new(precision))
        })?
        .map_err(|e| {
            raise(
                "ModelError",
                format!("--backend gpu: {}: {e}", model_dir.display()),
            )
        })?;
        let mut inner = Embedder::from_tower(Box::new(tower), threads).map_err(embed_err)?;
        inner.set_prep_options(prep.clone());
        Ok(Embed {
            inner: Arc::new(inner),
            prep,
            precision: name,
        })
    }

    #[cfg(not(feature = "gpu"))]
    fn new_gpu(
        _py: Python<'_>,
        _model_dir: std::path::PathBuf,
        _precision: &str,
        _threads: Option<usize>,
        _options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        Err(raise(
            "OptionsError",
            "backend \"gpu\" is not in this build: build the wheel with the `gpu` feature \
             (maturin build --release --features gpu, in python/)"
                .into(),
        ))
    }

    fn run<'py>(
        &self,
        py: Python<'py>,
        pixels: ArrayView2<'_, f32>,
        grids: &[Grid],
        taps: bool,
    ) -> PyResult<EmbedOut<'py>> {
        let inner = &self.inner;
        let (emb, tapmap) = crate::pool::detached(py, || {
            let mut sink = TapMap::new(TapFilter::all());
            let e = if taps {
                inner.embed_pixels_with(pixels, grids, Some(&mut sink), None)
            } else {
                inner.embed_pixels(pixels, grids)
            };
            e.map(|e| (e, sink))
        })?
        .map_err(embed_err)?;
        let (rows, cols) = emb.embeddings.dim();
        let (flat, _) = emb.embeddings.into_raw_vec_and_offset();
        let arr = PyArray1::from_vec(py, flat)
            .reshape([rows, cols])?
            .into_any();
        let spans = emb
            .items
            .into_iter()
            .map(|s| (s.grid, s.token_offset, s.token_count, s.prompt))
            .collect();
        let mut out_taps = Vec::new();
        for (name, t) in tapmap.taps {
            let a = PyArray1::from_vec(py, t.data).reshape([t.rows, t.cols])?;
            out_taps.push((name, a.into_any()));
        }
        Ok((arr, spans, out_taps))
    }
}

#[pymethods]
impl Embed {
    /// `Embed(model_dir, precision="f32", threads=None, options=None, backend="cpu")`.
    #[new]
    #[pyo3(signature = (model_dir, precision="f32", threads=None, options=None, backend="cpu"))]
    fn new(
        py: Python<'_>,
        model_dir: std::path::PathBuf,
        precision: &str,
        threads: Option<usize>,
        options: Option<&Bound<'_, PyDict>>,
        backend: &str,
    ) -> PyResult<Self> {
        if backend == "gpu" {
            return Self::new_gpu(py, model_dir, precision, threads, options);
        }
        if backend != "cpu" {
            return Err(raise(
                "OptionsError",
                format!("backend {backend:?}: expected \"cpu\" or \"gpu\""),
            ));
        }
        let precision = parse_precision(precision)?;
        let threads = match threads {
            None => Threads::Global,
            Some(0) => {
                return Err(raise(
                    "OptionsError",
                    "threads must be positive (or None for the global pool)".into(),
                ));
            }
            Some(n) => Threads::Count(n),
        };
        let prep = crate::options::build(Some(model_dir.clone()), options, false)?;
        let eo = EmbedOptions { precision, threads };
        let mut inner =
            crate::pool::detached(py, || Embedder::load(&model_dir, eo))?.map_err(embed_err)?;
        inner.set_prep_options(prep.clone());
        Ok(Embed {
            inner: Arc::new(inner),
            prep,
            precision: precision.name(),
        })
    }

    #[getter]
    fn precision(&self) -> &'static str {
        self.precision
    }

    /// Whether this build has the CUDA backend (`--features gpu`).
    #[staticmethod]
    fn has_gpu() -> bool {
        cfg!(feature = "gpu")
    }

    /// The backend and tower in words.
    fn describe(&self) -> String {
        self.inner.tower().describe()
    }

    /// The checkpoint's vision config as JSON-ish text (`Debug` of it).
    fn config_repr(&self) -> String {
        format!("{:?}", self.inner.config())
    }

    /// `(out_hidden_size, spatial_merge_size, depth)`.
    fn dims(&self) -> (usize, usize, usize) {
        let c = self.inner.config();
        (c.out_hidden_size, c.spatial_merge_size, c.depth)
    }

    fn warnings(&self) -> Vec<String> {
        self.inner.warnings().to_vec()
    }

    fn options_json(&self) -> String {
        crate::options::to_json(&self.prep, false)
    }

    /// Images -> `(embeddings, pixel grids, spans, taps)`.
    #[pyo3(signature = (items, taps=false))]
    fn embed<'py>(
        &self,
        py: Python<'py>,
        items: &Bound<'py, PyAny>,
        taps: bool,
    ) -> PyResult<EmbedOut<'py>> {
        let items = extract(items)?;
        let prep = &self.prep;
        let b = crate::pool::detached(py, || prep_items(&items, prep))?.map_err(prep_err)?;
        let rows = b.pixel_values.len() / b.patch_dim.max(1);
        let view = ArrayView2::from_shape((rows, b.patch_dim), &b.pixel_values)
            .expect("prep returns whole rows");
        let grids: Vec<Grid> = b
            .image_grid_thw
            .iter()
            .map(|g| g.map(|v| v as usize))
            .collect();
        let (emb, spans, mut out_taps) = self.run(py, view, &grids, taps)?;
        if taps {
            // the dump's inputs too (TAPS.md section 2), so that it is complete on its own
            let dim = b.patch_dim;
            let pv = PyArray1::from_vec(py, b.pixel_values).reshape([rows, dim])?;
            out_taps.push(("pixel_values".to_string(), pv.into_any()));
        }
        Ok((emb, spans, out_taps))
    }

    /// A pixel batch (`pixel_values` [N, D] float32 and its grids) -> as `embed`.
    #[pyo3(signature = (pixel_values, grid_thw, taps=false))]
    fn embed_pixels<'py>(
        &self,
        py: Python<'py>,
        pixel_values: PyReadonlyArray2<'py, f32>,
        grid_thw: Vec<[usize; 3]>,
        taps: bool,
    ) -> PyResult<EmbedOut<'py>> {
        // a copy: another Python thread may write to the array while the GIL is released
        let owned = pixel_values.as_array().to_owned();
        self.run(py, owned.view(), &grid_thw, taps)
    }

    /// Inputs (an iterable of tagged tuples, see `stream.rs`) -> a stream of per-input results
    /// in input order, through a batcher of forwards of at most `batch_tokens` merged tokens.
    /// At most `4 * batch_tokens` tokens and `window_items` inputs are held at a time.
    #[pyo3(signature = (items, batch_tokens, decode_threads=2, window_items=256))]
    fn embed_many(
        &self,
        items: &Bound<'_, PyAny>,
        batch_tokens: usize,
        decode_threads: usize,
        window_items: usize,
    ) -> PyResult<EmbedStream> {
        if batch_tokens == 0 {
            return Err(raise(
                "OptionsError",
                "batch_tokens must be at least 1".into(),
            ));
        }
        if decode_threads == 0 {
            return Err(raise(
                "OptionsError",
                "decode_threads must be at least 1".into(),
            ));
        }
        let iter = PyIterator::from_object(items)?.unbind();
        let tower = PoolTower(self.inner.clone());
        let mut worker =
            Embedder::from_tower(Box::new(tower), Threads::Global).map_err(embed_err)?;
        worker.set_prep_options(self.prep.clone());
        let options = BatcherOptions::new(batch_tokens, decode_threads);
        let window = (batch_tokens.saturating_mul(4), window_items.max(1));
        EmbedStream::start(Arc::new(worker), iter, options, window)
    }
}
