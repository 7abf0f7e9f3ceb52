//! Safe wrapper of `shim.c` (the `video` feature): open a video file, read its metadata as
//! torchcodec reports it, and decode frames by index to RGB24 as torchcodec converts them.

use super::file::VideoInfo;
use crate::error::{PrepError, Result};
use image::RgbImage;
use std::ffi::{CStr, CString, c_char, c_int};
use std::path::Path;
use std::ptr::NonNull;

#[repr(C)]
struct RawInfo {
    num_frames: i64,
    begin_seconds: f64,
    end_seconds: f64,
    fps_header: f64,
    width: i32,
    height: i32,
    coded_width: i32,
    coded_height: i32,
    rotation: i32,
    bits_per_component: i32,
    codec: [c_char; 64],
    pix_fmt: [c_char; 32],
    container: [c_char; 32],
}

#[repr(C)]
struct RawVideo {
    _opaque: [u8; 0],
}

unsafe extern "C" {
    fn g5v_open(
        path: *const c_char,
        out: *mut *mut RawVideo,
        info: *mut RawInfo,
        err: *mut c_char,
        errlen: usize,
    ) -> c_int;
    fn g5v_frame(
        v: *mut RawVideo,
        index: i64,
        out: *mut u8,
        out_len: usize,
        width: i32,
        height: i32,
        err: *mut c_char,
        errlen: usize,
    ) -> c_int;
    fn g5v_close(v: *mut RawVideo);
}

const E_OPEN: c_int = -1;
const E_NO_VIDEO: c_int = -2;
const E_NO_DECODER: c_int = -3;
const E_CORRUPT: c_int = -4;
const E_ROTATION: c_int = -6;

fn text(buf: &[c_char]) -> String {
    // SAFETY: the shim NUL-terminates every string it writes (snprintf), and the buffers start
    // zeroed, so a NUL lies within `buf`.
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

/// An open video file: its best video stream, scanned, ready to decode.
pub struct Decoder {
    raw: NonNull<RawVideo>,
    pub info: VideoInfo,
    input: String,
}

// SAFETY: the handle owns its FFmpeg contexts and is used by one thread at a time (`&mut self`);
// FFmpeg contexts may move between threads.
unsafe impl Send for Decoder {}

impl Decoder {
    /// Opens `path` (named `input` in errors) and scans its packets (no frame is decoded).
    pub fn open(path: &Path, input: &str) -> Result<Self> {
        let c = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| {
            PrepError::NotAVideo {
                input: input.into(),
                detail: "the path holds a NUL byte".into(),
            }
        })?;
        let mut raw: *mut RawVideo = std::ptr::null_mut();
        // SAFETY: RawInfo is plain data; all-zero is a valid value.
        let mut info: RawInfo = unsafe { std::mem::zeroed() };
        let mut err = [0 as c_char; 256];
        // SAFETY: valid C string, out-pointers to live locals, `err` of the length given.
        let rc = unsafe { g5v_open(c.as_ptr(), &mut raw, &mut info, err.as_mut_ptr(), err.len()) };
        let detail = text(&err);
        let codec = text(&info.codec);
        let container = text(&info.container);
        let input = input.to_string();
        match rc {
            0 => {}
            E_OPEN => return Err(PrepError::NotAVideo { input, detail }),
            E_NO_VIDEO => return Err(PrepError::NoVideoStream { input }),
            E_NO_DECODER => return Err(PrepError::VideoCodec { input, codec }),
            E_CORRUPT | E_ROTATION => {
                return Err(PrepError::VideoCorrupt {
                    input,
                    codec,
                    container,
                    detail,
                });
            }
            _ => return Err(PrepError::Video(format!("{input}: {detail}"))),
        }
        let raw =
            NonNull::new(raw).ok_or_else(|| PrepError::Video(format!("{input}: no handle")))?;
        let info = VideoInfo::from_scan(
            info.num_frames.max(0) as usize,
            info.begin_seconds,
            info.end_seconds,
            info.fps_header,
            info.width.max(0) as usize,
            info.height.max(0) as usize,
            info.rotation,
            codec,
            text(&info.pix_fmt),
            container,
            info.bits_per_component.max(0) as u32,
        );
        Ok(Decoder { raw, info, input })
    }

    /// Frame `index` (in presentation order) as RGB24 of the stream's (rotated) size. Indices
    /// must not decrease from one call to the next.
    pub fn frame(&mut self, index: usize) -> Result<RgbImage> {
        let (w, h) = (self.info.width, self.info.height);
        let len = w
            .checked_mul(h)
            .and_then(|p| p.checked_mul(3))
            .ok_or_else(|| PrepError::Video(format!("{}: frame too large", self.input)))?;
        // swscale's SIMD writers may store past the last pixel of a row (torchcodec avoids
        // swscale for widths that are not multiples of 32 for this reason): a little slack.
        let mut buf = vec![0u8; len + 256];
        let mut err = [0 as c_char; 256];
        // SAFETY: the handle is live (owned), `buf` holds `len` bytes, `err` its length.
        let rc = unsafe {
            g5v_frame(
                self.raw.as_ptr(),
                index as i64,
                buf.as_mut_ptr(),
                len,
                w as i32,
                h as i32,
                err.as_mut_ptr(),
                err.len(),
            )
        };
        if rc != 0 {
            return Err(PrepError::VideoCorrupt {
                input: self.input.clone(),
                codec: self.info.codec.clone(),
                container: self.info.container.clone(),
                detail: format!("frame {index}: {}", text(&err)),
            });
        }
        buf.truncate(len);
        RgbImage::from_raw(w as u32, h as u32, buf)
            .ok_or_else(|| PrepError::Video(format!("{}: frame buffer size", self.input)))
    }
}

impl Drop for Decoder {
    fn drop(&mut self) {
        // SAFETY: the handle came from g5v_open and is closed once.
        unsafe { g5v_close(self.raw.as_ptr()) }
    }
}
