//! `glm5v.diff`: two tap dumps (files, or taps held in Python) compared by the conformance
//! crate's one engine (`compare_dumps`), the report handed back as its JSON and its table.

use crate::errors::{conformance_err, raise};
use glm5v_conformance::{TapDump, TolerancePick, compare_dumps, render, tolerance::Preset};
use pyo3::prelude::*;
use safetensors::{Dtype, tensor::TensorView};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Taps held in Python: `(name, dtype, shape, little-endian bytes)` per tensor, and metadata.
type Held = (
    Vec<(String, String, Vec<usize>, Vec<u8>)>,
    HashMap<String, String>,
);

fn dtype_of(s: &str) -> PyResult<Dtype> {
    Ok(match s {
        "F32" => Dtype::F32,
        "F64" => Dtype::F64,
        "F16" => Dtype::F16,
        "BF16" => Dtype::BF16,
        "I64" => Dtype::I64,
        "I32" => Dtype::I32,
        other => {
            return Err(raise(
                "TapsError",
                format!("internal: dtype {other} cannot be stored"),
            ));
        }
    })
}

/// Serialises taps held in Python into a safetensors image (the tap-dump layout).
fn to_bytes(label: &str, held: &Held) -> PyResult<Vec<u8>> {
    let (tensors, meta) = held;
    let mut views = Vec::with_capacity(tensors.len());
    for (name, dtype, shape, data) in tensors {
        let v = TensorView::new(dtype_of(dtype)?, shape.clone(), data)
            .map_err(|e| raise("TapsError", format!("{label}: tap `{name}`: {e}")))?;
        views.push((name.as_str(), v));
    }
    let meta = (!meta.is_empty()).then(|| meta.clone());
    safetensors::serialize(views, meta).map_err(|e| raise("TapsError", format!("{label}: {e}")))
}

fn open(label: &str, side: &Bound<'_, PyAny>) -> PyResult<TapDump> {
    if let Ok(p) = side.extract::<PathBuf>() {
        return TapDump::open(&p).map_err(conformance_err);
    }
    let held: Held = side.extract()?;
    let bytes = to_bytes(label, &held)?;
    TapDump::from_bytes(Path::new(label), bytes).map_err(conformance_err)
}

/// `diff(a, b, tolerance, rtol, label_a, label_b)` -> `(report JSON, table text)`. `a` / `b`
/// are paths or `(tensors, metadata)` pairs (named by the labels in the report); `tolerance` a
/// preset name, or `rtol` a relative-L2 bound.
#[pyfunction]
#[pyo3(signature = (a, b, tolerance=None, rtol=None, label_a=None, label_b=None))]
pub fn diff(
    py: Python<'_>,
    a: &Bound<'_, PyAny>,
    b: &Bound<'_, PyAny>,
    tolerance: Option<&str>,
    rtol: Option<f64>,
    label_a: Option<String>,
    label_b: Option<String>,
) -> PyResult<(String, String)> {
    let pick = match (tolerance, rtol) {
        (Some(_), Some(_)) => {
            return Err(raise(
                "OptionsError",
                "give a tolerance preset or rtol, not both".into(),
            ));
        }
        (Some(name), None) => TolerancePick::Preset(Preset::parse(name).map_err(conformance_err)?),
        (None, Some(x)) => TolerancePick::Rtol(x),
        (None, None) => TolerancePick::default(),
    };
    let la = label_a.unwrap_or_else(|| "<a: taps in memory>".into());
    let lb = label_b.unwrap_or_else(|| "<b: taps in memory>".into());
    let (da, db) = (open(&la, a)?, open(&lb, b)?);
    let report =
        crate::pool::detached(py, || compare_dumps(&da, &db, pick))?.map_err(conformance_err)?;
    Ok((render::json(&report), render::table(&report)))
}

/// The names of the presets and their bounds in words.
#[pyfunction]
pub fn tolerance_presets() -> Vec<(String, String)> {
    Preset::ALL
        .iter()
        .map(|p| (p.name().to_string(), p.tolerance(None).to_string()))
        .collect()
}

/// Every TAPS.md tap name of a tower of `depth` blocks, in forward order.
#[pyfunction]
pub fn tap_names(depth: usize) -> Vec<String> {
    glm5v_reference::tap_names(depth)
}
