//! Images as the Python layer hands them over: a list of tagged tuples built by
//! `glm5v/_inputs.py` (it has already turned PIL images into RGB bytes the way upstream's
//! processor converts them, and numpy arrays into C-contiguous `HxWx3` uint8):
//!
//! - `("path", str)`, `("uri", str)` (a `data:` URI), `("bytes", name, bytes)`: encoded files,
//!   decoded here with PIL's rules (`glm5v_prep::load_image`);
//! - `("rgb", name, ndarray[h, w, 3] uint8)`: pixels upstream's processor would take as they are.

use glm5v_prep::ImageSource;
use image::RgbImage;
use numpy::{PyReadonlyArray3, PyUntypedArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use std::path::PathBuf;

/// The inputs of one call, split by kind; `order` says where each one sits.
#[derive(Default)]
pub struct Items {
    /// Encoded files, in call order.
    pub srcs: Vec<ImageSource>,
    /// Decoded pixels (name for messages, image), in call order.
    pub rgbs: Vec<(String, RgbImage)>,
    /// Per input: `(is_rgb, index into srcs or rgbs)`.
    pub order: Vec<(bool, usize)>,
}

/// Reads the tagged tuples (see the module doc). The pixel copies are made here, with the GIL
/// held; everything after runs without it.
pub fn extract(items: &Bound<'_, PyAny>) -> PyResult<Items> {
    let mut out = Items::default();
    for item in items.try_iter()? {
        let item = item?;
        let t = item
            .cast::<PyTuple>()
            .map_err(|_| PyTypeError::new_err("internal: an input must be a tagged tuple"))?;
        let kind: String = t.get_item(0)?.extract()?;
        match kind.as_str() {
            "path" => {
                let p: PathBuf = t.get_item(1)?.extract()?;
                out.order.push((false, out.srcs.len()));
                out.srcs.push(ImageSource::Path(p));
            }
            "uri" => {
                let s: String = t.get_item(1)?.extract()?;
                out.order.push((false, out.srcs.len()));
                out.srcs.push(ImageSource::DataUri(s));
            }
            "bytes" => {
                let name: String = t.get_item(1)?.extract()?;
                let b = t.get_item(2)?;
                let bytes = b
                    .cast::<PyBytes>()
                    .map_err(|_| PyTypeError::new_err("internal: bytes payload expected"))?
                    .as_bytes()
                    .to_vec();
                out.order.push((false, out.srcs.len()));
                out.srcs.push(ImageSource::Bytes { name, bytes });
            }
            "rgb" => {
                let name: String = t.get_item(1)?.extract()?;
                let arr: PyReadonlyArray3<'_, u8> = t.get_item(2)?.extract()?;
                let shape = arr.shape();
                let (h, w, c) = (shape[0], shape[1], shape[2]);
                if c != 3 || h == 0 || w == 0 {
                    return Err(PyValueError::new_err(format!(
                        "{name}: pixels must be HxWx3 with H, W > 0, got {h}x{w}x{c}"
                    )));
                }
                let (hh, ww) = (u32::try_from(h), u32::try_from(w));
                let (Ok(hh), Ok(ww)) = (hh, ww) else {
                    return Err(PyValueError::new_err(format!(
                        "{name}: {h}x{w} is too large"
                    )));
                };
                let data = arr.as_slice()?.to_vec();
                let img = RgbImage::from_raw(ww, hh, data)
                    .ok_or_else(|| PyValueError::new_err(format!("{name}: bad pixel buffer")))?;
                out.order.push((true, out.rgbs.len()));
                out.rgbs.push((name, img));
            }
            other => {
                return Err(PyTypeError::new_err(format!(
                    "internal: unknown input kind `{other}`"
                )));
            }
        }
    }
    Ok(out)
}
