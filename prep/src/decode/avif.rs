//! AVIF as Pillow 13.0.0's `AvifImagePlugin` reads it through libavif 1.4.2 (dav1d, libyuv):
//! the ISOBMFF container read here (the primary item and its alpha auxiliary item for an
//! `avif` file; the first color track and its alpha track, first sample, for an `avis` file),
//! the AV1 frames decoded by rav1d (`av1.rs`), converted to RGB as libavif + libyuv do
//! (`avif_yuv.rs`). Mode "RGBA" when there is alpha, "L" for 4:0:0, else "RGB"; the frame is
//! not rotated here: `irot`/`imir` become the EXIF orientation (as `_avif.c` reports them), and
//! `exif_transpose` applies it.
//!
//! Grids of tiles are put together as libavif does (`avif_grid.rs`); 10/12-bit samples follow
//! libavif's high-bit-depth paths (`avif_yuv16.rs`). Refused by name: primary items other than
//! av01 and grid, and matrix coefficients libyuv has no constants for (libavif's float path;
//! the identity matrix excepted: that path reads it as a plain copy, reproduced).

use super::Fail;
use super::avif_box::{Extents, Props, boxes, child, iinf, iloc, iprp, iref};
use super::avif_grid::decode_src;
use super::avif_yuv;
use super::avif_yuv16;
use super::bytes::{be16, be32, be64};
use super::exif::OrientationSources;
use super::modes::{Raster, Transparency};

fn corrupt(what: &str) -> Fail {
    Fail::Corrupt(format!("AVIF: {what}"))
}

/// Where an image's AV1 data is: one item or sample, or a grid of tile items (each with its
/// `ispe` size).
#[derive(Debug, Clone)]
pub(super) enum Src<'a> {
    One(Extents<'a>),
    Grid {
        rows: u32,
        cols: u32,
        width: u32,
        height: u32,
        tiles: Vec<(Extents<'a>, (u32, u32))>,
    },
}

/// What `avifDecoderParse` learns: the size Pillow reports, where the samples are, the metadata.
#[derive(Debug, Clone)]
pub(crate) struct Parsed<'a> {
    pub width: u32,
    pub height: u32,
    color: Src<'a>,
    alpha: Option<Src<'a>>,
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
    if !matches!(&item.kind, b"av01" | b"grid") {
        return Err(Fail::Unsupported(format!(
            "AVIF whose primary item is of type '{}'",
            String::from_utf8_lossy(&item.kind)
        )));
    }
    // avifDecoderParse: every image item (not a thumbnail, with data) needs its size.
    for it in items
        .iter()
        .filter(|i| matches!(&i.kind, b"av01" | b"grid"))
    {
        let thumb = refs.iter().any(|(k, f, _)| k == b"thmb" && *f == it.id);
        let empty = loc_of(it.id)
            .map(|e| e.iter().all(|x| x.is_empty()))
            .unwrap_or(true);
        if thumb || empty {
            continue;
        }
        match props_of(it.id).ispe {
            Some((w, h)) if w > 0 && h > 0 => {}
            Some(_) => return Err(corrupt(&format!("item {} has a zero size", it.id))),
            None => return Err(corrupt(&format!("item {} has no size ('ispe')", it.id))),
        }
    }
    let kind_of = |id: u32| items.iter().find(|i| i.id == id).map(|i| i.kind);
    let source = |id: u32| -> Result<Src, Fail> {
        if kind_of(id) != Some(*b"grid") {
            return Ok(Src::One(loc_of(id)?));
        }
        let g = concat(&loc_of(id)?);
        let bad = || corrupt("the grid item is malformed");
        if g.first() != Some(&0) {
            return Err(Fail::Unsupported("AVIF grid of an unknown version".into()));
        }
        let (rows, cols) = (
            *g.get(2).ok_or_else(bad)? as u32 + 1,
            *g.get(3).ok_or_else(bad)? as u32 + 1,
        );
        let (width, height, len) = if g.get(1).ok_or_else(bad)? & 1 == 0 {
            (
                be16(&g, 4).ok_or_else(bad)? as u32,
                be16(&g, 6).ok_or_else(bad)? as u32,
                8,
            )
        } else {
            (
                be32(&g, 4).ok_or_else(bad)?,
                be32(&g, 8).ok_or_else(bad)?,
                12,
            )
        };
        if g.len() != len || width == 0 || height == 0 {
            return Err(bad());
        }
        let ids: Vec<u32> = refs
            .iter()
            .filter(|(k, f, _)| k == b"dimg" && *f == id)
            .map(|(_, _, t)| *t)
            .collect();
        // libavif: an item may be a tile of one grid, once.
        if ids.iter().any(|t| {
            refs.iter()
                .filter(|(k, _, to)| k == b"dimg" && to == t)
                .count()
                > 1
        }) {
            return Err(corrupt("a grid tile is referenced twice"));
        }
        if ids.len() != (rows * cols) as usize {
            return Err(corrupt("the grid's tile count differs from rows x columns"));
        }
        let mut tiles = Vec::new();
        for t in ids {
            if kind_of(t) != Some(*b"av01") {
                return Err(corrupt("a grid tile is not an AV1 item"));
            }
            let tp = props_of(t);
            if tp.unsupported_essential {
                return Err(Fail::Unsupported(
                    "AVIF grid tile with an essential property libavif does not read".into(),
                ));
            }
            let size = tp.ispe.ok_or_else(|| corrupt("a grid tile has no size"))?;
            tiles.push((loc_of(t)?, size));
        }
        Ok(Src::Grid {
            rows,
            cols,
            width,
            height,
            tiles,
        })
    };
    let cprops = props_of(primary);
    if cprops.unsupported_essential {
        return Err(Fail::Unsupported(
            "AVIF whose primary item has an essential property libavif does not read".into(),
        ));
    }
    let (width, height) = cprops
        .ispe
        .ok_or_else(|| corrupt("the primary item has no size ('ispe')"))?;
    let color = source(primary)?;
    // The alpha item: an AV1 (or grid) item that is an 'auxl' of the color item with the alpha URN.
    let alpha_id = refs
        .iter()
        .filter(|(k, _, to)| k == b"auxl" && *to == primary)
        .map(|(_, from, _)| *from)
        .find(|&id| {
            matches!(kind_of(id), Some(k) if &k == b"av01" || &k == b"grid")
                && props_of(id).alpha_urn
                && !props_of(id).unsupported_essential
        });
    let alpha = alpha_id.map(source).transpose()?;
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
        color: Src::One(color.first_sample.into_iter().collect()),
        alpha: alpha.map(|a| Src::One(a.first_sample.into_iter().collect())),
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
    let color = decode_src(&p.color, false, max_pixels)?;
    if (color.width, color.height) != (p.width as usize, p.height as usize) {
        return Err(corrupt(&format!(
            "the header says {}x{} but the AV1 frame is {}x{}",
            p.width, p.height, color.width, color.height
        )));
    }
    let alpha = match &p.alpha {
        Some(parts) => {
            let a = decode_src(parts, true, max_pixels)?;
            if (a.width, a.height, a.depth) != (color.width, color.height, color.depth) {
                return Err(corrupt(
                    "the alpha image's size or bit depth differs from the color image's",
                ));
            }
            let mut plane: Vec<u16> = if a.depth == 8 {
                a.y.iter().map(|&v| v as u16).collect()
            } else {
                a.y16
            };
            if !a.cicp.3 {
                // Limited-range alpha (allowed by AVIF 1.0.0) is widened as libavif does
                // (`avifLimitedToFullY`).
                let sh = a.depth as i32 - 8;
                let (lo, hi, top) = (16 << sh, 235 << sh, (1 << a.depth) - 1);
                for v in &mut plane {
                    let x = ((*v as i32 - lo) * top + (hi - lo) / 2) / (hi - lo);
                    *v = x.clamp(0, top) as u16;
                }
            }
            Some(plane)
        }
        None => None,
    };
    // The colr nclx box wins over the sequence header (libavif).
    let (cp, _tc, mc, full) = p.props.nclx.unwrap_or(color.cicp);
    let pixels = if color.depth == 8 {
        let alpha8: Option<Vec<u8>> = alpha.map(|a| a.iter().map(|&v| v as u8).collect());
        let planes = avif_yuv::Planes {
            width: color.width,
            height: color.height,
            layout: color.layout,
            y: &color.y,
            u: &color.u,
            v: &color.v,
            alpha: alpha8.as_deref(),
        };
        avif_yuv::convert(&planes, mc, cp, full, p.premultiplied)?
    } else {
        let planes = avif_yuv16::Planes16 {
            width: color.width,
            height: color.height,
            layout: color.layout,
            depth: color.depth,
            y: &color.y16,
            u: &color.u16,
            v: &color.v16,
            alpha: alpha.as_deref(),
        };
        avif_yuv16::convert(&planes, mc, cp, full, p.premultiplied)?
    };
    Ok(Raster {
        width: p.width,
        height: p.height,
        pixels,
        transparency: Transparency::None,
    })
}
