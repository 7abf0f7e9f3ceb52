//! The GLM-5.3-Flash vision pixel contract (`../shared/UPSTREAM.md`, "The pixel contract").
pub mod error;
pub use error::{PrepError, Result};
