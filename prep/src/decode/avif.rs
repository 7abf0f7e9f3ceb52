//! AVIF as Pillow 13.0.0's `AvifImagePlugin` reads it through libavif 1.4.2 (dav1d, libyuv):
//! the ISOBMFF container read here (the primary item and its alpha auxiliary item for an
//! `avif` file; the first color track and its alpha track, first sample, for an `avis` file),
//! the AV1 frames decoded by rav1d (`av1.rs`), converted to RGB as libavif + libyuv do
//! (`avif_yuv.rs`). Mode "RGBA" when there is alpha, "L" for 4:0:0, else "RGB"; the frame is
//! not rotated here: `irot`/`imir` become the EXIF orientation (as `_avif.c` reports them), and
//! `exif_transpose` applies it.
//!
//! Refused by name: grid and tone-mapped (gain map) primary items, 10/12-bit samples, and
//! matrix coefficients libyuv has no constants for (libavif's float path).

use super::Fail;
use super::av1;
use super::avif_yuv;
use super::exif::OrientationSources;
use super::modes::{Raster, Transparency};

fn corrupt(what: &str) -> Fail {
    Fail::Corrupt(format!("AVIF: {what}"))
}

fn be16(d: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(d.get(at..at + 2)?.try_into().ok()?))
}
fn be32(d: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(d.get(at..at + 4)?.try_into().ok()?))
}
fn be64(d: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(d.get(at..at + 8)?.try_into().ok()?))
}
/// A big-endian unsigned integer of `n` bytes (0, 4 or 8 in `iloc`).
fn be_n(d: &[u8], at: usize, n: usize) -> Option<u64> {
    match n {
        0 => Some(0),
        2 => be16(d, at).map(u64::from),
        4 => be32(d, at).map(u64::from),
        8 => be64(d, at),
        _ => None,
    }
}

/// The boxes in `d`: (type, body). A box running past the end is an error (truncated file).
/// A box: its type and body.
type Bx<'a> = ([u8; 4], &'a [u8]);

/// An item's data: its extents, in order.
type Extents<'a> = Vec<&'a [u8]>;

fn boxes(d: &[u8]) -> Result<Vec<Bx<'_>>, Fail> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    while pos < d.len() {
        let size = be32(d, pos).ok_or_else(|| corrupt("a box header is cut off (truncated)"))?;
        let kind: [u8; 4] = d
            .get(pos + 4..pos + 8)
            .and_then(|s| s.try_into().ok())
            .ok_or_else(|| corrupt("a box header is cut off (truncated)"))?;
        let (hdr, len) = match size {
            0 => (8usize, (d.len() - pos) as u64),
            1 => (
                16usize,
                be64(d, pos + 8).ok_or_else(|| corrupt("a box header is cut off (truncated)"))?,
            ),
            n => (8usize, n as u64),
        };
        let len = usize::try_from(len).map_err(|_| corrupt("a box is too large"))?;
        if len < hdr {
            return Err(corrupt("a box is shorter than its header"));
        }
        let end = pos
            .checked_add(len)
            .filter(|&e| e <= d.len())
            .ok_or_else(|| {
                corrupt(&format!(
                    "the '{}' box runs past the end of the file (truncated)",
                    String::from_utf8_lossy(&kind)
                ))
            })?;
        out.push((kind, &d[pos + hdr..end]));
        pos = end;
    }
    Ok(out)
}

fn child<'a>(list: &[([u8; 4], &'a [u8])], kind: &[u8; 4]) -> Option<&'a [u8]> {
    list.iter().find(|(k, _)| k == kind).map(|(_, b)| *b)
}

/// Properties of an image (item or track sample entry) that the decode needs.
#[derive(Debug, Clone, Default)]
struct Props {
    ispe: Option<(u32, u32)>,
    /// colr nclx: primaries, transfer, matrix, full range.
    nclx: Option<(u8, u8, u8, bool)>,
    /// av1C: high bit depth, 12-bit, monochrome.
    av1c: Option<(bool, bool)>,
    irot: Option<u8>,
    imir: Option<u8>,
    alpha_urn: bool,
    /// An `auxC`/`auxi` box was seen.
    aux_typed: bool,
}

impl Props {
    fn add(&mut self, kind: &[u8; 4], b: &[u8]) {
        match kind {
            b"ispe" => {
                if let (Some(w), Some(h)) = (be32(b, 4), be32(b, 8)) {
                    self.ispe = Some((w, h));
                }
            }
            b"colr" if b.get(0..4) == Some(b"nclx") && b.len() >= 11 && self.nclx.is_none() => {
                self.nclx = Some((b[5], b[7], b[9], b[10] & 0x80 != 0));
            }
            b"av1C" if b.len() >= 4 => {
                self.av1c = Some((b[2] & 0x40 != 0, b[2] & 0x20 != 0));
            }
            b"irot" if !b.is_empty() => self.irot = Some(b[0] & 3),
            b"imir" if !b.is_empty() => self.imir = Some(b[0] & 1),
            b"auxC" | b"auxi" => {
                let urn = b.get(4..).unwrap_or(&[]);
                let urn = urn.split(|&c| c == 0).next().unwrap_or(&[]);
                self.aux_typed = true;
                self.alpha_urn = urn == b"urn:mpeg:mpegB:cicp:systems:auxiliary:alpha"
                    || urn == b"urn:mpeg:hevc:2015:auxid:1";
            }
            _ => {}
        }
    }

    /// `_avif.c`'s `irot_imir_to_exif_orientation`.
    fn orientation(&self) -> u8 {
        let axis = self.imir.unwrap_or(0);
        match (self.irot, self.imir.is_some()) {
            (Some(1), true) => {
                if axis != 0 {
                    7
                } else {
                    5
                }
            }
            (Some(1), false) => 8,
            (Some(2), true) => {
                if axis != 0 {
                    4
                } else {
                    2
                }
            }
            (Some(2), false) => 3,
            (Some(3), true) => {
                if axis != 0 {
                    5
                } else {
                    7
                }
            }
            (Some(3), false) => 6,
            (_, true) => {
                if axis != 0 {
                    2
                } else {
                    4
                }
            }
            _ => 1,
        }
    }
}

/// What `avifDecoderParse` learns: the size Pillow reports, where the samples are, the metadata.
#[derive(Debug, Clone)]
pub(crate) struct Parsed<'a> {
    pub width: u32,
    pub height: u32,
    color: Vec<&'a [u8]>,
    alpha: Option<Vec<&'a [u8]>>,
    premultiplied: bool,
    props: Props,
    pub exif: Option<Vec<u8>>,
    pub xmp: Option<Vec<u8>>,
}

impl Parsed<'_> {
    /// The orientation PIL sees after `_open`: the `irot`/`imir` one written into the EXIF
    /// (when there is EXIF or it is not 1), else the EXIF's own, else the XMP's.
    pub fn orientation_sources(&self) -> OrientationSources {
        let o = self.props.orientation();
        let mut src = OrientationSources {
            exif: self.exif.clone(),
            xmp: self.xmp.clone(),
            ..Default::default()
        };
        if o != 1 {
            src.tiff_ifd = Some(o as u32);
        } else if let Some(e) = &self.exif
            && super::exif::orientation_from_exif(e).is_some()
        {
            // AvifImagePlugin writes 1 over an EXIF orientation tag (other than 1); with no
            // tag, getexif falls back to the XMP's.
            src.tiff_ifd = Some(1);
        }
        src
    }
}

/// `iloc`: item id -> extents (construction method 0: file offsets; 1: `idat` offsets).
fn iloc<'a>(
    b: &[u8],
    file: &'a [u8],
    idat: Option<&'a [u8]>,
) -> Result<Vec<(u32, Extents<'a>)>, Fail> {
    let bad = || corrupt("the 'iloc' box is malformed");
    let version = *b.first().ok_or_else(bad)?;
    let sizes = be16(b, 4).ok_or_else(bad)?;
    let (off_size, len_size, base_size) = (
        (sizes >> 12) as usize,
        ((sizes >> 8) & 15) as usize,
        ((sizes >> 4) & 15) as usize,
    );
    let index_size = if version == 1 || version == 2 {
        (sizes & 15) as usize
    } else {
        0
    };
    let mut pos = 6;
    let count = if version < 2 {
        pos += 2;
        be16(b, 4 + 2).ok_or_else(bad)? as u32
    } else {
        pos += 4;
        be32(b, 6).ok_or_else(bad)?
    };
    let mut out = Vec::new();
    for _ in 0..count {
        let id = if version < 2 {
            pos += 2;
            be16(b, pos - 2).ok_or_else(bad)? as u32
        } else {
            pos += 4;
            be32(b, pos - 4).ok_or_else(bad)?
        };
        let method = if version == 1 || version == 2 {
            pos += 2;
            be16(b, pos - 2).ok_or_else(bad)? & 15
        } else {
            0
        };
        pos += 2; // data_reference_index
        let base = be_n(b, pos, base_size).ok_or_else(bad)?;
        pos += base_size;
        let n = be16(b, pos).ok_or_else(bad)?;
        pos += 2;
        let mut extents = Vec::new();
        for _ in 0..n {
            pos += index_size;
            let off = be_n(b, pos, off_size).ok_or_else(bad)?;
            pos += off_size;
            let len = be_n(b, pos, len_size).ok_or_else(bad)?;
            pos += len_size;
            let src: &'a [u8] = match method {
                0 => file,
                1 => idat.ok_or_else(|| corrupt("an item is in a missing 'idat' box"))?,
                m => {
                    return Err(Fail::Unsupported(format!(
                        "AVIF item construction method {m}"
                    )));
                }
            };
            let start = usize::try_from(base.saturating_add(off)).unwrap_or(usize::MAX);
            let len = if len == 0 {
                src.len().saturating_sub(start) as u64
            } else {
                len
            };
            let end = start.saturating_add(usize::try_from(len).unwrap_or(usize::MAX));
            let ext = src.get(start..end).ok_or_else(|| {
                corrupt("an item's data lies past the end of the file (truncated)")
            })?;
            extents.push(ext);
        }
        out.push((id, extents));
    }
    Ok(out)
}

struct Item {
    id: u32,
    kind: [u8; 4],
    content_type: Vec<u8>,
}

fn iinf(b: &[u8]) -> Result<Vec<Item>, Fail> {
    let version = *b.first().ok_or_else(|| corrupt("empty 'iinf' box"))?;
    let skip = if version == 0 { 6 } else { 8 };
    let mut out = Vec::new();
    for (kind, e) in boxes(b.get(skip..).unwrap_or(&[]))? {
        if &kind != b"infe" {
            continue;
        }
        let v = *e.first().unwrap_or(&0);
        if v < 2 {
            continue;
        }
        let (id, at) = if v == 2 {
            (be16(e, 4).map(u32::from), 8)
        } else {
            (be32(e, 4), 10)
        };
        let id = id.ok_or_else(|| corrupt("the 'infe' box is cut off"))?;
        let kind: [u8; 4] = e
            .get(at..at + 4)
            .and_then(|s| s.try_into().ok())
            .ok_or_else(|| corrupt("the 'infe' box is cut off"))?;
        let rest = e.get(at + 4..).unwrap_or(&[]);
        let mut strings = rest.split(|&c| c == 0);
        let _name = strings.next();
        let content_type = strings.next().unwrap_or(&[]).to_vec();
        out.push(Item {
            id,
            kind,
            content_type,
        });
    }
    Ok(out)
}

/// `iref`: (type, from, to) triples.
fn iref(b: &[u8]) -> Result<Vec<([u8; 4], u32, u32)>, Fail> {
    let version = *b.first().ok_or_else(|| corrupt("empty 'iref' box"))?;
    let w = if version == 0 { 2 } else { 4 };
    let rd = |d: &[u8], at: usize| {
        if w == 2 {
            be16(d, at).map(u32::from)
        } else {
            be32(d, at)
        }
    };
    let bad = || corrupt("the 'iref' box is malformed");
    let mut out = Vec::new();
    for (kind, r) in boxes(b.get(4..).unwrap_or(&[]))? {
        let from = rd(r, 0).ok_or_else(bad)?;
        let n = be16(r, w).ok_or_else(bad)? as usize;
        for i in 0..n {
            out.push((kind, from, rd(r, w + 2 + i * w).ok_or_else(bad)?));
        }
    }
    Ok(out)
}

/// `iprp`: each item's properties, from `ipco` through `ipma`.
fn iprp(b: &[u8]) -> Result<Vec<(u32, Props)>, Fail> {
    let list = boxes(b)?;
    let ipco = boxes(child(&list, b"ipco").ok_or_else(|| corrupt("no 'ipco' box"))?)?;
    let mut out: Vec<(u32, Props)> = Vec::new();
    let bad = || corrupt("the 'ipma' box is malformed");
    for (kind, ipma) in list.iter().filter(|(k, _)| k == b"ipma") {
        let _ = kind;
        let version = *ipma.first().ok_or_else(bad)?;
        let flags = be32(ipma, 0).ok_or_else(bad)? & 0xff_ffff;
        let n = be32(ipma, 4).ok_or_else(bad)?;
        let mut pos = 8;
        for _ in 0..n {
            let id = if version < 1 {
                pos += 2;
                be16(ipma, pos - 2).ok_or_else(bad)? as u32
            } else {
                pos += 4;
                be32(ipma, pos - 4).ok_or_else(bad)?
            };
            let count = *ipma.get(pos).ok_or_else(bad)?;
            pos += 1;
            let mut props = Props::default();
            for _ in 0..count {
                let index = if flags & 1 != 0 {
                    pos += 2;
                    (be16(ipma, pos - 2).ok_or_else(bad)? & 0x7fff) as usize
                } else {
                    pos += 1;
                    (*ipma.get(pos - 1).ok_or_else(bad)? & 0x7f) as usize
                };
                if index > 0
                    && let Some((k, p)) = ipco.get(index - 1)
                {
                    props.add(k, p);
                }
            }
            out.push((id, props));
        }
    }
    Ok(out)
}

fn concat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// The `Exif` item's payload after its 4-byte `exif_tiff_header_offset`, which libavif checks.
fn exif_payload(data: &[u8]) -> Result<Vec<u8>, Fail> {
    let off = be32(data, 0).ok_or_else(|| corrupt("the Exif item is cut off"))? as usize;
    let rest = &data[4..];
    let found = rest
        .windows(4)
        .position(|w| w == b"II*\0" || w == b"MM\0*")
        .ok_or_else(|| corrupt("the Exif item has no TIFF header"))?;
    if found != off {
        return Err(corrupt("the Exif item's TIFF header offset is wrong"));
    }
    Ok(rest.to_vec())
}

/// `avifDecoderParse` (for what Pillow's `_open` reads).
pub(crate) fn parse(d: &[u8]) -> Result<Parsed<'_>, Fail> {
    let top = boxes(d)?;
    let ftyp = child(&top, b"ftyp").ok_or_else(|| corrupt("no 'ftyp' box"))?;
    let major = ftyp.get(0..4).unwrap_or(&[]);
    let brands: Vec<&[u8]> = ftyp.get(8..).unwrap_or(&[]).chunks_exact(4).collect();
    let has = |b: &[u8]| major == b || brands.contains(&b);
    if !has(b"avif") && !has(b"avis") {
        return Err(corrupt("the 'ftyp' box names neither avif nor avis"));
    }
    if major == b"avis"
        && let Some(moov) = child(&top, b"moov")
    {
        return parse_tracks(d, moov);
    }
    parse_items(d, &top)
}

fn parse_items<'a>(d: &'a [u8], top: &[([u8; 4], &'a [u8])]) -> Result<Parsed<'a>, Fail> {
    let meta = child(top, b"meta").ok_or_else(|| corrupt("no 'meta' box"))?;
    let meta = boxes(meta.get(4..).unwrap_or(&[]))?;
    let pitm = child(&meta, b"pitm").ok_or_else(|| corrupt("no primary item ('pitm')"))?;
    let primary = if pitm.first() == Some(&0) {
        be16(pitm, 4).map(u32::from)
    } else {
        be32(pitm, 4)
    }
    .ok_or_else(|| corrupt("the 'pitm' box is cut off"))?;
    let items = iinf(child(&meta, b"iinf").ok_or_else(|| corrupt("no 'iinf' box"))?)?;
    let locs = iloc(
        child(&meta, b"iloc").ok_or_else(|| corrupt("no 'iloc' box"))?,
        d,
        child(&meta, b"idat"),
    )?;
    let refs = match child(&meta, b"iref") {
        Some(b) => iref(b)?,
        None => Vec::new(),
    };
    let props = iprp(child(&meta, b"iprp").ok_or_else(|| corrupt("no 'iprp' box"))?)?;
    let props_of = |id: u32| {
        props
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, p)| p.clone())
            .unwrap_or_default()
    };
    let loc_of = |id: u32| {
        locs.iter()
            .find(|(i, _)| *i == id)
            .map(|(_, e)| e.clone())
            .ok_or_else(|| corrupt("an item has no location ('iloc')"))
    };
    let item = items
        .iter()
        .find(|i| i.id == primary)
        .ok_or_else(|| corrupt("the primary item is not listed in 'iinf'"))?;
    match &item.kind {
        b"av01" => {}
        b"grid" => {
            return Err(Fail::Unsupported(
                "AVIF whose primary image is a grid of tiles".into(),
            ));
        }
        k => {
            return Err(Fail::Unsupported(format!(
                "AVIF whose primary item is of type '{}'",
                String::from_utf8_lossy(k)
            )));
        }
    }
    let cprops = props_of(primary);
    let (width, height) = cprops
        .ispe
        .ok_or_else(|| corrupt("the primary item has no size ('ispe')"))?;
    let color = loc_of(primary)?;
    // The alpha item: an av01 item that is an 'auxl' of the color item with the alpha URN.
    let alpha_id = refs
        .iter()
        .filter(|(k, _, to)| k == b"auxl" && *to == primary)
        .map(|(_, from, _)| *from)
        .find(|&id| {
            items.iter().any(|i| i.id == id && &i.kind == b"av01") && props_of(id).alpha_urn
        });
    let alpha = alpha_id.map(loc_of).transpose()?;
    let premultiplied = alpha_id.is_some_and(|a| {
        refs.iter()
            .any(|(k, f, t)| k == b"prem" && *f == primary && *t == a)
    });
    // Metadata: items that describe ('cdsc') the color item.
    let (mut exif, mut xmp) = (None, None);
    for it in &items {
        if !refs
            .iter()
            .any(|(k, f, t)| k == b"cdsc" && *f == it.id && *t == primary)
        {
            continue;
        }
        let Ok(parts) = loc_of(it.id) else { continue };
        let data = concat(&parts);
        if data.is_empty() {
            continue;
        }
        if &it.kind == b"Exif" && exif.is_none() {
            exif = Some(exif_payload(&data)?);
        } else if &it.kind == b"mime" && it.content_type == b"application/rdf+xml" && xmp.is_none()
        {
            xmp = Some(data);
        }
    }
    Ok(Parsed {
        width,
        height,
        color,
        alpha,
        premultiplied,
        props: cprops,
        exif,
        xmp,
    })
}

struct Track<'a> {
    id: u32,
    width: u32,
    height: u32,
    aux_for: u32,
    prem_by: u32,
    props: Props,
    first_sample: Option<&'a [u8]>,
    is_av01: bool,
}

fn track<'a>(d: &'a [u8], trak: &'a [u8]) -> Result<Track<'a>, Fail> {
    let list = boxes(trak)?;
    let mut t = Track {
        id: 0,
        width: 0,
        height: 0,
        aux_for: 0,
        prem_by: 0,
        props: Props::default(),
        first_sample: None,
        is_av01: false,
    };
    if let Some(tkhd) = child(&list, b"tkhd") {
        let v = *tkhd.first().unwrap_or(&0);
        t.id = be32(tkhd, if v == 1 { 20 } else { 12 }).unwrap_or(0);
        let n = tkhd.len();
        if n >= 8 {
            t.width = be32(tkhd, n - 8).unwrap_or(0) >> 16;
            t.height = be32(tkhd, n - 4).unwrap_or(0) >> 16;
        }
    }
    if let Some(tref) = child(&list, b"tref") {
        for (k, r) in boxes(tref)? {
            match &k {
                b"auxl" => t.aux_for = be32(r, 0).unwrap_or(0),
                b"prem" => t.prem_by = be32(r, 0).unwrap_or(0),
                _ => {}
            }
        }
    }
    let stbl = child(&list, b"mdia")
        .map(boxes)
        .transpose()?
        .and_then(|m| child(&m, b"minf"))
        .map(boxes)
        .transpose()?
        .and_then(|m| child(&m, b"stbl"));
    let Some(stbl) = stbl else { return Ok(t) };
    let stbl = boxes(stbl)?;
    if let Some(stsd) = child(&stbl, b"stsd")
        && let Some((kind, entry)) = boxes(stsd.get(8..).unwrap_or(&[]))?.first()
        && kind == b"av01"
    {
        t.is_av01 = true;
        for (k, p) in boxes(entry.get(78..).unwrap_or(&[]))? {
            t.props.add(&k, p);
        }
    }
    let bad = || corrupt("the sample table is malformed");
    let chunk0 = if let Some(stco) = child(&stbl, b"stco") {
        (be32(stco, 4).ok_or_else(bad)? > 0)
            .then(|| be32(stco, 8).map(u64::from))
            .flatten()
    } else if let Some(co64) = child(&stbl, b"co64") {
        (be32(co64, 4).ok_or_else(bad)? > 0)
            .then(|| be64(co64, 8))
            .flatten()
    } else {
        None
    };
    let size0 = child(&stbl, b"stsz").and_then(|stsz| {
        let uniform = be32(stsz, 4)?;
        if uniform != 0 {
            Some(uniform)
        } else if be32(stsz, 8)? > 0 {
            be32(stsz, 12)
        } else {
            None
        }
    });
    if let (Some(off), Some(len)) = (chunk0, size0) {
        let start = usize::try_from(off).unwrap_or(usize::MAX);
        t.first_sample = Some(
            d.get(start..start.saturating_add(len as usize))
                .ok_or_else(|| {
                    corrupt("the first sample lies past the end of the file (truncated)")
                })?,
        );
    }
    Ok(t)
}

fn parse_tracks<'a>(d: &'a [u8], moov: &'a [u8]) -> Result<Parsed<'a>, Fail> {
    let tracks: Vec<Track> = boxes(moov)?
        .into_iter()
        .filter(|(k, _)| k == b"trak")
        .map(|(_, b)| track(d, b))
        .collect::<Result<_, _>>()?;
    let usable = |t: &&Track| t.id != 0 && t.is_av01 && t.first_sample.is_some();
    let color = tracks
        .iter()
        .filter(usable)
        .find(|t| t.aux_for == 0)
        .ok_or_else(|| corrupt("no AV1 color track"))?;
    let alpha = tracks
        .iter()
        .filter(usable)
        .find(|t| t.aux_for == color.id && (t.props.alpha_urn || !has_auxi(t)));
    Ok(Parsed {
        width: color.width,
        height: color.height,
        color: color.first_sample.into_iter().collect(),
        alpha: alpha.map(|a| a.first_sample.into_iter().collect()),
        premultiplied: alpha.is_some_and(|a| color.prem_by == a.id),
        props: color.props.clone(),
        exif: None,
        xmp: None,
    })
}

/// Whether a track's sample entry names its auxiliary type (an `auxi` box); without one libavif
/// takes an auxiliary track for alpha.
fn has_auxi(t: &Track) -> bool {
    t.props.aux_typed
}

/// Decodes the first frame into PIL's mode ("RGBA", "L" or "RGB").
pub(crate) fn decode(d: &[u8], max_pixels: u64) -> Result<Raster, Fail> {
    let p = parse(d)?;
    if let Some((hbd, _)) = p.props.av1c
        && hbd
    {
        return Err(Fail::Unsupported(
            "AVIF with 10/12-bit samples (glm5v reads 8-bit AVIF)".into(),
        ));
    }
    let color = av1::decode(&concat(&p.color), max_pixels)?;
    if (color.width, color.height) != (p.width as usize, p.height as usize) {
        return Err(corrupt(&format!(
            "the header says {}x{} but the AV1 frame is {}x{}",
            p.width, p.height, color.width, color.height
        )));
    }
    let alpha = match &p.alpha {
        Some(parts) => {
            let a = av1::decode(&concat(parts), max_pixels)?;
            if (a.width, a.height) != (color.width, color.height) {
                return Err(corrupt(
                    "the alpha image's size differs from the color image's",
                ));
            }
            let mut plane = a.y;
            if !a.cicp.3 {
                // Limited-range alpha (allowed by AVIF 1.0.0) is widened as libavif does.
                for v in &mut plane {
                    let x = ((*v as i32 - 16) * 255 + 219 / 2) / 219;
                    *v = x.clamp(0, 255) as u8;
                }
            }
            Some(plane)
        }
        None => None,
    };
    // The colr nclx box wins over the sequence header (libavif).
    let (cp, _tc, mc, full) = p.props.nclx.unwrap_or(color.cicp);
    let planes = avif_yuv::Planes {
        width: color.width,
        height: color.height,
        layout: color.layout,
        y: &color.y,
        u: &color.u,
        v: &color.v,
        alpha: alpha.as_deref(),
    };
    let pixels = avif_yuv::convert(&planes, mc, cp, full, p.premultiplied)?;
    Ok(Raster {
        width: p.width,
        height: p.height,
        pixels,
        transparency: Transparency::None,
    })
}
