//! The ISOBMFF boxes an AVIF reader needs (ISO/IEC 14496-12, HEIF 23008-12, AV1-ISOBMFF):
//! box lists, `iloc`, `iinf`, `iref`, `iprp`/`ipma` and the item properties libavif reads.

use super::Fail;
use super::bytes::{be16, be32, be64};

fn corrupt(what: &str) -> Fail {
    Fail::Corrupt(format!("AVIF: {what}"))
}

/// A big-endian unsigned integer of `n` bytes (0, 4 or 8 in `iloc`).
pub(super) fn be_n(d: &[u8], at: usize, n: usize) -> Option<u64> {
    match n {
        0 => Some(0),
        2 => be16(d, at).map(u64::from),
        4 => be32(d, at).map(u64::from),
        8 => be64(d, at),
        _ => None,
    }
}

/// A box: its type and body.
pub(super) type Bx<'a> = ([u8; 4], &'a [u8]);

/// An item's data: its extents, in order.
pub(super) type Extents<'a> = Vec<&'a [u8]>;

/// The boxes in `d`: (type, body). A box running past the end is an error (truncated file).
pub(super) fn boxes(d: &[u8]) -> Result<Vec<Bx<'_>>, Fail> {
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

pub(super) fn child<'a>(list: &[([u8; 4], &'a [u8])], kind: &[u8; 4]) -> Option<&'a [u8]> {
    list.iter().find(|(k, _)| k == kind).map(|(_, b)| *b)
}

/// Properties of an image (item or track sample entry) that the decode needs.
#[derive(Debug, Clone, Default)]
pub(super) struct Props {
    pub ispe: Option<(u32, u32)>,
    /// colr nclx: primaries, transfer, matrix, full range.
    pub nclx: Option<(u8, u8, u8, bool)>,
    pub irot: Option<u8>,
    pub imir: Option<u8>,
    pub alpha_urn: bool,
    /// An essential property libavif does not read is associated (libavif skips the item).
    pub unsupported_essential: bool,
    /// An `auxC`/`auxi` box was seen.
    pub aux_typed: bool,
}

impl Props {
    pub(super) fn add(&mut self, kind: &[u8; 4], b: &[u8]) {
        match kind {
            b"ispe" => {
                if let (Some(w), Some(h)) = (be32(b, 4), be32(b, 8)) {
                    self.ispe = Some((w, h));
                }
            }
            b"colr" if b.get(0..4) == Some(b"nclx") && b.len() >= 11 && self.nclx.is_none() => {
                self.nclx = Some((b[5], b[7], b[9], b[10] & 0x80 != 0));
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
    pub(super) fn orientation(&self) -> u8 {
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

/// `iloc`: item id -> extents (construction method 0: file offsets; 1: `idat` offsets).
pub(super) fn iloc<'a>(
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

pub(super) struct Item {
    pub id: u32,
    pub kind: [u8; 4],
    pub content_type: Vec<u8>,
}

pub(super) fn iinf(b: &[u8]) -> Result<Vec<Item>, Fail> {
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
pub(super) fn iref(b: &[u8]) -> Result<Vec<([u8; 4], u32, u32)>, Fail> {
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
/// The item properties libavif 1.4.2 parses; an essential property outside this list makes it
/// skip the item.
const KNOWN: &[&[u8; 4]] = &[
    b"ispe", b"auxC", b"auxi", b"colr", b"av1C", b"av2C", b"pasp", b"clap", b"irot", b"imir",
    b"pixi", b"a1op", b"lsel", b"a1lx", b"clli",
];

pub(super) fn iprp(b: &[u8]) -> Result<Vec<(u32, Props)>, Fail> {
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
                let (essential, index) = if flags & 1 != 0 {
                    pos += 2;
                    let v = be16(ipma, pos - 2).ok_or_else(bad)?;
                    (v & 0x8000 != 0, (v & 0x7fff) as usize)
                } else {
                    pos += 1;
                    let v = *ipma.get(pos - 1).ok_or_else(bad)?;
                    (v & 0x80 != 0, (v & 0x7f) as usize)
                };
                if index == 0 {
                    if essential {
                        return Err(corrupt("'ipma' marks the empty property essential"));
                    }
                    continue;
                }
                let (k, p) = ipco
                    .get(index - 1)
                    .ok_or_else(|| corrupt("'ipma' names a property past the 'ipco' list"))?;
                // libavif's rules on the essential flag of the properties it reads.
                if KNOWN.contains(&k) {
                    if essential && k == b"a1lx" {
                        return Err(corrupt("an 'a1lx' property is marked essential"));
                    }
                    if !essential && matches!(k, b"a1op" | b"lsel" | b"clap" | b"irot" | b"imir") {
                        return Err(corrupt(&format!(
                            "a '{}' property is not marked essential",
                            String::from_utf8_lossy(k)
                        )));
                    }
                    props.add(k, p);
                } else if essential {
                    props.unsupported_essential = true;
                }
            }
            out.push((id, props));
        }
    }
    Ok(out)
}
