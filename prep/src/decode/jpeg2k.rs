//! JPEG 2000 (codestreams and JP2 files) as Pillow 13.0.0 reads it: the size and mode from
//! `Jpeg2KImagePlugin._open` (the SIZ segment of a codestream, the `ihdr`/`colr`/`pclr` boxes of
//! a JP2 file), the pixels from OpenJPEG through the calls and unpackers of
//! `libImaging/Jpeg2KDecode.c`.
//!
//! OpenJPEG is `openjpeg-sys`'s bundled 2.5.3, built with `cc`; Pillow 13.0.0's wheels bundle
//! 2.5.4, whose only change to decoding is in `opj_jp2_read_header`'s failure path (the colour
//! space is no longer set on an image whose header failed; Pillow stops there either way).
//!
//! The decode is Pillow's, step by step:
//! - the stream reads the file from its start with Pillow's read and skip callbacks, including
//!   the skip callback's quirk of returning the new file position rather than the bytes skipped
//!   (OpenJPEG counts that as skipped bytes), and no seek callback;
//! - `reduce` and `layers` are 0 (`load_image` sets neither);
//! - tiles are read one by one with `opj_read_tile_header` / `opj_decode_tile_data` (so no
//!   palette, channel definition or colour conversion from OpenJPEG's `opj_decode`), checked
//!   against the image size from the plugin's header, and unpacked with Pillow's rules: a
//!   component of precision `p` is `(v + offset) >> (p - 8)` (or `<< (8 - p)`) with a rounding
//!   offset of `1 << (p - 9)` and, for signed components, `1 << (p - 1)`, truncated to 8 bits
//!   (16 for I;16); subsampled components are read at `x / dx`, `y / dy` within planes laid out
//!   with floor divisions; sYCC is converted with `ImagingConvertYCbCr2RGB`.
//!
//! A JP2 palette (`pclr`) gives mode P as in Pillow: the indices unpacked as gray, the entries
//! added one by one to an `ImagePalette` (`getcolor`: a repeated colour keeps its first index,
//! the rest of the 256 entries stay black). Palettes PIL reads with an alpha band (PA), with
//! other than 3 or 4 columns, or in CMYK are refused by name (not reproduced).

use super::Fail;
use super::bytes::{be16, be32, be64};
use super::modes::{Pixels, Raster, Transparency};
use openjpeg_sys as opj;
use std::ffi::{CStr, c_char, c_void};
use unpack::{
    CLRSPC_GRAY, CLRSPC_SRGB, CLRSPC_SYCC, CLRSPC_UNKNOWN, CLRSPC_UNSPECIFIED, Canvas, Comp,
    UNPACKERS, unpack,
};

mod unpack;

/// The PIL mode `_open` gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    L,
    I16,
    La,
    Rgb,
    Rgba,
    Cmyk,
    /// P: a JP2 palette of RGB or RGBA entries.
    P,
    /// A JP2 palette not reproduced (PA, CMYK or short entries).
    Palette,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Codec {
    J2k,
    Jp2,
}

/// What `Jpeg2KImageFile._open` reads.
#[derive(Debug, Clone)]
pub(crate) struct Header {
    pub width: u32,
    pub height: u32,
    pub mode: Mode,
    codec: Codec,
    /// Mode P's palette.
    palette: Option<Box<[[u8; 4]; 256]>>,
}

fn bad(msg: &str) -> Fail {
    Fail::Corrupt(format!("{msg} (PIL cannot open it either)"))
}

/// `_parse_codestream` from `at` (just after the SOC and SIZ markers): size and mode from SIZ.
fn codestream(d: &[u8], at: usize) -> Result<(i64, i64, Option<Mode>), Fail> {
    let lsiz = be16(d, at).ok_or_else(|| bad("the SIZ segment is truncated"))? as usize;
    if lsiz < 38 {
        return Err(bad("SIZ marker length must be at least 38"));
    }
    // Python reads `lsiz` bytes (fewer at the end of the file) and unpacks 38 of them.
    let siz = &d[at..(at + lsiz).min(d.len())];
    if siz.len() < 38 {
        return Err(bad("the SIZ segment is truncated"));
    }
    let f = |o: usize| be32(siz, o).unwrap_or(0) as i64;
    let (xsiz, ysiz, xosiz, yosiz) = (f(4), f(8), f(12), f(16));
    let mode = match be16(siz, 36).unwrap_or(0) {
        1 => {
            let ssiz = *siz
                .get(38)
                .ok_or_else(|| bad("the SIZ segment is truncated"))?;
            Some(if (ssiz & 0x7f) + 1 > 8 {
                Mode::I16
            } else {
                Mode::L
            })
        }
        2 => Some(Mode::La),
        3 => Some(Mode::Rgb),
        4 => Some(Mode::Rgba),
        _ => None,
    };
    Ok((xsiz - xosiz, ysiz - yosiz, mode))
}

/// `_parse_comment` from `at`: its only effect on `load_image` is the errors it raises.
fn comment(d: &[u8], mut at: usize) -> Result<(), Fail> {
    loop {
        let Some(marker) = d.get(at..(at + 2).min(d.len())).filter(|m| !m.is_empty()) else {
            return Ok(());
        };
        let typ = *marker
            .get(1)
            .ok_or_else(|| bad("the codestream ends inside a marker"))?;
        if matches!(typ, 0x90 | 0xd9) {
            return Ok(());
        }
        let len = be16(d, at + 2).ok_or_else(|| bad("the codestream ends inside a marker"))?;
        if len < 2 {
            return Err(bad("marker length too small"));
        }
        if typ == 0x64 {
            return Ok(());
        }
        at = at + 2 + len as usize;
    }
}

/// A box header read as `BoxReader.next_box_type` reads it: (type, content start, content
/// length), or the error PIL raises.
fn next_box(d: &[u8], at: usize, end: Option<usize>) -> Result<([u8; 4], usize, usize), Fail> {
    let limit = end.unwrap_or(d.len());
    if at.checked_add(16).is_none() || at + 8 > limit {
        return Err(bad("the JP2 header ends inside a box header"));
    }
    let lbox = be32(d, at).unwrap_or(0) as u64;
    let tbox: [u8; 4] = d[at + 4..at + 8].try_into().unwrap_or_default();
    let (lbox, hlen) = if lbox == 1 {
        if at + 16 > limit {
            return Err(bad("the JP2 header ends inside a box header"));
        }
        (be64(d, at + 8).unwrap_or(0), 16u64)
    } else {
        (lbox, 8)
    };
    let start = at + hlen as usize;
    let len = lbox
        .checked_sub(hlen)
        .ok_or_else(|| bad("invalid JP2 box header length"))?;
    // Inside a box of known length the content must fit; at the top level PIL does not check.
    if end.is_some_and(|e| (start as u64).saturating_add(len) > e as u64) {
        return Err(bad("invalid JP2 box header length"));
    }
    let len = usize::try_from(len).map_err(|_| bad("JP2 box length too large"))?;
    Ok((tbox, start, len))
}

/// `_parse_jp2_header` (from offset 12) and the codestream checks `_open` makes after it.
fn jp2(d: &[u8]) -> Result<Header, Fail> {
    let mut at = 12;
    let (hstart, hlen) = loop {
        let (tbox, start, len) = next_box(d, at, None)?;
        if &tbox == b"jp2h" {
            if start.checked_add(len).is_none_or(|e| e > d.len()) {
                return Err(bad("the file ends inside the JP2 header box"));
            }
            break (start, len);
        }
        if &tbox == b"ftyp" && (len < 4 || start + 4 > d.len()) {
            return Err(bad("the JP2 ftyp box is truncated"));
        }
        at = start.saturating_add(len);
    };
    let h = &d[hstart..hstart + hlen];
    let mut size: Option<(i64, i64)> = None;
    let mut mode: Option<Mode> = None;
    let mut nc = None;
    // colr: Some("1"), Some("CMYK"), Some("L") as PIL names them.
    let mut colr: Option<&str> = None;
    let mut palette = None;
    let mut at = 0;
    let mut first = true;
    // `has_next_box`: position + what is left of the current box < length.
    while first || at < h.len() {
        first = false;
        let (tbox, s, len) = next_box(h, at, Some(h.len()))?;
        let field = |n: usize| -> Result<&[u8], Fail> {
            if n > len {
                return Err(bad("not enough data in a JP2 header box"));
            }
            Ok(&h[s..s + n])
        };
        match &tbox {
            b"ihdr" => {
                let f = field(11)?;
                let (height, width) = (be32(f, 0).unwrap_or(0), be32(f, 4).unwrap_or(0));
                let (n, bpc) = (be16(f, 8).unwrap_or(0), f[10]);
                size = Some((width as i64, height as i64));
                nc = Some(n);
                match n {
                    1 if bpc & 0x7f > 8 => mode = Some(Mode::I16),
                    1 => mode = Some(Mode::L),
                    2 => mode = Some(Mode::La),
                    3 => mode = Some(Mode::Rgb),
                    4 => mode = Some(Mode::Rgba),
                    _ => {}
                }
            }
            b"colr" => {
                let f = field(7)?;
                if f[0] == 1 {
                    match be32(f, 3).unwrap_or(0) {
                        0 | 15 => colr = Some("1"),
                        12 => {
                            colr = Some("CMYK");
                            if nc == Some(4) {
                                mode = Some(Mode::Cmyk);
                            }
                        }
                        17 => colr = Some("L"),
                        _ => {}
                    }
                }
            }
            b"pclr"
                if matches!(mode, Some(Mode::L | Mode::La)) && !matches!(colr, Some("1" | "L")) =>
            {
                let f = field(3)?;
                let (ne, npc) = (be16(f, 0).unwrap_or(0) as usize, f[2] as usize);
                let depths = field(3 + npc)?;
                if depths[3..].iter().all(|&b| b <= 8) {
                    // The entries are read one by one into an ImagePalette.
                    let entries = &field(3 + npc + ne * npc)?[3 + npc..];
                    let rgb = npc == 3 || (npc == 4 && colr != Some("CMYK"));
                    if mode == Some(Mode::L) && rgb {
                        let mut pal = super::modes::blank_palette();
                        let mut seen: Vec<&[u8]> = Vec::new();
                        for e in entries.chunks_exact(npc) {
                            if !seen.contains(&e) {
                                let slot = pal.get_mut(seen.len()).ok_or_else(|| {
                                    bad("the JP2 palette has more than 256 colours")
                                })?;
                                // An RGBA palette keeps its alpha (`convert("RGBA")`
                                // reads it; `convert("RGB")` does not).
                                slot[..npc].copy_from_slice(e);
                                seen.push(e);
                            }
                        }
                        palette = Some(pal);
                        mode = Some(Mode::P);
                    } else {
                        mode = Some(Mode::Palette);
                    }
                }
            }
            b"res " => {
                // Only `resc` is read (10 bytes): its errors are PIL's.
                let r = &h[s..s + len];
                let mut ra = 0;
                let mut rfirst = true;
                while rfirst || ra < r.len() {
                    rfirst = false;
                    let (t, rs, rl) = next_box(r, ra, Some(r.len()))?;
                    if &t == b"resc" {
                        if rl < 10 {
                            return Err(bad("not enough data in the JP2 resc box"));
                        }
                        break;
                    }
                    ra = rs + rl;
                }
            }
            _ => {}
        }
        at = s + len;
    }
    let ((w, hh), mode) = match (size, mode) {
        (Some(s), Some(m)) => (s, m),
        _ => return Err(bad("malformed JP2 header")),
    };
    // `_open` then reads 12 bytes after the header box; a codestream box that starts there has
    // its SIZ and comment markers parsed (errors count, the values do not).
    let after = hstart + hlen;
    if d.get(after..after + 12)
        .is_some_and(|b| b.ends_with(b"jp2c\xff\x4f\xff\x51"))
    {
        let (_, _, m) = codestream(d, after + 12)?;
        if m.is_none() {
            return Err(bad("unable to determine J2K image mode"));
        }
        let lsiz = be16(d, after + 12).unwrap_or(0) as usize;
        comment(d, after + 12 + lsiz)?;
    }
    let mut hd = finish(w, hh, mode, Codec::Jp2)?;
    hd.palette = palette;
    Ok(hd)
}

fn finish(w: i64, h: i64, mode: Mode, codec: Codec) -> Result<Header, Fail> {
    if w <= 0 || h <= 0 {
        return Err(bad(&format!("JPEG 2000 image size {w}x{h}")));
    }
    let (width, height) = (
        u32::try_from(w).map_err(|_| bad("image width too large"))?,
        u32::try_from(h).map_err(|_| bad("image height too large"))?,
    );
    Ok(Header {
        width,
        height,
        mode,
        codec,
        palette: None,
    })
}

/// `Jpeg2KImageFile._open`.
pub(crate) fn header(d: &[u8]) -> Result<Header, Fail> {
    if d.starts_with(b"\xff\x4f\xff\x51") {
        let (w, h, mode) = codestream(d, 4)?;
        let mode = mode.ok_or_else(|| bad("unable to determine J2K image mode"))?;
        let lsiz = be16(d, 4).unwrap_or(0) as usize;
        comment(d, 4 + lsiz)?;
        finish(w, h, mode, Codec::J2k)
    } else if d.starts_with(b"\x00\x00\x00\x0cjP  \x0d\x0a\x87\x0a") {
        jp2(d)
    } else {
        Err(bad("not a JPEG 2000 file"))
    }
}

pub(crate) fn dims(d: &[u8]) -> Result<(u32, u32), Fail> {
    let h = header(d)?;
    Ok((h.width, h.height))
}

/// Pillow's file reader behind OpenJPEG's stream.
struct Source {
    data: *const u8,
    len: usize,
    pos: usize,
}

/// `j2k_read`: up to `n` bytes from the file position; nothing left is the end of stream.
unsafe extern "C" fn read_fn(buf: *mut c_void, n: usize, user: *mut c_void) -> usize {
    // SAFETY: `user` is the `Source` given to the stream, alive for the stream's life; `buf` has
    // room for `n` bytes (OpenJPEG's contract); `data` holds `len` bytes.
    unsafe {
        let s = &mut *(user as *mut Source);
        let k = n.min(s.len.saturating_sub(s.pos));
        if k == 0 {
            return usize::MAX;
        }
        std::ptr::copy_nonoverlapping(s.data.add(s.pos), buf as *mut u8, k);
        s.pos += k;
        k
    }
}

/// `j2k_skip`: seeks relative to the position (a Python file may seek past its end) and
/// returns the new position (not the bytes skipped), or -1 when that is 0.
unsafe extern "C" fn skip_fn(n: i64, user: *mut c_void) -> i64 {
    // SAFETY: as in `read_fn`.
    let s = unsafe { &mut *(user as *mut Source) };
    let to = s.pos as i64 + n;
    if to >= 0 {
        s.pos = to as usize;
    }
    match s.pos {
        0 => -1,
        p => p as i64,
    }
}

unsafe extern "C" fn error_fn(msg: *const c_char, user: *mut c_void) {
    // SAFETY: `user` is the `String` given with the handler; `msg` a C string from OpenJPEG.
    unsafe {
        let last = &mut *(user as *mut String);
        if !msg.is_null() {
            *last = CStr::from_ptr(msg).to_string_lossy().trim().to_string();
        }
    }
}

/// OpenJPEG's handles, released in Pillow's order.
struct Handles {
    stream: *mut opj::opj_stream_t,
    codec: *mut opj::opj_codec_t,
    image: *mut opj::opj_image_t,
}

impl Drop for Handles {
    fn drop(&mut self) {
        // SAFETY: each pointer is null or owned here, and released once.
        unsafe {
            if !self.codec.is_null() {
                opj::opj_destroy_codec(self.codec);
            }
            if !self.image.is_null() {
                opj::opj_image_destroy(self.image);
            }
            if !self.stream.is_null() {
                opj::opj_stream_destroy(self.stream);
            }
        }
    }
}

fn broken(what: &str, err: &str) -> Fail {
    let detail = if err.is_empty() {
        String::new()
    } else {
        format!(" (OpenJPEG: {err})")
    };
    Fail::Corrupt(format!(
        "{what}{detail}; PIL fails on it too (broken data stream)"
    ))
}

/// `Image.open` + `load` of a JPEG 2000 file: the raster in the plugin's mode.
pub(crate) fn decode(d: &[u8], max_bytes: usize) -> Result<Raster, Fail> {
    let hd = header(d)?;
    if hd.mode == Mode::Palette {
        return Err(palette());
    }
    let (xsize, ysize) = (hd.width as usize, hd.height as usize);
    let stride = match hd.mode {
        Mode::L | Mode::P => 1,
        Mode::I16 => 2,
        _ => 4,
    };
    let total = xsize
        .checked_mul(ysize)
        .and_then(|n| n.checked_mul(stride))
        .filter(|&n| n <= max_bytes)
        .ok_or(Fail::Limits)?;
    let mut im = Canvas {
        buf: vec![0u8; total],
        xsize,
        stride,
    };
    let mut src = Box::new(Source {
        data: d.as_ptr(),
        len: d.len(),
        pos: 0,
    });
    let mut err = Box::new(String::new());
    // SAFETY: OpenJPEG's C API used as `j2k_decode_entry` uses it; `src` and `err` outlive the
    // handles (dropped first, at the end of this function), the tile buffer is at least the
    // size given to `opj_decode_tile_data`, and the image pointers are read only while the
    // image is alive and after `opj_read_header` succeeded.
    unsafe {
        let mut hs = Handles {
            stream: opj::opj_stream_create(opj::OPJ_J2K_STREAM_CHUNK_SIZE as usize, 1),
            codec: std::ptr::null_mut(),
            image: std::ptr::null_mut(),
        };
        if hs.stream.is_null() {
            return Err(broken("OpenJPEG could not create a stream", ""));
        }
        opj::opj_stream_set_read_function(hs.stream, Some(read_fn));
        opj::opj_stream_set_skip_function(hs.stream, Some(skip_fn));
        opj::opj_stream_set_user_data(hs.stream, &mut *src as *mut Source as *mut c_void, None);
        opj::opj_stream_set_user_data_length(hs.stream, d.len() as u64);
        let mut params: opj::opj_dparameters_t = std::mem::zeroed();
        opj::opj_set_default_decoder_parameters(&mut params);
        params.cp_reduce = 0;
        params.cp_layer = 0;
        hs.codec = opj::opj_create_decompress(match hd.codec {
            Codec::J2k => opj::CODEC_FORMAT::OPJ_CODEC_J2K,
            Codec::Jp2 => opj::CODEC_FORMAT::OPJ_CODEC_JP2,
        });
        if hs.codec.is_null() {
            return Err(broken("OpenJPEG could not create a decoder", ""));
        }
        opj::opj_set_error_handler(
            hs.codec,
            Some(error_fn),
            &mut *err as *mut String as *mut c_void,
        );
        opj::opj_setup_decoder(hs.codec, &mut params);
        if opj::opj_read_header(hs.stream, hs.codec, &mut hs.image) == 0 || hs.image.is_null() {
            return Err(broken("OpenJPEG could not read the header", &err));
        }
        let image = &*hs.image;
        let ncomp = image.numcomps;
        if !(1..=4).contains(&ncomp) || image.comps.is_null() {
            return Err(broken(&format!("{ncomp} components"), ""));
        }
        let comps: Vec<Comp> = std::slice::from_raw_parts(image.comps, ncomp as usize)
            .iter()
            .map(|c| Comp {
                prec: c.prec,
                sgnd: c.sgnd != 0,
                dx: c.dx,
                dy: c.dy,
            })
            .collect();
        let subsampling = comps.iter().position(|c| c.dx != 1 || c.dy != 1);
        let mut space = *(&image.color_space as *const opj::OPJ_COLOR_SPACE as *const i32);
        if space == CLRSPC_UNKNOWN || space == CLRSPC_UNSPECIFIED {
            space = match (ncomp, subsampling) {
                (1 | 2, _) => CLRSPC_GRAY,
                (_, None | Some(0 | 3)) => CLRSPC_SRGB,
                _ => CLRSPC_SYCC,
            };
        }
        let unpacker = UNPACKERS
            .iter()
            .find(|(m, s, n, sub, _)| {
                *s == space && *n == ncomp && (*sub || subsampling.is_none()) && *m == hd.mode
            })
            .map(|u| u.4)
            .ok_or_else(|| {
                broken(
                    &format!(
                        "no unpacker for mode {:?} with {ncomp} components in colour space \
                         {space}{}",
                        hd.mode,
                        if subsampling.is_some() {
                            ", subsampled"
                        } else {
                            ""
                        }
                    ),
                    "",
                )
            })?;
        let (ix0, iy0) = (image.x0, image.y0);
        let mut tile: Vec<u8> = Vec::new();
        loop {
            let (mut index, mut size) = (0u32, 0u32);
            let (mut x0, mut y0, mut x1, mut y1) = (0i32, 0i32, 0i32, 0i32);
            let (mut nb, mut go_on) = (0u32, 0i32);
            if opj::opj_read_tile_header(
                hs.codec, hs.stream, &mut index, &mut size, &mut x0, &mut y0, &mut x1, &mut y1,
                &mut nb, &mut go_on,
            ) == 0
            {
                return Err(broken("OpenJPEG could not read a tile header", &err));
            }
            if go_on == 0 {
                break;
            }
            if x0 >= x1
                || y0 >= y1
                || x0 < 0
                || y0 < 0
                || (x0 as u32) < ix0
                || (y0 as u32) < iy0
                || ((x1 as u32).wrapping_sub(ix0) as i32) as i64 > xsize as i64
                || ((y1 as u32).wrapping_sub(iy0) as i32) as i64 > ysize as i64
            {
                return Err(broken("a tile lies outside the image", ""));
            }
            if nb != ncomp {
                return Err(broken("a tile's component count differs", ""));
            }
            let (tw, th) = ((x1 - x0) as u32, (y1 - y0) as u32);
            let tcw: u32 = comps.iter().map(|c| c.csiz() as u32).sum();
            if tw > u32::MAX / tcw
                || th > u32::MAX / tcw
                || th.checked_mul(tcw).is_none_or(|m| tw > u32::MAX / m)
                || tw.checked_mul(tcw).is_none_or(|m| th > u32::MAX / m)
            {
                return Err(broken("a tile is too large", ""));
            }
            let bytes = (tw * th * tcw).max(size) as usize;
            if bytes > max_bytes {
                return Err(Fail::Limits);
            }
            tile.clear();
            tile.resize(bytes, 0);
            if opj::opj_decode_tile_data(
                hs.codec,
                index,
                tile.as_mut_ptr(),
                bytes as u32,
                hs.stream,
            ) == 0
            {
                return Err(broken("OpenJPEG could not decode a tile", &err));
            }
            let place = (
                (x0 as u32 - ix0) as usize,
                (y0 as u32 - iy0) as usize,
                tw as usize,
                th as usize,
            );
            unpack(unpacker, &comps, place, &tile, &mut im)?;
        }
        if opj::opj_end_decompress(hs.codec, hs.stream) == 0 {
            return Err(broken("OpenJPEG could not finish the codestream", &err));
        }
        drop(hs);
    }
    let buf = im.buf;
    let pixels = match hd.mode {
        Mode::L => Pixels::L(buf),
        Mode::I16 => Pixels::I16(
            buf.chunks_exact(2)
                .map(|b| u16::from_le_bytes([b[0], b[1]]))
                .collect(),
        ),
        Mode::La => Pixels::La(buf.chunks_exact(4).flat_map(|p| [p[0], p[3]]).collect()),
        Mode::Rgb => Pixels::Rgb(
            buf.chunks_exact(4)
                .flat_map(|p| [p[0], p[1], p[2]])
                .collect(),
        ),
        Mode::Rgba => Pixels::Rgba(buf),
        Mode::Cmyk => Pixels::Cmyk(buf),
        Mode::P => Pixels::P(buf, hd.palette.unwrap_or_else(super::modes::blank_palette)),
        Mode::Palette => return Err(palette()),
    };
    Ok(Raster {
        width: hd.width,
        height: hd.height,
        pixels,
        transparency: Transparency::None,
    })
}

fn palette() -> Fail {
    Fail::Unsupported(
        "JPEG 2000 with a palette PIL reads as PA, in CMYK or with other than 3 or 4 columns \
         (a pclr box) is not reproduced yet"
            .into(),
    )
}
