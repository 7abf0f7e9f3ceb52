//! libtiff 4.7.2 built from source (see `build.rs`), with the few entry points glm5v-prep's TIFF
//! decoder calls, and `src/glue.c`'s helpers: a TIFF opened from memory whose errors are kept
//! in [`Src::error`] rather than printed, typed tag getters, and Pillow's RGBA read.
#![allow(non_camel_case_types)]

use libc::{c_char, c_int, c_void};

// Link the codec libraries libtiff calls (built by these crates from their sources).
use libz_sys as _;
use lzma_sys as _;
use mozjpeg_sys as _;

/// libtiff's handle.
#[repr(C)]
pub struct TIFF {
    _private: [u8; 0],
}

/// A TIFF file in memory (`glm5v_tiff_src` in `glue.c`): must outlive the `TIFF` opened on it.
#[repr(C)]
pub struct Src {
    pub data: *const u8,
    pub size: u64,
    pub pos: u64,
    /// The first error libtiff reported, NUL-terminated (empty when none).
    pub error: [c_char; 400],
}

pub type tmsize_t = i64;

pub const TIFFTAG_IMAGEWIDTH: u32 = 256;
pub const TIFFTAG_IMAGELENGTH: u32 = 257;
pub const TIFFTAG_BITSPERSAMPLE: u32 = 258;
pub const TIFFTAG_COMPRESSION: u32 = 259;
pub const TIFFTAG_PHOTOMETRIC: u32 = 262;
pub const TIFFTAG_FILLORDER: u32 = 266;
pub const TIFFTAG_SAMPLESPERPIXEL: u32 = 277;
pub const TIFFTAG_ROWSPERSTRIP: u32 = 278;
pub const TIFFTAG_PLANARCONFIG: u32 = 284;
pub const TIFFTAG_TILEWIDTH: u32 = 322;
pub const TIFFTAG_TILELENGTH: u32 = 323;
pub const TIFFTAG_SAMPLEFORMAT: u32 = 339;

unsafe extern "C" {
    pub fn glm5v_tiff_open(src: *mut Src, max_alloc: i64) -> *mut TIFF;
    pub fn glm5v_tiff_get_u16(t: *mut TIFF, tag: u32, defaulted: c_int, v: *mut u16) -> c_int;
    pub fn glm5v_tiff_get_u32(t: *mut TIFF, tag: u32, defaulted: c_int, v: *mut u32) -> c_int;
    pub fn glm5v_tiff_extrasamples(
        t: *mut TIFF,
        defaulted: c_int,
        count: *mut u16,
        values: *mut *const u16,
    ) -> c_int;
    pub fn glm5v_tiff_colormap(
        t: *mut TIFF,
        r: *mut *const u16,
        g: *mut *const u16,
        b: *mut *const u16,
    ) -> c_int;
    pub fn glm5v_tiff_set_jpeg_rgb(t: *mut TIFF) -> c_int;
    pub fn glm5v_tiff_read_rgba(
        t: *mut TIFF,
        width: u32,
        height: u32,
        rows_per_block: u32,
        out: *mut u32,
    ) -> c_int;

    pub fn TIFFClose(t: *mut TIFF);
    pub fn TIFFIsTiled(t: *mut TIFF) -> c_int;
    pub fn TIFFStripSize(t: *mut TIFF) -> tmsize_t;
    pub fn TIFFScanlineSize(t: *mut TIFF) -> tmsize_t;
    pub fn TIFFTileSize(t: *mut TIFF) -> tmsize_t;
    pub fn TIFFTileRowSize(t: *mut TIFF) -> tmsize_t;
    pub fn TIFFComputeStrip(t: *mut TIFF, row: u32, sample: u16) -> u32;
    pub fn TIFFReadEncodedStrip(
        t: *mut TIFF,
        strip: u32,
        buf: *mut c_void,
        size: tmsize_t,
    ) -> tmsize_t;
    pub fn TIFFReadTile(t: *mut TIFF, buf: *mut c_void, x: u32, y: u32, z: u32, s: u16)
    -> tmsize_t;
    pub fn TIFFGetVersion() -> *const c_char;
}
