//! One AV1 frame through rav1d (the Rust port of dav1d; Pillow's libavif decodes with dav1d),
//! driven as libavif's `codec_dav1d.c` drives dav1d: default settings (film grain applied),
//! operating point 0, one frame of delay, the first picture the sample yields.
//! AV1 decoding is normative, so the planes equal dav1d's.

use super::Fail;
use rav1d::include::dav1d::data::Dav1dData;
use rav1d::include::dav1d::dav1d::{Dav1dContext, Dav1dSettings};
use rav1d::include::dav1d::headers::{
    DAV1D_PIXEL_LAYOUT_I400, DAV1D_PIXEL_LAYOUT_I420, DAV1D_PIXEL_LAYOUT_I422,
    DAV1D_PIXEL_LAYOUT_I444,
};
use rav1d::include::dav1d::picture::Dav1dPicture;
use rav1d::src::lib as d;
use std::ptr::NonNull;

/// `DAV1D_ERR(EAGAIN)` on Linux.
const EAGAIN: i32 = -11;

/// Chroma layout of a decoded frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    I400,
    I420,
    I422,
    I444,
}

impl Layout {
    /// Chroma plane size for a `w` x `h` luma plane (0 x 0 for 4:0:0).
    pub(crate) fn chroma_dims(self, w: usize, h: usize) -> (usize, usize) {
        match self {
            Layout::I400 => (0, 0),
            Layout::I420 => (w.div_ceil(2), h.div_ceil(2)),
            Layout::I422 => (w.div_ceil(2), h),
            Layout::I444 => (w, h),
        }
    }
}

/// A decoded frame, planes tightly packed: `y`/`u`/`v` for 8-bit samples, `y16`/`u16`/`v16`
/// for 10- and 12-bit ones (the other set empty).
pub(crate) struct Frame {
    pub width: usize,
    pub height: usize,
    pub layout: Layout,
    pub depth: u8,
    pub y: Vec<u8>,
    pub u: Vec<u8>,
    pub v: Vec<u8>,
    pub y16: Vec<u16>,
    pub u16: Vec<u16>,
    pub v16: Vec<u16>,
    /// The sequence header's colour description: primaries, transfer, matrix, full range.
    pub cicp: (u8, u8, u8, bool),
}

/// What the decoder holds for one sample: the context, the input buffer, the output picture.
/// Released in that picture-data-context order when dropped (a picture of nothing, empty data
/// and no context are no-ops), unless dropped while a panic unwinds (see [`decode`]).
#[derive(Default)]
struct Decoder {
    ctx: Option<Dav1dContext>,
    data: Dav1dData,
    pic: Dav1dPicture,
}

impl Drop for Decoder {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        // SAFETY: data from dav1d_data_create, the picture from dav1d_get_picture (or empty),
        // the context from dav1d_open: each released once (released, each is empty).
        unsafe {
            d::dav1d_data_unref(NonNull::new(&mut self.data));
            d::dav1d_picture_unref(NonNull::new(&mut self.pic));
            d::dav1d_close(NonNull::new(&mut self.ctx));
        }
    }
}

/// Whether a panic at `location` is one of rav1d's, which the AVIF decoder catches and answers
/// as a `Corrupt` error: a panic hook may leave those unprinted (the CLI does; the fuzz targets
/// let them unwind) and print every other. prep installs such a hook itself for the panics raised
/// inside its decoder (see `quiet_caught_panics`), so this is for hooks a program sets later.
pub fn panic_is_caught(location: Option<&std::panic::Location<'_>>) -> bool {
    location.is_some_and(|l| l.file().contains("rav1d/src/"))
}

thread_local! {
    /// This thread is inside [`decode`], whose `catch_unwind` answers rav1d's panics.
    static DECODING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Installs, once per process, a panic hook in front of the one in place (the default, or one
/// the program set before its first AVIF) that leaves unprinted the panics of rav1d raised while
/// this thread is inside [`decode`], which catches them and answers a typed `Corrupt` error:
/// without it a library user (the Python package among them) saw "thread '...' panicked at
/// third_party/rav1d/..." on stderr before that error. Every other panic, and a rav1d panic
/// outside [`decode`], goes to the hook that was there. A hook the program sets afterwards
/// replaces this one (it can filter with [`panic_is_caught`], as the CLI's does).
fn quiet_caught_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if DECODING.with(|d| d.get()) && panic_is_caught(info.location()) {
                return;
            }
            previous(info);
        }));
    });
}

/// Marks this thread as inside [`decode`] until dropped (also when a panic unwinds through it).
struct Decoding;

impl Decoding {
    fn enter() -> Self {
        DECODING.with(|d| d.set(true));
        Decoding
    }
}

impl Drop for Decoding {
    fn drop(&mut self) {
        DECODING.with(|d| d.set(false));
    }
}

/// Decodes the first frame of one AV1 sample (a temporal unit of OBUs). `max_pixels` bounds the
/// frame size the decoder accepts (dav1d's `frame_size_limit`).
pub(crate) fn decode(sample: &[u8], max_pixels: u64) -> Result<Frame, Fail> {
    if sample.is_empty() {
        return Err(Fail::Corrupt("the AV1 sample is empty".into()));
    }
    quiet_caught_panics();
    let _decoding = Decoding::enter();
    // rav1d is memory-safe Rust; a malformed stream that trips one of its checks panics
    // rather than reading out of bounds: that is a corrupt file here, not a crash (the vendored
    // rav1d's C API unwinds, see third_party/rav1d/VENDORED.md). The decoder's state lives out here so
    // that after such a panic the context, with its frame buffers, is still closed (Rust state
    // that unwinding kept consistent; a close that panicked too would leave it leaked): a
    // crafted file cannot make each decode leak megabytes. The input buffer and the picture
    // are C-side copies of references that rav1d may have taken and dropped while unwinding:
    // releasing them again was a use after free (ASan, finding F9), so they are forgotten
    // (at most the sample's bytes stay allocated).
    let mut dec = Decoder::default();
    let run = std::panic::AssertUnwindSafe(|| decode_inner(&mut dec, sample, max_pixels));
    match std::panic::catch_unwind(run) {
        Ok(r) => r,
        Err(_) => {
            let mut ctx = Decoder::default();
            ctx.ctx = dec.ctx.take();
            // plain C structs: overwritten, not released
            dec.data = Dav1dData::default();
            dec.pic = Dav1dPicture::default();
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(ctx)));
            Err(Fail::Corrupt(
                "the AV1 decoder stopped on malformed data".into(),
            ))
        }
    }
}

fn decode_inner(dec: &mut Decoder, sample: &[u8], max_pixels: u64) -> Result<Frame, Fail> {
    let corrupt = |what: &str| Fail::Corrupt(format!("AV1: {what}"));
    // SAFETY: the C API of rav1d used as dav1d's: settings written by dav1d_default_settings,
    // the context and picture released by their guards, the data buffer owned by the decoder.
    unsafe {
        let mut s = std::mem::MaybeUninit::<Dav1dSettings>::uninit();
        d::dav1d_default_settings(NonNull::new_unchecked(s.as_mut_ptr()));
        let mut s = s.assume_init();
        s.n_threads = 1;
        s.max_frame_delay = 1;
        s.operating_point = 0;
        s.all_layers = 0;
        s.frame_size_limit = max_pixels.min(u32::MAX as u64) as u32;
        // No logger (rav1d's default prints to stderr): the logger is two nullable pointers.
        let logger = std::ptr::addr_of_mut!(s.logger);
        std::ptr::write_bytes(logger.cast::<u8>(), 0, std::mem::size_of_val(&*logger));
        if d::dav1d_open(NonNull::new(&mut dec.ctx), NonNull::new(&mut s)).0 != 0
            || dec.ctx.is_none()
        {
            return Err(corrupt("the decoder could not be opened"));
        }
        let c = dec.ctx;
        let Decoder { data, pic, .. } = dec;
        let buf = d::dav1d_data_create(NonNull::new(data), sample.len());
        if buf.is_null() {
            return Err(Fail::Limits);
        }
        std::ptr::copy_nonoverlapping(sample.as_ptr(), buf, sample.len());
        let mut got = false;
        loop {
            if data.sz > 0 {
                let r = d::dav1d_send_data(c, NonNull::new(&mut *data)).0;
                if r < 0 && r != EAGAIN {
                    d::dav1d_data_unref(NonNull::new(&mut *data));
                    return Err(corrupt(
                        "the stream could not be decoded (corrupt or truncated)",
                    ));
                }
            }
            let r = d::dav1d_get_picture(c, NonNull::new(&mut *pic)).0;
            if r == EAGAIN {
                if data.sz > 0 {
                    continue;
                }
                break;
            } else if r < 0 {
                d::dav1d_data_unref(NonNull::new(&mut *data));
                return Err(corrupt(
                    "the frame could not be decoded (corrupt or truncated)",
                ));
            } else {
                got = true;
                break;
            }
        }
        d::dav1d_data_unref(NonNull::new(&mut *data));
        if !got {
            return Err(corrupt("the sample holds no complete frame (truncated)"));
        }
        let p = &*pic;
        let depth = p.p.bpc;
        if !matches!(depth, 8 | 10 | 12) {
            return Err(corrupt("unknown bit depth"));
        }
        let layout = match p.p.layout {
            DAV1D_PIXEL_LAYOUT_I400 => Layout::I400,
            DAV1D_PIXEL_LAYOUT_I420 => Layout::I420,
            DAV1D_PIXEL_LAYOUT_I422 => Layout::I422,
            DAV1D_PIXEL_LAYOUT_I444 => Layout::I444,
            _ => return Err(corrupt("unknown chroma layout")),
        };
        let (w, h) = (p.p.w.max(0) as usize, p.p.h.max(0) as usize);
        if w == 0 || h == 0 {
            return Err(corrupt("empty frame"));
        }
        let seq = p.seq_hdr.ok_or_else(|| corrupt("no sequence header"))?;
        let seq = seq.as_ref();
        let cicp = (
            seq.pri as u8,
            seq.trc as u8,
            seq.mtrx as u8,
            seq.color_range != 0,
        );
        // Each plane row by row: `bytes` per sample (2 above 8 bits, native-endian u16).
        let rows = |i: usize, pw: usize, ph: usize, bytes: usize| -> Result<Vec<u8>, Fail> {
            let stride = p.stride[if i == 0 { 0 } else { 1 }];
            let base = p.data[i].ok_or_else(|| corrupt("missing plane"))?;
            if stride < (pw * bytes) as isize {
                return Err(corrupt("plane stride below its width"));
            }
            let mut out = Vec::new();
            out.try_reserve_exact(pw * ph * bytes)
                .map_err(|_| Fail::Limits)?;
            for row in 0..ph {
                let ptr = base.as_ptr().cast::<u8>().offset(row as isize * stride);
                out.extend_from_slice(std::slice::from_raw_parts(ptr, pw * bytes));
            }
            Ok(out)
        };
        let (cw, ch) = layout.chroma_dims(w, h);
        let chroma = layout != Layout::I400;
        let mut f = Frame {
            width: w,
            height: h,
            layout,
            depth: depth as u8,
            y: Vec::new(),
            u: Vec::new(),
            v: Vec::new(),
            y16: Vec::new(),
            u16: Vec::new(),
            v16: Vec::new(),
            cicp,
        };
        if depth == 8 {
            f.y = rows(0, w, h, 1)?;
            if chroma {
                f.u = rows(1, cw, ch, 1)?;
                f.v = rows(2, cw, ch, 1)?;
            }
        } else {
            let wide = |b: Vec<u8>| -> Vec<u16> {
                b.chunks_exact(2)
                    .map(|c| u16::from_ne_bytes([c[0], c[1]]))
                    .collect()
            };
            f.y16 = wide(rows(0, w, h, 2)?);
            if chroma {
                f.u16 = wide(rows(1, cw, ch, 2)?);
                f.v16 = wide(rows(2, cw, ch, 2)?);
            }
        }
        Ok(f)
    }
}
