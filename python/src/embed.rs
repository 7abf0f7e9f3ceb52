//! `glm5v.Embedder`: a checkpoint loaded once (`glm5v_reference::Embedder`), images in,
//! embeddings out, with the GIL released during preprocessing and the forward.

use crate::errors::{embed_err, prep_err, raise};
use crate::inputs::extract;
use crate::processor::prep_items;
use glm5v_prep::PrepOptions;
use glm5v_reference::{EmbedOptions, Embedder, Grid, Precision, TapFilter, TapMap, Threads};
use ndarray::ArrayView2;
use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray2};
use pyo3::prelude::*;
use pyo3::types::PyDict;

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
    inner: Embedder,
    prep: PrepOptions,
    precision: &'static str,
}

fn parse_precision(p: &str) -> PyResult<(Precision, &'static str)> {
    match p {
        "f32" | "float32" => Ok((Precision::F32, "f32")),
        "f64" | "float64" => Ok((Precision::F64, "f64")),
        other => Err(raise(
            "OptionsError",
            format!(
                "precision {other:?} is not available on the CPU backend (it has \"f32\" and \"f64\")"
            ),
        )),
    }
}

impl Embed {
    fn run<'py>(
        &self,
        py: Python<'py>,
        pixels: ArrayView2<'_, f32>,
        grids: &[Grid],
        taps: bool,
    ) -> PyResult<EmbedOut<'py>> {
        let inner = &self.inner;
        let (emb, tapmap) = py
            .detach(|| {
                let mut sink = TapMap::new(TapFilter::all());
                let e = if taps {
                    inner.embed_pixels_with(pixels, grids, Some(&mut sink), None)
                } else {
                    inner.embed_pixels(pixels, grids)
                };
                e.map(|e| (e, sink))
            })
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
    /// `Embed(model_dir, precision="f32", threads=None, options=None)`.
    #[new]
    #[pyo3(signature = (model_dir, precision="f32", threads=None, options=None))]
    fn new(
        py: Python<'_>,
        model_dir: std::path::PathBuf,
        precision: &str,
        threads: Option<usize>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let (precision, pname) = parse_precision(precision)?;
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
        let mut inner = py
            .detach(|| Embedder::load(&model_dir, eo))
            .map_err(embed_err)?;
        inner.set_prep_options(prep.clone());
        Ok(Embed {
            inner,
            prep,
            precision: pname,
        })
    }

    #[getter]
    fn precision(&self) -> &'static str {
        self.precision
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
        let b = py.detach(|| prep_items(&items, prep)).map_err(prep_err)?;
        let rows = b.pixel_values.len() / b.patch_dim.max(1);
        let view = ArrayView2::from_shape((rows, b.patch_dim), &b.pixel_values)
            .expect("prep returns whole rows");
        let grids: Vec<Grid> = b
            .image_grid_thw
            .iter()
            .map(|g| g.map(|v| v as usize))
            .collect();
        self.run(py, view, &grids, taps)
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
        let view = pixel_values.as_array();
        self.run(py, view, &grid_thw, taps)
    }
}
