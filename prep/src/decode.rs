//! Decoding image bytes the way upstream's `transformers.image_utils.load_image` does:
//! `PIL.Image.open`, `ImageOps.exif_transpose`, `convert("RGB")` (Pillow 13.0.0), see
//! `../../shared/UPSTREAM.md`, "The pixel contract", items 1-2.
//!
//! Each format's samples are read into the PIL mode Pillow's plugin would give them
//! ([`modes::Pixels`]), then converted with Pillow's own integer rules (`Convert.c`,
//! `AlphaComposite.c`). Decoders, chosen because their pixels equal PIL's:
//! - JPEG: libjpeg-turbo's C decoder as built by `mozjpeg-sys` (PIL bundles libjpeg-turbo; the
//!   `image` crate's zune-jpeg reconstructs differently). ISLOW IDCT, fancy upsampling, as PIL.
//!   Large images are decoded in row bands on several threads (same bytes as one pass).
//!   Arithmetic-coded JPEGs over 64 KiB are refused, as PIL fails on them (see `jpeg.rs`).
//! - WebP: libwebp (`libwebp-sys`) through `WebPAnimDecoder`, the API Pillow's `_webp` uses.
//! - PNG / GIF / TIFF: the raw samples of the `png` / `gif` / `tiff` crates (lossless formats: the
//!   only differences are in mode handling, done here as Pillow does).
//! - BMP: the `image` crate, except 16-bit BMPs, unpacked here with PIL's truncating widening.
//!
//! [`probe`] reads only the header; [`load_image`] runs the same header check first, so an image
//! whose header promises more than [`DecodeOptions::max_pixels`] is refused before any pixel
//! buffer is allocated (PIL's `DecompressionBombError`: `w * h > 2 * MAX_IMAGE_PIXELS`).

mod bmp;
mod exif;
mod gif;
mod header;
mod jpeg;
mod modes;
mod png;
mod source;
mod tiff;
mod webp;

use crate::error::{PrepError, Result};
use header::Format;
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
    /// What `processor(images=load_image(path))` sees (the default): `load_image`'s
    /// `convert("RGB")` drops alpha bands; a single-colour transparency key (modes L, RGB and P
    /// with one transparent index) survives that conversion, and the processor's
    /// `convert_to_rgb` then paints every pixel of exactly that colour white.
    #[default]
    Drop,
    /// The processor's `convert_to_rgb` for PIL images with transparency (an alpha band or a
    /// `transparency` key): `convert("RGBA")`, then `Image.alpha_composite` over opaque white
    /// (Pillow's integer arithmetic). EXIF orientation is applied first, as in `Drop`.
    White,
}

/// PIL's refusal threshold: 2 x `Image.MAX_IMAGE_PIXELS` (89,478,485).
pub const DEFAULT_DECODE_BUDGET: u64 = 2 * 89_478_485;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeOptions {
    pub alpha: AlphaMode,
    /// Images whose header promises more pixels than this are refused before decoding
    /// (`width * height > max_pixels`, PIL's comparison).
    pub max_pixels: u64,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        Self {
            alpha: AlphaMode::Drop,
            max_pixels: DEFAULT_DECODE_BUDGET,
        }
    }
}

/// What the header says, without decoding pixels. `width`/`height` are after EXIF orientation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageHeader {
    pub width: u32,
    pub height: u32,
    /// PIL's format name: "PNG", "JPEG", "GIF", "BMP", "WEBP" or "TIFF".
    pub format: &'static str,
    /// EXIF orientation 1-8 (1 when absent).
    pub orientation: u8,
}

/// Why a format decoder stopped; turned into a [`PrepError`] naming the input.
#[derive(Debug)]
pub(crate) enum Fail {
    Corrupt(String),
    Unsupported(String),
    /// A decoder wanted more memory than the header's size allows.
    Limits,
}

impl Fail {
    fn into_error(self, input: &str, format: Format) -> PrepError {
        let (input, format) = (input.to_string(), format.name().to_string());
        match self {
            Fail::Corrupt(detail) => PrepError::Corrupt {
                input,
                format,
                detail,
            },
            Fail::Unsupported(detail) => PrepError::Unsupported {
                input,
                format,
                detail,
            },
            Fail::Limits => PrepError::Corrupt {
                input,
                format,
                detail:
                    "the decoder needed more memory than the image size allows (malformed data)"
                        .into(),
            },
        }
    }
}

/// The header check shared by [`probe`] and [`load_image`]: format, size, budget, orientation.
fn checked_header(
    src: &ImageSource,
    bytes: &[u8],
    opts: &DecodeOptions,
) -> Result<(Format, header::Header, u8)> {
    let input = src.name();
    let format = header::sniff(bytes).ok_or_else(|| PrepError::UnknownFormat {
        input: input.clone(),
    })?;
    let h = header::parse(bytes, format).map_err(|f| f.into_error(&input, format))?;
    let (w64, h64) = (h.width as u64, h.height as u64);
    // PIL: pixels = max(1, w) * max(1, h); refused when pixels > 2 * MAX_IMAGE_PIXELS.
    let pixels = w64.max(1) * h64.max(1);
    if pixels > opts.max_pixels {
        return Err(PrepError::DecodeBudget {
            input,
            width: w64,
            height: h64,
            pixels,
            budget: opts.max_pixels,
        });
    }
    if w64 == 0 || h64 == 0 {
        return Err(PrepError::ZeroSize {
            input,
            width: w64,
            height: h64,
        });
    }
    let orientation = exif::resolve(&h.orientation);
    Ok((format, h, orientation))
}

/// Parses the header only (no pixel decoding, no pixel buffers; the file itself is read into
/// memory): size after EXIF orientation, format, orientation.
/// Refuses, as [`load_image`] does, images over the decode budget.
pub fn probe(src: &ImageSource, opts: &DecodeOptions) -> Result<ImageHeader> {
    let bytes = source::read_bytes(src)?;
    let (format, h, orientation) = checked_header(src, &bytes, opts)?;
    let (width, height) = if orientation >= 5 {
        (h.height, h.width)
    } else {
        (h.width, h.height)
    };
    Ok(ImageHeader {
        width,
        height,
        format: format.name(),
        orientation,
    })
}

/// Decodes to RGB8 exactly as `transformers.image_utils.load_image` would (with
/// [`AlphaMode::White`], as the processor's `convert_to_rgb` would on the opened image).
pub fn load_image(src: &ImageSource, opts: &DecodeOptions) -> Result<image::RgbImage> {
    let bytes = source::read_bytes(src)?;
    let (format, h, orientation) = checked_header(src, &bytes, opts)?;
    let input = src.name();
    // Decoder allocations are bounded by what the header promises: 8 bytes per pixel (16-bit
    // RGBA) plus slack for tables and row buffers.
    let max_bytes = (h.width as usize)
        .saturating_mul(h.height as usize)
        .saturating_mul(8)
        .saturating_add(64 << 20);
    let raster = match format {
        Format::Jpeg if h.arithmetic && bytes.len() > jpeg::PIL_READ_BLOCK => Err(Fail::Unsupported(format!(
            "arithmetic-coded JPEG of {} bytes: PIL feeds libjpeg {} bytes at a time and libjpeg's \
             arithmetic decoder cannot wait for more data, so upstream's load_image fails on it too \
             (re-encode it with Huffman coding)",
            bytes.len(),
            jpeg::PIL_READ_BLOCK
        ))),
        Format::Jpeg => jpeg::decode(&bytes, max_bytes),
        Format::Png => png::decode(&bytes, max_bytes),
        Format::WebP => webp::decode(&bytes),
        Format::Gif => gif::decode(&bytes, max_bytes),
        Format::Bmp => bmp::decode(&bytes, max_bytes),
        Format::Tiff => tiff::decode(&bytes, max_bytes),
    }
    .map_err(|f| f.into_error(&input, format))?;
    if (raster.width, raster.height) != (h.width, h.height) {
        return Err(PrepError::Corrupt {
            input,
            format: format.name().into(),
            detail: format!(
                "the header says {}x{} but the image data is {}x{}",
                h.width, h.height, raster.width, raster.height
            ),
        });
    }
    let rgb = match opts.alpha {
        AlphaMode::Drop => raster.into_upstream_rgb(),
        AlphaMode::White => raster.to_rgb_over_white(),
    };
    let img =
        image::RgbImage::from_raw(h.width, h.height, rgb).ok_or_else(|| PrepError::Corrupt {
            input: src.name(),
            format: format.name().into(),
            detail: "short pixel buffer".into(),
        })?;
    Ok(modes::apply_orientation(img, orientation))
}
