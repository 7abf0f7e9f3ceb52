//! Images as the Python layer hands them over: a list of tagged tuples built by
//! `glm5v/_inputs.py` (it has already turned PIL images into RGB bytes the way upstream's
//! processor converts them, and numpy arrays into C-contiguous `HxWx3` uint8):
//!
//! - `("path", str)`, `("uri", str)` (a `data:` URI), `("bytes", name, bytes)`: encoded files,
//!   decoded here with PIL's rules (`glm5v_prep::load_image`);
//! - `("rgb", name, ndarray[h, w, 3] uint8)`: pixels upstream's processor would take as they are;
//! - `("rgba" | "la", name, ndarray[h, w, 4 | 2] uint8)`: an RGBA / LA PIL image's samples, which
//!   upstream's `convert_to_rgb` composites over white (done here, `pixels.rs`).

use crate::pixels::Pixels;
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
    pub rgbs: Vec<(String, Pixels)>,
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
            "rgb" | "rgba" | "la" => {
                let name: String = t.get_item(1)?.extract()?;
                let arr: PyReadonlyArray3<'_, u8> = t.get_item(2)?.extract()?;
                let shape = arr.shape();
                let (h, w, c) = (shape[0], shape[1], shape[2]);
                let want = match kind.as_str() {
                    "rgb" => 3,
                    "rgba" => 4,
                    _ => 2,
                };
                if c != want || h == 0 || w == 0 {
                    return Err(PyValueError::new_err(format!(
                        "{name}: pixels must be HxWx{want} with H, W > 0, got {h}x{w}x{c}"
                    )));
                }
                let (hh, ww) = (u32::try_from(h), u32::try_from(w));
                let (Ok(hh), Ok(ww)) = (hh, ww) else {
                    return Err(PyValueError::new_err(format!(
                        "{name}: {h}x{w} is too large"
                    )));
                };
                let data = arr.as_slice()?.to_vec();
                let px = if want == 3 {
                    Pixels::Rgb(RgbImage::from_raw(ww, hh, data).ok_or_else(|| {
                        PyValueError::new_err(format!("{name}: bad pixel buffer"))
                    })?)
                } else {
                    Pixels::Alpha {
                        width: ww,
                        height: hh,
                        bands: want,
                        data,
                    }
                };
                out.order.push((true, out.rgbs.len()));
                out.rgbs.push((name, px));
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
