//! The `glm5v._glm5v` extension module: thin bindings; the Python package `glm5v`
//! (`python/python/glm5v/`) is the public surface and documents it.

mod diff;
mod embed;
mod errors;
mod inputs;
mod options;
mod pixels;
mod pool;
mod processor;
mod stream;

use pyo3::prelude::*;

#[pymodule]
fn _glm5v(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<processor::Prep>()?;
    m.add_class::<embed::Embed>()?;
    m.add_class::<stream::EmbedStream>()?;
    m.add_function(wrap_pyfunction!(processor::expand_prompt, m)?)?;
    m.add_function(wrap_pyfunction!(processor::image_block_ids, m)?)?;
    m.add_function(wrap_pyfunction!(processor::image_block_text, m)?)?;
    m.add_function(wrap_pyfunction!(diff::diff, m)?)?;
    m.add_function(wrap_pyfunction!(diff::tolerance_presets, m)?)?;
    m.add_function(wrap_pyfunction!(diff::tap_names, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("JPEG_SIMD", glm5v_prep::jpeg_simd())?;
    Ok(())
}
