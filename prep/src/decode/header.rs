//! Format sniffing and header parsing: dimensions and orientation metadata without decoding
//! pixels. Each parser reads what PIL's plugin reads at `Image.open` (plus, for PNG, the chunks
//! after IDAT that `load_end` adds to `info`).

use super::Fail;
use super::bytes::{be16, be32, le16, le32, rd16, rd32, rd64};
use super::exif::{self, OrientationSources};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Png,
    Jpeg,
    Gif,
    Bmp,
    WebP,
    Tiff,
    Qoi,
    Pnm,
    Tga,
    Ico,
    Dds,
    Psd,
    Cur,
    Sgi,
    Pcx,
    Dcx,
    Sun,
    Xbm,
    Xpm,
    Msp,
    Im,
    Imt,
    Dib,
    Jpeg2000,
    Icns,
    Avif,
    Pfm,
    Spider,
    Blp,
    Fli,
    Fits,
    Ftex,
    Gbr,
    Mcidas,
    Pcd,
    Pixar,
    XvThumb,
}

impl Format {
    /// Every format prep decodes, in the order messages list them.
    pub const ALL: &'static [Format] = &[
        Format::Png,
        Format::Jpeg,
        Format::WebP,
        Format::Gif,
        Format::Bmp,
        Format::Tiff,
        Format::Qoi,
        Format::Pnm,
        Format::Tga,
        Format::Ico,
        Format::Cur,
        Format::Dds,
        Format::Psd,
        Format::Sgi,
        Format::Pcx,
        Format::Dcx,
        Format::Sun,
        Format::Xbm,
        Format::Xpm,
        Format::Msp,
        Format::Im,
        Format::Imt,
        Format::Dib,
        Format::Jpeg2000,
        Format::Icns,
        Format::Avif,
        Format::Pfm,
        Format::Spider,
        Format::Blp,
        Format::Fli,
        Format::Fits,
        Format::Ftex,
        Format::Gbr,
        Format::Mcidas,
        Format::Pcd,
        Format::Pixar,
        Format::XvThumb,
    ];

    /// The names of [`Format::ALL`] as a sentence: "PNG, JPEG, ... and PSD" (PNM for PIL's PPM
    /// plugin, which reads the whole family).
    pub fn all_names() -> String {
        let names: Vec<&str> = Format::ALL
            .iter()
            .map(|f| match f {
                Format::Pnm => "PNM",
                Format::WebP => "WebP",
                Format::Jpeg2000 => "JPEG 2000",
                Format::Pfm => "PFM",
                f => f.name(),
            })
            .collect();
        match names.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
            _ => names.join(""),
        }
    }

    /// PIL's `Image.format` names.
    pub fn name(self) -> &'static str {
        match self {
            Format::Png => "PNG",
            Format::Jpeg => "JPEG",
            Format::Gif => "GIF",
            Format::Bmp => "BMP",
            Format::WebP => "WEBP",
            Format::Tiff => "TIFF",
            Format::Qoi => "QOI",
            Format::Pnm => "PPM",
            Format::Tga => "TGA",
            Format::Ico => "ICO",
            Format::Dds => "DDS",
            Format::Psd => "PSD",
            Format::Cur => "CUR",
            Format::Sgi => "SGI",
            Format::Pcx => "PCX",
            Format::Dcx => "DCX",
            Format::Sun => "SUN",
            Format::Xbm => "XBM",
            Format::Xpm => "XPM",
            Format::Msp => "MSP",
            Format::Im => "IM",
            Format::Imt => "IMT",
            Format::Dib => "DIB",
            Format::Jpeg2000 => "JPEG2000",
            Format::Icns => "ICNS",
            Format::Avif => "AVIF",
            // PIL's PPM plugin reads PFM too.
            Format::Pfm => "PPM",
            Format::Spider => "SPIDER",
            Format::Blp => "BLP",
            Format::Fli => "FLI",
            Format::Fits => "FITS",
            Format::Ftex => "FTEX",
            Format::Gbr => "GBR",
            Format::Mcidas => "MCIDAS",
            Format::Pcd => "PCD",
            Format::Pixar => "PIXAR",
            Format::XvThumb => "XVThumb",
        }
    }
}

/// The plugin whose `_accept` takes these leading bytes.
pub(crate) fn sniff(d: &[u8]) -> Option<Format> {
    if d.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some(Format::Png)
    } else if d.starts_with(&[0xff, 0xd8, 0xff]) {
        Some(Format::Jpeg)
    } else if d.starts_with(b"GIF87a") || d.starts_with(b"GIF89a") {
        Some(Format::Gif)
    } else if d.starts_with(b"BM") {
        Some(Format::Bmp)
    } else if d.len() >= 12 && &d[0..4] == b"RIFF" && &d[8..12] == b"WEBP" {
        Some(Format::WebP)
    } else if d.starts_with(b"II*\0")
        || d.starts_with(b"MM\0*")
        || d.starts_with(b"II+\0")
        || d.starts_with(b"MM\0+")
    {
        // Classic TIFF and BigTIFF (64-bit offsets).
        Some(Format::Tiff)
    } else if d.starts_with(b"DDS ") {
        Some(Format::Dds)
    } else if d.starts_with(b"8BPS") {
        Some(Format::Psd)
    } else if d.starts_with(b"\xff\x4f\xff\x51") || d.starts_with(b"\0\0\0\x0cjP  \r\n\x87\n") {
        Some(Format::Jpeg2000)
    } else if d.starts_with(b"icns") {
        Some(Format::Icns)
    } else {
        // Formats read through the `image` crate (`foreign.rs`), recognised as PIL does.
        match super::other::pil_format(d) {
            Some("QOI") => Some(Format::Qoi),
            Some("PPM") if matches!(d.get(1), Some(b'1'..=b'6')) => Some(Format::Pnm),
            Some("TGA") => Some(Format::Tga),
            Some("ICO") => Some(Format::Ico),
            Some("CUR") => Some(Format::Cur),
            Some("SGI") => Some(Format::Sgi),
            Some("PCX") => Some(Format::Pcx),
            Some("DCX") => Some(Format::Dcx),
            Some("SUN") => Some(Format::Sun),
            Some("XBM") => Some(Format::Xbm),
            Some("XPM") => Some(Format::Xpm),
            Some("MSP") => Some(Format::Msp),
            Some("IM") => Some(Format::Im),
            Some("DIB") => Some(Format::Dib),
            Some("AVIF") => Some(Format::Avif),
            Some("PFM") if d.starts_with(b"Pf") => Some(Format::Pfm),
            Some("BLP") => Some(Format::Blp),
            Some("FLI") => Some(Format::Fli),
            Some("FITS") => Some(Format::Fits),
            Some("FTEX") => Some(Format::Ftex),
            Some("GBR") => Some(Format::Gbr),
            Some("MCIDAS") => Some(Format::Mcidas),
            Some("PCD") => Some(Format::Pcd),
            Some("PIXAR") => Some(Format::Pixar),
            Some("XVThumb") => Some(Format::XvThumb),
            // IM files without an "Image type" first line, IMT and SPIDER (no magic: PIL tries
            // their `_open`, after every plugin with a magic; IM and IMT come before SPIDER).
            None => super::legacy::sniff_text(d)
                .or_else(|| super::spider::sniff(d).then_some(Format::Spider)),
            _ => None,
        }
    }
}

/// What a header says: stored (pre-orientation) size and where the orientation lives.
#[derive(Debug, Clone)]
pub(crate) struct Header {
    pub width: u32,
    pub height: u32,
    pub orientation: OrientationSources,
    /// JPEG only: the frame is arithmetic-coded (SOF9-11, SOF13-15).
    pub arithmetic: bool,
}

fn truncated(what: &str) -> Fail {
    Fail::Corrupt(format!("the file ends inside the {what} (truncated)"))
}

pub(crate) fn parse(d: &[u8], f: Format) -> Result<Header, Fail> {
    match f {
        Format::Png => png(d),
        Format::Jpeg => jpeg(d),
        Format::Gif => gif(d),
        Format::Bmp => bmp(d),
        Format::WebP => webp(d),
        Format::Tiff => tiff(d),
        Format::Avif => {
            let p = super::avif::parse(d)?;
            Ok(Header {
                width: p.width,
                height: p.height,
                orientation: p.orientation_sources(),
                arithmetic: false,
            })
        }
        Format::Dds
        | Format::Psd
        | Format::Cur
        | Format::Jpeg2000
        | Format::Icns
        | Format::Pfm
        | Format::Spider
        | Format::Blp
        | Format::Fli
        | Format::Fits
        | Format::Ftex
        | Format::Gbr
        | Format::Mcidas
        | Format::Pcd
        | Format::Pixar
        | Format::XvThumb => {
            let (width, height) = match f {
                Format::Blp => super::blp::dims(d)?,
                Format::Fli => super::fli::dims(d)?,
                Format::Fits => super::fits::dims(d)?,
                Format::Ftex => super::ftex::dims(d)?,
                Format::Gbr => super::gbr::dims(d)?,
                Format::Mcidas => super::mcidas::dims(d)?,
                Format::Pcd => super::pcd::dims(d)?,
                Format::Pixar => super::pixar::dims(d)?,
                Format::XvThumb => super::xvthumb::dims(d)?,

                Format::Dds => super::dds::dims(d)?,
                Format::Psd => super::psd::dims(d)?,
                Format::Jpeg2000 => super::jpeg2k::dims(d)?,
                Format::Icns => super::icns::dims(d)?,
                Format::Pfm => super::pfm::dims(d)?,
                Format::Spider => super::spider::dims(d)?,
                _ => super::cur::dims(d)?,
            };
            Ok(Header {
                width,
                height,
                orientation: OrientationSources::default(),
                arithmetic: false,
            })
        }
        Format::Sgi
        | Format::Pcx
        | Format::Dcx
        | Format::Sun
        | Format::Xbm
        | Format::Xpm
        | Format::Msp
        | Format::Im
        | Format::Imt
        | Format::Dib => {
            let (width, height) = super::legacy::dims(d, f)?;
            Ok(Header {
                width,
                height,
                orientation: OrientationSources::default(),
                arithmetic: false,
            })
        }
        Format::Qoi | Format::Pnm | Format::Tga | Format::Ico => {
            let (width, height) = super::foreign::dims(d, f)?;
            Ok(Header {
                width,
                height,
                orientation: OrientationSources::default(),
                arithmetic: false,
            })
        }
    }
}

/// Walks the markers up to SOS as `JpegImageFile._open` does: the SOF gives the size; APP1
/// `Exif\0\0` segments (concatenated) and the XMP APP1 give the orientation.
fn jpeg(d: &[u8]) -> Result<Header, Fail> {
    let mut pos = 2;
    let mut size: Option<(u32, u32)> = None;
    let mut arithmetic = false;
    let mut o = OrientationSources::default();
    loop {
        // Skip to the next 0xFF, then past fill bytes.
        while pos < d.len() && d[pos] != 0xff {
            pos += 1;
        }
        while pos < d.len() && d[pos] == 0xff {
            pos += 1;
        }
        let Some(&m) = d.get(pos) else {
            return Err(truncated("JPEG markers before the image data"));
        };
        pos += 1;
        match m {
            0x00 | 0x01 | 0xd0..=0xd8 => continue,
            0xd9 => return Err(Fail::Corrupt("end of image before any image data".into())),
            _ => {}
        }
        let len = be16(d, pos).ok_or_else(|| truncated("JPEG marker segment"))? as usize;
        if len < 2 {
            return Err(Fail::Corrupt(format!(
                "JPEG marker 0xFF{m:02X} has an invalid length {len}"
            )));
        }
        let seg = d
            .get(pos + 2..pos + len)
            .ok_or_else(|| truncated("JPEG marker segment"))?;
        match m {
            0xda => break,
            0xc0..=0xcf if !matches!(m, 0xc4 | 0xc8 | 0xcc) => {
                if seg.len() < 6 {
                    return Err(Fail::Corrupt("JPEG frame header is too short".into()));
                }
                if seg[0] != 8 {
                    return Err(Fail::Unsupported(format!(
                        "{}-bit samples (PIL reads 8-bit JPEG)",
                        seg[0]
                    )));
                }
                if !matches!(seg[5], 1 | 3 | 4) {
                    return Err(Fail::Unsupported(format!(
                        "{}-component JPEG (PIL reads 1, 3 or 4)",
                        seg[5]
                    )));
                }
                size = Some((
                    be16(seg, 3).unwrap_or(0) as u32,
                    be16(seg, 1).unwrap_or(0) as u32,
                ));
                arithmetic = m >= 0xc9;
            }
            0xe1 if seg.starts_with(b"Exif\0\0") => match &mut o.exif {
                Some(e) => e.extend_from_slice(&seg[6..]),
                None => o.exif = Some(seg.to_vec()),
            },
            0xe1 if seg.starts_with(b"http://ns.adobe.com/xap/1.0/\0") => {
                o.xmp = Some(seg[29..].to_vec());
            }
            _ => {}
        }
        pos += len;
    }
    let (width, height) =
        size.ok_or_else(|| Fail::Corrupt("no frame header (SOF) before the scan".into()))?;
    Ok(Header {
        width,
        height,
        orientation: o,
        arithmetic,
    })
}

/// IHDR, then every chunk's metadata up to IEND (eXIf, text "Raw profile type exif", XMP).
pub(super) fn png(d: &[u8]) -> Result<Header, Fail> {
    if d.len() < 33 || &d[12..16] != b"IHDR" {
        return Err(if d.len() < 33 {
            truncated("PNG header")
        } else {
            Fail::Corrupt("first chunk is not IHDR".into())
        });
    }
    let (width, height) = (be32(d, 16).unwrap_or(0), be32(d, 20).unwrap_or(0));
    let mut o = OrientationSources::default();
    let mut xmp_text: Option<Vec<u8>> = None;
    let mut pos = 8;
    let mut seen_idat = false;
    // APNG frame sequence numbers as PngImagePlugin checks them: fcTL chunks up to the image
    // data, then (`load_end`) fdAT chunks after it, up to the next frame's fcTL when the image is
    // animated (acTL with more than one frame): an fdAT must follow the last number seen.
    let mut seq: Option<u32> = None;
    let mut frames: Option<u32> = None;
    let mut after_idat_done = false;
    let seq_error =
        || Fail::Corrupt("APNG contains frame sequence errors (PIL refuses it too)".into());
    while let (Some(len), Some(kind)) = (be32(d, pos), d.get(pos + 4..pos + 8)) {
        let len = len as usize;
        let Some(data) = d.get(pos + 8..(pos + 8).saturating_add(len)) else {
            break;
        };
        let after_idat = seen_idat && kind != b"IDAT";
        match kind {
            b"acTL" if !seen_idat && data.len() >= 8 => {
                let n = be32(data, 0).unwrap_or(0);
                frames = (frames.is_none() && n != 0 && n <= 0x8000_0000).then_some(n);
            }
            b"fcTL" if !after_idat_done && data.len() >= 26 => {
                if after_idat && frames.is_some_and(|n| n > 1) {
                    after_idat_done = true;
                } else {
                    let s = be32(data, 0).unwrap_or(0);
                    // Checked before the image data only: after it, PIL accepts a repeated
                    // number (the corpus's apng/chunk_repeat_fctl.png).
                    if !after_idat && seq.map_or(s != 0, |p| p.checked_add(1) != Some(s)) {
                        return Err(seq_error());
                    }
                    seq = Some(s);
                }
            }
            b"fdAT" if after_idat && !after_idat_done && data.len() >= 4 => {
                let s = be32(data, 0).unwrap_or(0);
                if seq.and_then(|p| p.checked_add(1)) != Some(s) {
                    return Err(seq_error());
                }
                seq = Some(s);
            }
            _ => {}
        }
        // PIL checks the CRC of every chunk `Image.open` reads (those before the first IDAT);
        // the png crate is told to ignore checksums, as PIL does for IDAT and later chunks.
        seen_idat |= kind == b"IDAT";
        if !seen_idat {
            let stored = be32(d, pos + 8 + len).ok_or_else(|| truncated("PNG chunk"))?;
            let mut crc = crc32fast::Hasher::new();
            crc.update(kind);
            crc.update(data);
            if crc.finalize() != stored {
                return Err(Fail::Corrupt(format!(
                    "bad checksum in the {} chunk",
                    String::from_utf8_lossy(kind)
                )));
            }
        }
        match kind {
            b"IEND" => break,
            b"eXIf" => {
                let mut e = b"Exif\0\0".to_vec();
                e.extend_from_slice(data);
                o.exif = Some(e);
            }
            b"tEXt" | b"zTXt" => {
                let (k, v) = split_nul(data);
                let v = if kind == b"zTXt" {
                    match v.split_first() {
                        Some((0, z)) => inflate(z, kind)?.unwrap_or_default(),
                        _ => Vec::new(),
                    }
                } else {
                    v.to_vec()
                };
                match k {
                    b"Raw profile type exif" => o.raw_profile = Some(v),
                    b"exif" if kind == b"tEXt" => o.exif = Some(v),
                    b"XML:com.adobe.xmp" => xmp_text = Some(v),
                    _ => {}
                }
            }
            b"iTXt" => {
                let (k, r) = split_nul(data);
                if k == b"XML:com.adobe.xmp" && r.len() >= 2 {
                    let (cf, cm, r) = (r[0], r[1], &r[2..]);
                    let (_lang, r) = split_nul(r);
                    let (_tk, v) = split_nul(r);
                    let v = match (cf, cm) {
                        (0, _) => Some(v.to_vec()),
                        (_, 0) => inflate(v, kind)?,
                        _ => None,
                    };
                    if let Some(v) = v {
                        xmp_text = Some(v);
                    }
                }
            }
            _ => {}
        }
        pos = pos + 12 + len;
    }
    o.xmp = xmp_text;
    Ok(Header {
        width,
        height,
        orientation: o,
        arithmetic: false,
    })
}

fn split_nul(d: &[u8]) -> (&[u8], &[u8]) {
    match d.iter().position(|&b| b == 0) {
        Some(i) => (&d[..i], &d[i + 1..]),
        None => (d, &[]),
    }
}

/// zlib-inflates a text chunk as PIL's `_safe_zlib_decompress` does: data that is not zlib gives
/// `None` (PIL ignores the chunk), more than `MAX_TEXT_CHUNK` (1 MiB) of output is an error (PIL
/// raises `ValueError` and refuses the file).
fn inflate(z: &[u8], kind: &[u8]) -> Result<Option<Vec<u8>>, Fail> {
    use miniz_oxide::inflate::TINFLStatus;
    match miniz_oxide::inflate::decompress_to_vec_zlib_with_limit(z, 1 << 20) {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.status == TINFLStatus::HasMoreOutput => Err(Fail::Corrupt(format!(
            "a {} chunk decompresses to more than PIL's MAX_TEXT_CHUNK of 1 MiB \
             (a decompression bomb: PIL refuses it too)",
            String::from_utf8_lossy(kind)
        ))),
        Err(_) => Ok(None),
    }
}

/// Logical screen, grown by the first frame's extent (as `GifImageFile._seek(0)` does).
fn gif(d: &[u8]) -> Result<Header, Fail> {
    let (mut w, mut h) = (
        le16(d, 6).ok_or_else(|| truncated("GIF header"))? as u32,
        le16(d, 8).ok_or_else(|| truncated("GIF header"))? as u32,
    );
    let flags = *d.get(10).ok_or_else(|| truncated("GIF header"))?;
    let mut pos = 13;
    if flags & 0x80 != 0 {
        pos += 3 << ((flags & 7) + 1);
    }
    let skip_blocks = |mut p: usize| -> Option<usize> {
        loop {
            let n = *d.get(p)? as usize;
            p += 1;
            if n == 0 {
                return Some(p);
            }
            p += n;
        }
    };
    loop {
        match d.get(pos) {
            Some(b'!') => pos = skip_blocks(pos + 2).ok_or_else(|| truncated("GIF extension"))?,
            Some(b',') => {
                let x = le16(d, pos + 1).ok_or_else(|| truncated("GIF image descriptor"))? as u32;
                let y = le16(d, pos + 3).ok_or_else(|| truncated("GIF image descriptor"))? as u32;
                let fw = le16(d, pos + 5).ok_or_else(|| truncated("GIF image descriptor"))? as u32;
                let fh = le16(d, pos + 7).ok_or_else(|| truncated("GIF image descriptor"))? as u32;
                w = w.max(x + fw);
                h = h.max(y + fh);
                break;
            }
            Some(b';') => return Err(Fail::Corrupt("the GIF file has no image".into())),
            Some(&b) => return Err(Fail::Corrupt(format!("unexpected GIF block 0x{b:02X}"))),
            None => return Err(truncated("GIF blocks before the first image")),
        }
    }
    Ok(Header {
        width: w,
        height: h,
        orientation: OrientationSources::default(),
        arithmetic: false,
    })
}

/// The size as `BmpImagePlugin` reads it ([`super::bmp::dims`]).
fn bmp(d: &[u8]) -> Result<Header, Fail> {
    let (width, height) = super::bmp::dims(d)?;
    Ok(Header {
        width,
        height,
        orientation: OrientationSources::default(),
        arithmetic: false,
    })
}

/// RIFF chunks: the canvas from VP8X / VP8 / VP8L, the first EXIF and XMP chunks.
fn webp(d: &[u8]) -> Result<Header, Fail> {
    let mut pos = 12;
    let mut size: Option<(u32, u32)> = None;
    let mut o = OrientationSources::default();
    let end = (le32(d, 4).unwrap_or(0) as usize)
        .saturating_add(8)
        .min(d.len());
    while pos + 8 <= end {
        let kind = &d[pos..pos + 4];
        let len = le32(d, pos + 4).unwrap_or(0) as usize;
        let data = &d[pos + 8..(pos + 8).saturating_add(len).min(d.len())];
        let first = pos == 12;
        match kind {
            b"VP8X" if first => {
                if data.len() < 10 {
                    return Err(truncated("WebP VP8X chunk"));
                }
                let w = u32::from_le_bytes([data[4], data[5], data[6], 0]) + 1;
                let h = u32::from_le_bytes([data[7], data[8], data[9], 0]) + 1;
                size = Some((w, h));
            }
            b"VP8 " if first => {
                if data.len() < 10 || data[3..6] != [0x9d, 0x01, 0x2a] {
                    return Err(Fail::Corrupt("bad VP8 frame header".into()));
                }
                size = Some((
                    (le16(data, 6).unwrap_or(0) & 0x3fff) as u32,
                    (le16(data, 8).unwrap_or(0) & 0x3fff) as u32,
                ));
            }
            b"VP8L" if first => {
                if data.len() < 5 || data[0] != 0x2f {
                    return Err(Fail::Corrupt("bad VP8L header".into()));
                }
                let bits = le32(data, 1).unwrap_or(0);
                size = Some(((bits & 0x3fff) + 1, ((bits >> 14) & 0x3fff) + 1));
            }
            b"EXIF" if o.exif.is_none() => o.exif = Some(data.to_vec()),
            b"XMP " if o.xmp.is_none() => o.xmp = Some(data.to_vec()),
            _ => {}
        }
        if first && size.is_none() {
            return Err(Fail::Corrupt(
                "the first WebP chunk is not VP8X, VP8 or VP8L".into(),
            ));
        }
        pos = pos + 8 + len + (len & 1);
    }
    let (width, height) = size.ok_or_else(|| truncated("WebP header"))?;
    Ok(Header {
        width,
        height,
        orientation: o,
        arithmetic: false,
    })
}

/// IFD0's ImageWidth, ImageLength and Orientation.
/// BigTIFF's first IFD: ImageWidth and ImageLength (SHORT, LONG or LONG8 values in 20-byte
/// entries with 64-bit counts and offsets).
fn bigtiff(d: &[u8]) -> Result<Header, Fail> {
    let le = d.starts_with(b"II");
    let rd64 = |at: usize| rd64(d, at, le);
    let bad = || truncated("BigTIFF directory");
    if rd16(d, 4, le) != Some(8) {
        return Err(Fail::Corrupt(
            "BigTIFF header with an offset size other than 8".into(),
        ));
    }
    let off = usize::try_from(rd64(8).ok_or_else(bad)?).map_err(|_| bad())?;
    let n = usize::try_from(rd64(off).ok_or_else(bad)?).map_err(|_| bad())?;
    let (mut w, mut h) = (None, None);
    for i in 0..n.min(4096) {
        let e = off
            .checked_add(8 + i * 20)
            .ok_or_else(|| truncated("BigTIFF directory"))?;
        let tag = rd16(d, e, le).ok_or_else(bad)?;
        let val = match rd16(d, e + 2, le).unwrap_or(0) {
            3 => rd16(d, e + 12, le).map(u32::from),
            4 => rd32(d, e + 12, le),
            16 => rd64(e + 12).and_then(|v| u32::try_from(v).ok()),
            _ => None,
        };
        match tag {
            256 => w = val,
            257 => h = val,
            _ => {}
        }
    }
    match (w, h) {
        (Some(width), Some(height)) => Ok(Header {
            width,
            height,
            orientation: OrientationSources::default(),
            arithmetic: false,
        }),
        _ => Err(Fail::Corrupt(
            "the BigTIFF directory has no ImageWidth/ImageLength".into(),
        )),
    }
}

fn tiff(d: &[u8]) -> Result<Header, Fail> {
    if d.starts_with(b"II+\0") || d.starts_with(b"MM\0+") {
        return bigtiff(d);
    }
    let (le, off) = exif::tiff_header(d).ok_or_else(|| truncated("TIFF header"))?;
    let off = off as usize;
    let n = rd16(d, off, le).ok_or_else(|| truncated("TIFF directory"))? as usize;
    let (mut w, mut h) = (None, None);
    for i in 0..n {
        let e = off + 2 + i * 12;
        let tag = rd16(d, e, le).ok_or_else(|| truncated("TIFF directory"))?;
        let typ = rd16(d, e + 2, le).unwrap_or(0);
        let val = match typ {
            3 => rd16(d, e + 8, le).map(u32::from),
            4 => rd32(d, e + 8, le),
            _ => None,
        };
        match tag {
            256 => w = val,
            257 => h = val,
            _ => {}
        }
    }
    let orientation = OrientationSources {
        tiff_ifd: exif::ifd_orientation(d, le, off),
        ..Default::default()
    };
    match (w, h) {
        (Some(width), Some(height)) => Ok(Header {
            width,
            height,
            orientation,
            arithmetic: false,
        }),
        _ => Err(Fail::Corrupt(
            "the TIFF directory has no ImageWidth/ImageLength".into(),
        )),
    }
}
