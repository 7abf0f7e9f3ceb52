//! Decoding image bytes the way upstream's `transformers.image_utils.load_image` does:
//! `PIL.Image.open`, `ImageOps.exif_transpose`, `convert("RGB")` (Pillow 13.0.0), see
//! `../../shared/UPSTREAM.md`, "The pixel contract", items 1-2.
//!
//! Each format's samples are read into the PIL mode Pillow's plugin would give them
//! (`modes::Pixels`), then converted with Pillow's own integer rules (`Convert.c`,
//! `AlphaComposite.c`). Decoders, chosen because their pixels equal PIL's:
//! - JPEG: libjpeg-turbo's decoder as built by `mozjpeg-sys` (PIL bundles libjpeg-turbo; the
//!   `image` crate's zune-jpeg reconstructs differently). ISLOW IDCT, fancy upsampling, as PIL.
//!   Its SIMD paths are compiled in when `nasm` is on the PATH at build time, else its C paths
//!   (the same pixels, a slower decode); [`jpeg_simd`] says which this build has.
//!   Large images are decoded in row bands on several threads (same bytes as one pass).
//!   Arithmetic-coded JPEGs over 64 KiB are refused, as PIL fails on them (see `jpeg.rs`).
//! - WebP: libwebp (`libwebp-sys`) through `WebPAnimDecoder`, the API Pillow's `_webp` uses.
//! - PNG / GIF: the raw samples of the `png` / `gif` crates (lossless formats: the only
//!   differences are in mode handling, done here as Pillow does).
//! - TIFF (and BigTIFF): libtiff 4.7.2, the version Pillow bundles, built from source with its
//!   JPEG, old-style JPEG, Deflate, LZMA, CCITT, LZW and PackBits codecs (`glm5v-libtiff-sys`),
//!   read with `TiffDecode.c`'s loops and `OPEN_INFO`'s modes (`tiff.rs`).
//! - BMP: read here as Pillow's `BmpImagePlugin` reads it (`bmp.rs`).
//! - QOI, PNM (P1-P6), TGA, ICO (the largest entry): the `image` crate's decoders (`foreign.rs`),
//!   measured equal to `load_image` on the Pillow corpus.
//!
//! - DDS: read as Pillow's `DdsImagePlugin` reads it, BC1-BC5, BC6H and BC7 with `BcnDecode.c`'s
//!   formulas (`dds.rs`, `bc6h.rs`).
//! - PSD: the merged composite as Pillow's `PsdImagePlugin` reads it (raw or PackBits bands,
//!   `psd.rs`).
//! - CUR: the entry and masking of Pillow's `CurImagePlugin`, the bitmap through `bmp.rs`
//!   (`cur.rs`).
//! - JPEG 2000 (codestreams and JP2): OpenJPEG 2.5.3 (`openjpeg-sys`, built with cc; Pillow
//!   bundles 2.5.4, the same decoder bar a header-failure path) driven tile by tile as
//!   `Jpeg2KDecode.c` drives it, with its unpackers and `Jpeg2KImagePlugin`'s modes (`jpeg2k.rs`).
//! - ICNS: the size and entries `IcnsImagePlugin` picks; PNG entries through `png.rs`, JPEG 2000
//!   entries through `jpeg2k.rs`, RLE RGB with its mask read here (`icns.rs`).
//! - PFM ("Pf"), SPIDER, FITS, BLP, FLI/FLC (the first frame), FTEX, GBR, McIdas, PCD, PIXAR,
//!   XVThumb, and 16-bit true-colour TGA: ported from their Pillow plugins (and `FliDecode.c`,
//!   `PcdDecode.c`), each in its own file (`pfm.rs`, `spider.rs`, ..., `tga16.rs`); modes I and F
//!   convert to RGB through L as `Image.convert` does (`modes.rs`).
//!
//! - SGI, PCX, DCX (the first page), Sun raster, XBM, XPM, MSP, IM, IMT and DIB: read as their
//!   Pillow plugins and C decoders read them, one file each (`sgi.rs`, `pcx.rs`, `sun.rs`,
//!   `xbm.rs`, `xpm.rs`, `msp.rs`, `im.rs`, `dib.rs` through `bmp.rs`; `legacy.rs` routes them).
//! - AVIF: the container read here, AV1 through rav1d (a Rust port of dav1d, which Pillow's
//!   libavif uses), YUV to RGB with libyuv's and libavif's arithmetic as Pillow's wheel runs it
//!   (`avif.rs`, `avif_yuv.rs`, `avif_yuv16.rs`, `avif_grid.rs`).
//!
//! Files of the other formats PIL opens (BLP, ...) are refused with an error
//! naming the format (`other.rs`), not as "not a supported image".
//!
//! [`probe`] reads only the header; [`load_image`] runs the same header check first, so an image
//! whose header promises more than [`DecodeOptions::max_pixels`] is refused before any pixel
//! buffer is allocated (PIL's `DecompressionBombError`: `w * h > 2 * MAX_IMAGE_PIXELS`).

mod av1;
pub use av1::panic_is_caught as decoder_panic_is_caught;
mod avif;
mod avif_box;
mod avif_grid;
mod avif_yuv;
mod avif_yuv16;
mod bc6h;
mod blp;
mod bmp;
mod bytes;
mod cur;
mod dds;
mod dib;
mod exif;
mod fits;
mod fli;
mod foreign;
mod ftex;
#[doc(hidden)]
pub mod fuzz_hooks;
mod gbr;
mod gif;
mod header;
mod icns;
mod im;
mod inflate;
/// Tests: while `on` holds, every two-thread inflate waits for its second part
/// ([`inflate::Policy::Wait`]); each `true` needs its `false`.
#[cfg(test)]
pub(crate) fn inflate_wait_for_second(on: bool) {
    use std::sync::atomic::Ordering::Relaxed;
    match on {
        true => inflate::WAIT_FOR_SECOND.fetch_add(1, Relaxed),
        false => inflate::WAIT_FOR_SECOND.fetch_sub(1, Relaxed),
    };
}
mod jpeg;
mod jpeg2k;
mod lab;
mod legacy;
mod modes;
mod msp;
mod other;
mod pcx;
mod pfm;
mod png;
mod psd;
mod sgi;
#[cfg(test)]
pub(crate) use png::{test_photo, test_png};
mod mcidas;
mod pcd;
mod pixar;
mod source;
mod spider;
mod sun;
mod tga16;
mod tiff;
mod webp;
mod xbm;
mod xpm;
mod xvthumb;

use crate::error::{PrepError, Result};
use header::Format;
use std::path::PathBuf;

/// The formats prep decodes, as a sentence ("PNG, JPEG, ... and AVIF"), for messages.
pub(crate) fn recognised_formats() -> String {
    Format::all_names()
}

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
    /// PIL's format name: "PNG", "JPEG", "GIF", "BMP", "WEBP", "TIFF", "QOI", "PPM" (also for
    /// PFM), "TGA", "ICO", "CUR", "DDS", "PSD", "SGI", "PCX", "DCX", "SUN", "XBM", "XPM", "MSP",
    /// "IM", "IMT", "DIB", "JPEG2000", "ICNS", "SPIDER", "BLP", "FLI", "FITS", "FTEX", "GBR",
    /// "MCIDAS", "PCD", "PIXAR", "XVThumb" or "AVIF".
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
    let format = header::sniff(bytes).ok_or_else(|| match other::pil_format(bytes) {
        // A format PIL opens: name it.
        Some(name) => PrepError::Unsupported {
            input: input.clone(),
            format: name.into(),
            detail: format!(
                "unsupported format: {name} (glm5v decodes {}; PIL opens {name}: convert the \
                 image to PNG)",
                Format::all_names()
            ),
        },
        None => PrepError::UnknownFormat {
            input: input.clone(),
        },
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

/// Whether the JPEG decoder runs libjpeg-turbo's SIMD paths on this CPU: `mozjpeg-sys` compiles
/// them when it finds `nasm` at build time (else its C paths, which give the same pixels on every
/// JPEG fixture and corpus file but one: the C IDCT wraps outputs that corrupt entropy-coded data
/// pushes out of range, where the SIMD one saturates as PIL's does, so a C-only build refuses
/// corrupt entropy-coded data). On the 4000x3000 bench JPEG the SIMD build's prep took ~0.7 of
/// the C build's time.
pub fn jpeg_simd() -> bool {
    jpeg::simd()
}

/// Decodes to RGB8 exactly as `transformers.image_utils.load_image` would (with
/// [`AlphaMode::White`], as the processor's `convert_to_rgb` would on the opened image).
pub fn load_image(src: &ImageSource, opts: &DecodeOptions) -> Result<image::RgbImage> {
    let bytes = source::read_bytes(src)?;
    let (format, h, orientation) = checked_header(src, &bytes, opts)?;
    decode_checked(src, &bytes, opts, format, &h, orientation)
}

/// Decoder allocations are bounded by what the header promises: 8 bytes per pixel (16-bit RGBA)
/// plus slack for tables and row buffers.
fn max_decode_bytes(h: &header::Header) -> usize {
    (h.width as usize)
        .saturating_mul(h.height as usize)
        .saturating_mul(8)
        .saturating_add(64 << 20)
}

/// The error [`load_image`] gives when the decoded size differs from the header's.
fn size_mismatch(
    src: &ImageSource,
    format: Format,
    h: &header::Header,
    w: u32,
    hh: u32,
) -> PrepError {
    PrepError::Corrupt {
        input: src.name(),
        format: format.name().into(),
        detail: format!(
            "the header says {}x{} but the image data is {w}x{hh}",
            h.width, h.height
        ),
    }
}

/// [`load_image`] after the header check.
fn decode_checked(
    src: &ImageSource,
    bytes: &[u8],
    opts: &DecodeOptions,
    format: Format,
    h: &header::Header,
    orientation: u8,
) -> Result<image::RgbImage> {
    let input = src.name();
    let max_bytes = max_decode_bytes(h);
    let raster = match format {
        Format::Jpeg if h.arithmetic && bytes.len() > jpeg::PIL_READ_BLOCK => Err(Fail::Unsupported(format!(
            "arithmetic-coded JPEG of {} bytes: PIL feeds libjpeg {} bytes at a time and libjpeg's \
             arithmetic decoder cannot wait for more data, so upstream's load_image fails on it too \
             (re-encode it with Huffman coding)",
            bytes.len(),
            jpeg::PIL_READ_BLOCK
        ))),
        Format::Jpeg => jpeg::decode(bytes, max_bytes),
        Format::Png => png::decode(bytes, max_bytes),
        Format::WebP => webp::decode(bytes),
        Format::Gif => gif::decode(bytes, max_bytes),
        Format::Bmp => bmp::decode(bytes, max_bytes),
        Format::Tiff => tiff::decode(bytes, max_bytes),
        Format::Dds => dds::decode(bytes, max_bytes),
        Format::Psd => psd::decode(bytes, max_bytes),
        Format::Cur => cur::decode(bytes, max_bytes),
        Format::Sgi
        | Format::Pcx
        | Format::Dcx
        | Format::Sun
        | Format::Xbm
        | Format::Xpm
        | Format::Msp
        | Format::Im
        | Format::Imt
        | Format::Dib => legacy::decode(bytes, format, max_bytes),
        Format::Jpeg2000 => jpeg2k::decode(bytes, max_bytes),
        Format::Icns => icns::decode(bytes, max_bytes),
        Format::Avif => avif::decode(bytes, opts.max_pixels),
        Format::Pfm => pfm::decode(bytes, max_bytes),
        Format::Spider => spider::decode(bytes, max_bytes),
        Format::Blp => blp::decode(bytes, max_bytes),
        Format::Fli => fli::decode(bytes, max_bytes),
        Format::Fits => fits::decode(bytes, max_bytes),
        Format::Ftex => ftex::decode(bytes, max_bytes),
        Format::Gbr => gbr::decode(bytes, max_bytes),
        Format::Mcidas => mcidas::decode(bytes, max_bytes),
        Format::Pcd => pcd::decode(bytes, max_bytes),
        Format::Pixar => pixar::decode(bytes, max_bytes),
        Format::XvThumb => xvthumb::decode(bytes, max_bytes),
        Format::Tga if tga16::takes(bytes) => tga16::decode(bytes, max_bytes),
        Format::Qoi | Format::Pnm | Format::Tga | Format::Ico => {
            foreign::decode(bytes, format, max_bytes)
        }
    }
    .map_err(|f| f.into_error(&input, format))?;
    if (raster.width, raster.height) != (h.width, h.height) {
        return Err(size_mismatch(src, format, h, raster.width, raster.height));
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

/// A decoded image as the image processor's resize consumes it: RGB rows of an image
/// `height x width` (after orientation), already resized horizontally to `row_width` pixels when
/// `row_width != width`.
pub(crate) struct PrepRaster {
    pub height: usize,
    pub width: usize,
    pub row_width: usize,
    /// `height` rows of `row_width * 3` bytes.
    pub rows: Vec<u8>,
}

/// An image's bytes with its header checked as [`load_image`] checks it, before any decoding.
pub(crate) struct Opened<'s> {
    bytes: std::borrow::Cow<'s, [u8]>,
    format: Format,
    header: header::Header,
    orientation: u8,
    /// Size after EXIF orientation.
    pub height: usize,
    pub width: usize,
}

/// The first half of [`load_image`]: reads the bytes and checks the header.
pub(crate) fn open_for_prep<'s>(src: &'s ImageSource, opts: &DecodeOptions) -> Result<Opened<'s>> {
    let bytes = source::read_bytes(src)?;
    let (format, header, orientation) = checked_header(src, &bytes, opts)?;
    let (w, h) = (header.width as usize, header.height as usize);
    let (width, height) = if orientation >= 5 { (h, w) } else { (w, h) };
    Ok(Opened {
        bytes,
        format,
        header,
        orientation,
        height,
        width,
    })
}

/// A decoded image in the form the image processor's resize consumes it.
pub(crate) enum ForPrep<'a> {
    /// All rows at once.
    Raster(PrepRaster),
    /// Rows still to be read, top to bottom (an 8-bit RGB PNG).
    Rows(Box<StreamRows<'a>>),
    /// An RGB JPEG to decode in stripes, resized horizontally on the way.
    Jpeg(JpegRows<'a>),
}

/// The second half of [`load_image`] for the image processor, which resizes the image to
/// `content` (height, width; sizes after orientation). The pixels are [`load_image`]'s, and so are
/// the errors; only the form differs:
/// - a JPEG that needs no orientation, decodes to RGB and changes width is decoded by the caller
///   in stripes of rows, resized horizontally as they come out ([`JpegRows`]), which saves
///   writing and reading back full-size images;
/// - an 8-bit RGB PNG without a colour key that needs no orientation is inflated on two threads
///   when its image data is large and splits ([`png::rgb8_split`], a raster), else read row by
///   row ([`StreamRows`]), so that the rows can be resized and processed while the rest is still
///   being inflated;
/// - anything else is [`load_image`]'s image.
pub(crate) fn decode_for_prep<'a>(
    src: &ImageSource,
    o: &'a Opened<'_>,
    opts: &DecodeOptions,
    content: (usize, usize),
) -> Result<ForPrep<'a>> {
    let h = &o.header;
    let (hh, hw) = (h.height as usize, h.width as usize);
    let max_bytes = max_decode_bytes(h);
    let upright = o.orientation == 1;
    if upright
        && o.format == Format::Jpeg
        && !(h.arithmetic && o.bytes.len() > jpeg::PIL_READ_BLOCK)
        && content.1 != hw
    {
        let g = jpeg::rgb_geometry(&o.bytes, max_bytes)
            .map_err(|f| f.into_error(&src.name(), o.format))?;
        if let Some(g) = g {
            if (g.width, g.height) != (hw, hh) {
                return Err(size_mismatch(
                    src,
                    o.format,
                    h,
                    g.width as u32,
                    g.height as u32,
                ));
            }
            return Ok(ForPrep::Jpeg(JpegRows {
                bytes: &o.bytes,
                max_bytes,
                g,
                input: src.name(),
            }));
        }
    }
    if upright && o.format == Format::Png {
        let rows = png::RgbRows::open(&o.bytes, max_bytes)
            .map_err(|f| f.into_error(&src.name(), o.format))?;
        if let Some(rows) = rows.filter(|r| (r.width, r.height) == (hw, hh)) {
            return Ok(ForPrep::Rows(Box::new(StreamRows {
                rows,
                bytes: &o.bytes,
                input: src.name(),
            })));
        }
    }
    let img = decode_checked(src, &o.bytes, opts, o.format, h, o.orientation)?;
    let (height, width) = (img.height() as usize, img.width() as usize);
    Ok(ForPrep::Raster(PrepRaster {
        height,
        width,
        row_width: width,
        rows: img.into_raw(),
    }))
}

/// An image's RGB rows, read on demand (see [`ForPrep::Rows`]).
pub(crate) struct StreamRows<'a> {
    rows: png::RgbRows<'a>,
    /// The whole file.
    bytes: &'a [u8],
    input: String,
}

impl StreamRows<'_> {
    pub(crate) fn height(&self) -> usize {
        self.rows.height
    }

    pub(crate) fn width(&self) -> usize {
        self.rows.width
    }

    /// The file's length in bytes.
    pub(crate) fn file_len(&self) -> usize {
        self.bytes.len()
    }

    /// The image inflated on two threads, each thread's rows handed to a callback on it
    /// ([`png::rgb8_split`] says which and when). `None` when the file's image data does not
    /// split or a check failed (then [`StreamRows::read`] reads it).
    pub(crate) fn split<P: Send, Q>(
        &self,
        first: impl FnOnce(&[u8], usize) -> (P, Q) + Send,
        first_after: impl FnOnce(Q, &[u8]) + Send,
        second: impl FnOnce(P, usize, &[u8]) + Send,
    ) -> Option<()> {
        png::rgb8_split(
            self.bytes,
            self.rows.width,
            self.rows.height,
            first,
            first_after,
            second,
        )
    }

    /// Reads the next `rows.len() / (width * 3)` rows into `rows`.
    pub(crate) fn read(&mut self, rows: &mut [u8]) -> Result<()> {
        self.rows
            .read(rows)
            .map_err(|f| f.into_error(&self.input, Format::Png))
    }

    /// After the last row: reads the rest of the image data, failing where [`load_image`] would.
    pub(crate) fn finish(self) -> Result<()> {
        let input = self.input;
        self.rows
            .finish()
            .map_err(|f| f.into_error(&input, Format::Png))
    }
}

/// An RGB JPEG's rows, decoded stripe by stripe on demand (see [`ForPrep::Jpeg`]).
pub(crate) struct JpegRows<'a> {
    bytes: &'a [u8],
    max_bytes: usize,
    g: jpeg::Geometry,
    input: String,
}

impl JpegRows<'_> {
    pub(crate) fn height(&self) -> usize {
        self.g.height
    }

    pub(crate) fn width(&self) -> usize {
        self.g.width
    }

    /// Row ranges that cost the same to decode on `threads` threads: `0 = b[0] < ... = height`.
    pub(crate) fn stripe_starts(&self, threads: usize) -> Vec<usize> {
        jpeg::stripe_starts(&self.g, threads)
    }

    /// Decodes rows `from..to`, resized by `pass`, handing them in order to `sink(first_row,
    /// rows)`; with `finish`, reads the rest of the file, failing where [`load_image`] would.
    pub(crate) fn decode(
        &self,
        from: usize,
        to: usize,
        finish: bool,
        pass: &crate::resize::HorizontalPass,
        sink: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<()> {
        jpeg::decode_rows_hresized(
            self.bytes,
            self.max_bytes,
            &self.g,
            from,
            to,
            finish,
            pass,
            sink,
        )
        .map_err(|f| f.into_error(&self.input, Format::Jpeg))
    }
}
