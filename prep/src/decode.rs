//! Decoding image bytes the way upstream's `load_image` does (PIL): placeholder until the decode
//! work lands; every entry point returns an error saying so.

use crate::error::{PrepError, Result};
use std::path::PathBuf;

/// Where an image comes from.
#[derive(Debug, Clone)]
pub enum ImageSource {
    Path(PathBuf),
    DataUri(String),
    Bytes { name: String, bytes: Vec<u8> },
}

impl ImageSource {
    /// A CLI argument: `data:` URIs are taken as such, anything else is a path.
    pub fn from_arg(arg: &str) -> Self {
        if arg.starts_with("data:") {
            ImageSource::DataUri(arg.to_string())
        } else {
            ImageSource::Path(PathBuf::from(arg))
        }
    }

    /// A short name for messages.
    pub fn name(&self) -> String {
        match self {
            ImageSource::Path(p) => p.display().to_string(),
            ImageSource::DataUri(s) => format!("data URI ({} bytes)", s.len()),
            ImageSource::Bytes { name, .. } => name.clone(),
        }
    }
}

/// What to do with transparency (UPSTREAM.md pixel contract, items 1-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AlphaMode {
    /// `load_image`'s `convert("RGB")`: alpha is dropped (the default).
    #[default]
    Drop,
    /// The processor's `convert_to_rgb` for PIL images with transparency: composite over white.
    White,
}

/// PIL's refusal threshold: 2 x `Image.MAX_IMAGE_PIXELS` (89,478,485).
pub const DEFAULT_DECODE_BUDGET: u64 = 2 * 89_478_485;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeOptions {
    pub alpha: AlphaMode,
    /// Images whose header promises more pixels than this are refused before decoding.
    pub max_pixels: u64,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        Self { alpha: AlphaMode::Drop, max_pixels: DEFAULT_DECODE_BUDGET }
    }
}

/// What the header says, without decoding pixels. `width`/`height` are after EXIF orientation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageHeader {
    pub width: u32,
    pub height: u32,
    pub format: &'static str,
    /// EXIF orientation 1-8 (1 when absent).
    pub orientation: u8,
}

/// Decodes to RGB8 exactly as `transformers.image_utils.load_image` would.
pub fn load_image(src: &ImageSource, _opts: &DecodeOptions) -> Result<image::RgbImage> {
    Err(PrepError::Unsupported {
        input: src.name(),
        format: "any".into(),
        detail: "decoding is not implemented yet".into(),
    })
}

/// Reads the header only.
pub fn probe(src: &ImageSource, _opts: &DecodeOptions) -> Result<ImageHeader> {
    Err(PrepError::Unsupported {
        input: src.name(),
        format: "any".into(),
        detail: "header probing is not implemented yet".into(),
    })
}
