//! The GLM-5.3-Flash vision pixel contract (`../shared/UPSTREAM.md`, "The pixel contract").
pub mod decode;
pub mod error;
pub use decode::{AlphaMode, DecodeOptions, ImageHeader, ImageSource, load_image, probe};
pub use error::{PrepError, Result};
