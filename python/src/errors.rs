//! Rust errors as Python exceptions. The classes live in `glm5v/_errors.py` (so that they can
//! inherit from both `glm5v.Glm5vError` and the builtin that fits, e.g. `ValueError`); each is
//! raised with the Rust error's message.

use glm5v_conformance::ConformanceError;
use glm5v_prep::PrepError;
use glm5v_reference::EmbedError;
use pyo3::prelude::*;

/// The exception `class_name` of `glm5v._errors`, carrying `message`.
pub fn raise(class_name: &str, message: String) -> PyErr {
    Python::attach(|py| {
        let class = py
            .import("glm5v._errors")
            .and_then(|m| m.getattr(class_name));
        match class {
            Ok(c) => PyErr::from_type(c.cast_into().expect("an exception class"), message),
            Err(e) => e,
        }
    })
}

/// The exception class a prep error maps to.
pub fn prep_class(e: &PrepError) -> &'static str {
    match e {
        PrepError::Io { .. } => "ReadError",
        PrepError::DecodeBudget { .. } => "DecodeBudgetError",
        PrepError::Empty { .. }
        | PrepError::UnknownFormat { .. }
        | PrepError::Corrupt { .. }
        | PrepError::Unsupported { .. }
        | PrepError::ZeroSize { .. }
        | PrepError::DataUri { .. } => "DecodeError",
        PrepError::InvalidOption(_) | PrepError::PreprocessorConfig { .. } => "OptionsError",
        PrepError::Video(_)
        | PrepError::VideoSupport { .. }
        | PrepError::NotAVideo { .. }
        | PrepError::NoVideoStream { .. }
        | PrepError::VideoCodec { .. }
        | PrepError::VideoCorrupt { .. } => "VideoError",
        PrepError::VideoDecodeBudget { .. } => "DecodeBudgetError",
        PrepError::Write { .. } => "ReadError",
    }
}

pub fn prep_err(e: PrepError) -> PyErr {
    raise(prep_class(&e), e.to_string())
}

pub fn embed_err(e: EmbedError) -> PyErr {
    match e {
        EmbedError::Prep(p) => prep_err(p),
        EmbedError::Tower(_) => raise("InputError", e.to_string()),
        other => raise("ModelError", other.to_string()),
    }
}

pub fn conformance_err(e: ConformanceError) -> PyErr {
    match e {
        ConformanceError::Io { .. } => raise("ReadError", e.to_string()),
        ConformanceError::UnknownPreset(_) | ConformanceError::InvalidTolerance(_) => {
            raise("OptionsError", e.to_string())
        }
        other => raise("TapsError", other.to_string()),
    }
}
