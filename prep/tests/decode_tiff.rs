//! TIFF through libtiff (`prep/src/decode/tiff.rs`): files Pillow 13.0.0's libtiff wrote
//! (`fixtures/tiff/`, `fixtures/scripts/gen_tiff_regress.py`) decode to upstream's
//! `load_image` RGB; TIFFs built here (tiled separate planes, BigTIFF, 12-bit gray, big-endian
//! 16-bit, CIELab) decode to their known pixels; layouts PIL refuses are refused by name; and a header
//! that promises more pixels than the decode budget is refused before decoding.

use glm5v_prep::{DecodeOptions, ImageSource, PrepError, load_image, probe};
use sha2::{Digest, Sha256};
use std::path::Path;

fn src(name: &str, bytes: Vec<u8>) -> ImageSource {
    ImageSource::Bytes {
        name: name.into(),
        bytes,
    }
}

fn decode(name: &str, bytes: Vec<u8>) -> Result<image::RgbImage, PrepError> {
    load_image(&src(name, bytes), &DecodeOptions::default())
}

#[test]
fn pillow_written_tiffs_decode_to_upstreams_rgb() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/tiff");
    let text = std::fs::read_to_string(dir.join("expected.json")).unwrap();
    let expected: serde_json::Value = serde_json::from_str(&text).unwrap();
    let cases = expected.as_object().unwrap();
    assert_eq!(cases.len(), 6);
    for (name, want) in cases {
        let bytes = std::fs::read(dir.join(name)).unwrap();
        let img = decode(name, bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        let size = [img.width() as u64, img.height() as u64];
        assert_eq!(
            size.to_vec(),
            want["size"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap())
                .collect::<Vec<_>>(),
            "{name}"
        );
        let sha: String = Sha256::digest(img.as_raw())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(sha, want["rgb_sha256"].as_str().unwrap(), "{name}");
    }
}

/// One IFD entry: tag, type (3 SHORT, 4 LONG, 16 LONG8), values.
type Entry = (u16, u16, Vec<u64>);

/// A classic little- or big-endian TIFF: header, IFD0 at 8, out-of-line values, then `data`;
/// `data_at` entries (tag 273/324 offsets) are written as `values[i] + start of data`.
fn tiff(le: bool, mut entries: Vec<Entry>, data: &[u8]) -> Vec<u8> {
    entries.sort_by_key(|e| e.0);
    let w16 = |v: u16| if le { v.to_le_bytes() } else { v.to_be_bytes() };
    let w32 = |v: u32| if le { v.to_le_bytes() } else { v.to_be_bytes() };
    let size = |t: u16| if t == 3 { 2 } else { 4 };
    let ifd_len = 2 + entries.len() * 12 + 4;
    let extra: usize = entries
        .iter()
        .map(|(_, t, v)| {
            let n = size(*t) * v.len();
            if n > 4 { n } else { 0 }
        })
        .sum();
    let data_start = (8 + ifd_len + extra) as u64;
    let mut out = if le {
        b"II*\0".to_vec()
    } else {
        b"MM\0*".to_vec()
    };
    out.extend(w32(8));
    out.extend(w16(entries.len() as u16));
    let mut tail = Vec::new();
    let mut tail_at = 8 + ifd_len;
    for (tag, typ, vals) in &entries {
        let vals: Vec<u64> = if matches!(tag, 273 | 324) {
            vals.iter().map(|v| v + data_start).collect()
        } else {
            vals.clone()
        };
        out.extend(w16(*tag));
        out.extend(w16(*typ));
        out.extend(w32(vals.len() as u32));
        let mut bytes = Vec::new();
        for v in &vals {
            if *typ == 3 {
                bytes.extend(w16(*v as u16));
            } else {
                bytes.extend(w32(*v as u32));
            }
        }
        if bytes.len() <= 4 {
            bytes.resize(4, 0);
            out.extend(bytes);
        } else {
            out.extend(w32(tail_at as u32));
            tail_at += bytes.len();
            tail.extend(bytes);
        }
    }
    out.extend(w32(0));
    out.extend(tail);
    assert_eq!(out.len() as u64, data_start);
    out.extend_from_slice(data);
    out
}

fn s(tag: u16, v: &[u64]) -> Entry {
    (tag, 3, v.to_vec())
}
fn l(tag: u16, v: &[u64]) -> Entry {
    (tag, 4, v.to_vec())
}

/// A 20x3 RGB image: pixel (x, y) = (x, 10 * y, 200 - x).
fn rgb_20x3() -> Vec<u8> {
    (0..3u8)
        .flat_map(|y| (0..20u8).flat_map(move |x| [x, 10 * y, 200 - x]))
        .collect()
}

#[test]
fn tiled_separate_planes_decode_to_their_pixels() {
    // Two 16x16 tiles across, one down, per plane: planes R, G, B one after the other.
    let want = rgb_20x3();
    let mut data = Vec::new();
    let mut offsets = Vec::new();
    for plane in 0..3 {
        for tile_x in [0usize, 16] {
            offsets.push(data.len() as u64);
            for ty in 0..16 {
                for tx in 0..16 {
                    let (x, y) = (tile_x + tx, ty);
                    data.push(if x < 20 && y < 3 {
                        want[(y * 20 + x) * 3 + plane]
                    } else {
                        0
                    });
                }
            }
        }
    }
    let file = tiff(
        true,
        vec![
            l(256, &[20]),
            l(257, &[3]),
            s(258, &[8, 8, 8]),
            s(259, &[1]),
            s(262, &[2]),
            s(277, &[3]),
            s(284, &[2]),
            s(322, &[16]),
            s(323, &[16]),
            l(324, &offsets),
            l(325, &[256; 6]),
        ],
        &data,
    );
    let img = decode("planar.tif", file).unwrap();
    assert_eq!(img.dimensions(), (20, 3));
    assert_eq!(img.as_raw(), &want);
}

#[test]
fn bigtiff_decodes_and_probes() {
    let want = rgb_20x3();
    // BigTIFF: "II", 43, offset size 8, 0, IFD at 16; 20-byte entries, LONG8 counts/offsets.
    let entries: [(u16, u16, u64); 8] = [
        (256, 3, 20),
        (257, 3, 3),
        (258, 3, 8),
        (259, 3, 1),
        (262, 3, 2),
        (273, 16, 0),
        (277, 3, 3),
        (279, 16, want.len() as u64),
    ];
    let data_at = 16 + 8 + entries.len() as u64 * 20 + 8;
    let mut f = b"II+\0".to_vec();
    f.extend(8u16.to_le_bytes());
    f.extend(0u16.to_le_bytes());
    f.extend(16u64.to_le_bytes());
    f.extend((entries.len() as u64).to_le_bytes());
    for (tag, typ, v) in entries {
        f.extend(tag.to_le_bytes());
        f.extend(typ.to_le_bytes());
        // BitsPerSample: one SHORT for all three samples (libtiff and PIL repeat it).
        f.extend(1u64.to_le_bytes());
        let v = if tag == 273 { data_at } else { v };
        if typ == 3 {
            f.extend((v as u16).to_le_bytes());
            f.extend([0; 6]);
        } else {
            f.extend(v.to_le_bytes());
        }
    }
    f.extend(0u64.to_le_bytes());
    assert_eq!(f.len() as u64, data_at);
    f.extend(&want);
    let h = probe(&src("big.tif", f.clone()), &DecodeOptions::default()).unwrap();
    assert_eq!((h.width, h.height, h.format), (20, 3, "TIFF"));
    assert_eq!(decode("big.tif", f).unwrap().as_raw(), &want);

    // A BigTIFF header promising 100000 x 100000 pixels: refused before any decoding.
    let mut huge = b"II+\0".to_vec();
    huge.extend(8u16.to_le_bytes());
    huge.extend(0u16.to_le_bytes());
    huge.extend(16u64.to_le_bytes());
    huge.extend(2u64.to_le_bytes());
    for tag in [256u16, 257] {
        huge.extend(tag.to_le_bytes());
        huge.extend(4u16.to_le_bytes());
        huge.extend(1u64.to_le_bytes());
        huge.extend(100_000u64.to_le_bytes());
    }
    huge.extend(0u64.to_le_bytes());
    for e in [
        probe(&src("huge.tif", huge.clone()), &DecodeOptions::default()).unwrap_err(),
        decode("huge.tif", huge).unwrap_err(),
    ] {
        assert!(
            matches!(
                e,
                PrepError::DecodeBudget {
                    pixels: 10_000_000_000,
                    ..
                }
            ),
            "{e}"
        );
    }
}

#[test]
fn twelve_and_sixteen_bit_gray_follow_pils_modes() {
    // 12-bit gray ("I;12" -> mode I;16, which clips at 255 in RGB): 16, 200, then 0x123 = 291.
    // Packed big-endian 12-bit samples: 010 0C8 | 123 (last, padded).
    let file = tiff(
        true,
        vec![
            l(256, &[3]),
            l(257, &[1]),
            s(258, &[12]),
            s(259, &[1]),
            s(262, &[1]),
            l(273, &[0]),
            s(277, &[1]),
            l(279, &[5]),
        ],
        &[0x01, 0x00, 0xC8, 0x12, 0x30],
    );
    let img = decode("12.tif", file).unwrap();
    assert_eq!(img.as_raw(), &[16, 16, 16, 200, 200, 200, 255, 255, 255]);

    // Big-endian uncompressed 16-bit gray ("I;16B"): values 7, 255, 256 -> 7, 255, 255.
    let file = tiff(
        false,
        vec![
            l(256, &[3]),
            l(257, &[1]),
            s(258, &[16]),
            s(259, &[1]),
            s(262, &[1]),
            l(273, &[0]),
            s(277, &[1]),
            l(279, &[6]),
        ],
        &[0, 7, 0, 255, 1, 0],
    );
    let img = decode("16be.tif", file).unwrap();
    assert_eq!(img.as_raw(), &[7, 7, 7, 255, 255, 255, 255, 255, 255]);
}

#[test]
fn cielab_converts_through_little_cms_as_pillow() {
    // File bytes L, a, b (a and b signed): 255/-128/-128, 0/-128/-128, 128/72/-68. Upstream's
    // `load_image` (Pillow 13.0.0, lcms 2.19) on this very file gives 0,255,255, 0,59,195,
    // 187,50,238.
    let file = tiff(
        true,
        vec![
            l(256, &[3]),
            l(257, &[1]),
            s(258, &[8, 8, 8]),
            s(259, &[1]),
            s(262, &[8]),
            l(273, &[0]),
            s(277, &[3]),
            l(279, &[9]),
        ],
        &[255, 128, 128, 0, 128, 128, 128, 72, 188],
    );
    let img = decode("lab.tif", file).unwrap();
    assert_eq!(img.as_raw(), &[0, 255, 255, 0, 59, 195, 187, 50, 238]);
}

#[test]
fn layouts_pil_refuses_are_refused_by_name() {
    let base = |photo: u64, bps: &[u64], spp: u64| {
        tiff(
            true,
            vec![
                l(256, &[2]),
                l(257, &[1]),
                s(258, bps),
                s(259, &[1]),
                s(262, &[photo]),
                l(273, &[0]),
                s(277, &[spp]),
                l(279, &[6]),
            ],
            &[0; 6],
        )
    };
    // RGB with two samples: no OPEN_INFO key.
    let e = decode("two.tif", base(2, &[8, 8], 2)).unwrap_err();
    assert!(
        matches!(&e, PrepError::Unsupported { format, .. } if format == "TIFF")
            && e.to_string().contains("unknown pixel mode"),
        "{e}"
    );
    // Not a TIFF past its header: a typed corruption error naming libtiff's reason.
    let e = decode("cut.tif", b"II*\0\x08\0\0\0\x05".to_vec()).unwrap_err();
    assert!(matches!(e, PrepError::Corrupt { .. }), "{e}");
}
