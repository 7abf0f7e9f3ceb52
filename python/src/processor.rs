//! The image and video processors: `glm5v_prep` with the GIL released.

use crate::errors::prep_err;
use crate::inputs::{Items, extract};
use glm5v_prep::prompt::{self, VideoPrompt};
use glm5v_prep::{PixelBatch, PrepError, PrepOptions};
use numpy::{PyArray1, PyArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rayon::prelude::*;

/// Preprocesses a call's images in order: the encoded files in one parallel
/// `glm5v_prep::prep_images` batch, the pixel arrays with `preprocess_rgb`, then the rows put
/// back in call order (no copy when every input is a file).
pub fn prep_items(items: &Items, opts: &PrepOptions) -> Result<PixelBatch, PrepError> {
    let dim = opts.image.patch_dim();
    if items.rgbs.is_empty() {
        return glm5v_prep::prep_images(&items.srcs, opts);
    }
    let (enc, arrays) = rayon::join(
        || {
            if items.srcs.is_empty() {
                Ok(PixelBatch::new(dim))
            } else {
                glm5v_prep::prep_images(&items.srcs, opts)
            }
        },
        || {
            items
                .rgbs
                .par_iter()
                .map(|(_, px)| glm5v_prep::preprocess_rgb(&px.rgb(), opts))
                .collect::<Result<Vec<_>, _>>()
        },
    );
    let (enc, arrays) = (enc?, arrays?);
    // Where each encoded image's rows start in `enc`.
    let mut starts = Vec::with_capacity(enc.image_grid_thw.len() + 1);
    let mut at = 0usize;
    for g in &enc.image_grid_thw {
        starts.push(at);
        at += (g[0] * g[1] * g[2]) as usize * dim;
    }
    starts.push(at);
    let total = enc.pixel_values.len() + arrays.iter().map(|a| a.pixel_values.len()).sum::<usize>();
    let mut b = PixelBatch::new(dim);
    b.pixel_values.reserve_exact(total);
    for &(is_rgb, j) in &items.order {
        if is_rgb {
            b.pixel_values.extend_from_slice(&arrays[j].pixel_values);
            b.image_grid_thw.push(arrays[j].grid_thw.map(|d| d as i64));
        } else {
            b.pixel_values
                .extend_from_slice(&enc.pixel_values[starts[j]..starts[j + 1]]);
            b.image_grid_thw.push(enc.image_grid_thw[j]);
        }
    }
    Ok(b)
}

/// `(pixel_values [N, D] float32, grid [I, 3] int64)` as numpy arrays; the values are moved,
/// not copied.
pub fn to_numpy<'py>(
    py: Python<'py>,
    values: Vec<f32>,
    dim: usize,
    grids: &[[i64; 3]],
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    let rows = values.len().checked_div(dim).unwrap_or(0);
    let pv = PyArray1::from_vec(py, values).reshape([rows, dim])?;
    let flat: Vec<i64> = grids.iter().flatten().copied().collect();
    let g = PyArray1::from_vec(py, flat).reshape([grids.len(), 3])?;
    Ok((pv.into_any(), g.into_any()))
}

/// `(pixel_values_videos, video_grid_thw, frame_indices, timestamps)`.
type VideoOut<'py> = (Bound<'py, PyAny>, Bound<'py, PyAny>, Vec<usize>, Vec<f64>);

/// The Rust half of `glm5v.ImageProcessor` / `glm5v.VideoProcessor`: immutable options, safe
/// to share between threads; every method releases the GIL while it works.
#[pyclass(frozen, module = "glm5v._glm5v")]
pub struct Prep {
    pub opts: PrepOptions,
    video: bool,
}

#[pymethods]
impl Prep {
    /// `Prep(model_dir=None, options=None, video=False)`.
    #[new]
    #[pyo3(signature = (model_dir=None, options=None, video=false))]
    fn new(
        model_dir: Option<std::path::PathBuf>,
        options: Option<&Bound<'_, PyDict>>,
        video: bool,
    ) -> PyResult<Self> {
        Ok(Prep {
            opts: crate::options::build(model_dir, options, video)?,
            video,
        })
    }

    /// The options, upstream's names, as JSON.
    fn options_json(&self) -> String {
        crate::options::to_json(&self.opts, self.video)
    }

    /// Images -> `(pixel_values, image_grid_thw)`.
    fn images<'py>(
        &self,
        py: Python<'py>,
        items: &Bound<'py, PyAny>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
        let items = extract(items)?;
        let opts = &self.opts;
        let b = crate::pool::detached(py, || prep_items(&items, opts))?.map_err(prep_err)?;
        to_numpy(py, b.pixel_values, b.patch_dim, &b.image_grid_thw)
    }

    /// One JSON object per image from its header alone (arrays: from their shape).
    fn plan(&self, py: Python<'_>, items: &Bound<'_, PyAny>) -> PyResult<String> {
        let items = extract(items)?;
        let opts = &self.opts;
        let plans = crate::pool::detached(py, || {
            items
                .order
                .par_iter()
                .map(|&(is_rgb, j)| {
                    if is_rgb {
                        let (name, px) = &items.rgbs[j];
                        let (h, w) = px.dims();
                        glm5v_prep::plan_dims(name.clone(), h, w, opts)
                    } else {
                        glm5v_prep::plan_image(&items.srcs[j], opts)
                    }
                })
                .collect::<Result<Vec<_>, _>>()
        })?
        .map_err(prep_err)?;
        Ok(serde_json::to_string(&plans).expect("plans serialise"))
    }

    /// A clip's frames (all of them, at `fps`) -> `(pixel_values_videos, video_grid_thw,
    /// frame_indices, timestamps)`, sampled as the video options say.
    fn video<'py>(
        &self,
        py: Python<'py>,
        items: &Bound<'py, PyAny>,
        fps: f64,
    ) -> PyResult<VideoOut<'py>> {
        let items = extract(items)?;
        let opts = &self.opts;
        let v = crate::pool::detached(py, || {
            let decoded: Vec<image::RgbImage> = items
                .order
                .par_iter()
                .map(|&(is_rgb, j)| {
                    if is_rgb {
                        Ok(items.rgbs[j].1.rgb().into_owned())
                    } else {
                        glm5v_prep::load_image(&items.srcs[j], &opts.decode)
                    }
                })
                .collect::<Result<_, _>>()?;
            glm5v_prep::prep_video_frames(&decoded, fps, opts)
        })?
        .map_err(prep_err)?;
        let dim = opts.video.pixels.patch_dim();
        let grid = [v.grid_thw.map(|d| d as i64)];
        let (pv, g) = to_numpy(py, v.pixel_values, dim, &grid)?;
        Ok((pv, g, v.frame_indices, v.timestamps))
    }
}

/// `expand_prompt(text, image_grids, videos, merge_size)`: each `<|image|>` of `text` replaced by
/// its image's placeholder run, each `<|video|>` by its video's frame blocks; `videos` holds
/// `(grid, timestamps)` pairs.
#[pyfunction]
pub fn expand_prompt(
    text: &str,
    image_grids: Vec<[usize; 3]>,
    videos: Vec<([usize; 3], Vec<f64>)>,
    merge_size: usize,
) -> PyResult<String> {
    if merge_size == 0 {
        return Err(crate::errors::raise(
            "OptionsError",
            "merge_size must be positive".into(),
        ));
    }
    let videos: Vec<VideoPrompt> = videos
        .into_iter()
        .map(|(grid_thw, timestamps)| VideoPrompt {
            grid_thw,
            timestamps,
        })
        .collect();
    prompt::expand_prompt(text, &image_grids, &videos, merge_size).map_err(prep_err)
}

/// `<|begin_of_image|>` + `<|image|>` x tokens + `<|end_of_image|>` as token ids.
#[pyfunction]
pub fn image_block_ids(grid: [usize; 3], merge_size: usize) -> PyResult<Vec<u32>> {
    if merge_size == 0 {
        return Err(crate::errors::raise(
            "OptionsError",
            "merge_size must be positive".into(),
        ));
    }
    Ok(prompt::image_block_ids(grid, merge_size))
}

/// The same block as text.
#[pyfunction]
pub fn image_block_text(grid: [usize; 3], merge_size: usize) -> PyResult<String> {
    if merge_size == 0 {
        return Err(crate::errors::raise(
            "OptionsError",
            "merge_size must be positive".into(),
        ));
    }
    Ok(prompt::image_block_text(grid, merge_size))
}
