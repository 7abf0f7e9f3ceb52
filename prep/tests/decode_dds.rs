//! DDS (`prep/src/decode/dds.rs`): DDS files built here decode to the pixels Pillow's
//! `DdsImagePlugin` gives them (bitmask scaling, BC1 and BC5 blocks), `probe` reads the header
//! size, a header over the decode budget is refused before decoding, and BC6H files are read
//! (their block rules: `decode_misc.rs`'s generated files; the Pillow corpus suite checks the
//! rest against upstream: its 29 accepted DDS files exact).

use glm5v_prep::{DecodeOptions, ImageSource, PrepError, load_image, probe};

fn src(name: &str, bytes: Vec<u8>) -> ImageSource {
    ImageSource::Bytes {
        name: name.into(),
        bytes,
    }
}

/// A 128-byte DDS header: size, pixel format flags, FourCC, bit count, masks.
fn header(w: u32, h: u32, pfflags: u32, fourcc: &[u8; 4], bits: u32, masks: [u32; 4]) -> Vec<u8> {
    let mut d = b"DDS ".to_vec();
    for v in [124u32, 0x1007, h, w, 0, 0, 0] {
        d.extend(v.to_le_bytes());
    }
    d.extend([0u8; 44]);
    for v in [32u32, pfflags] {
        d.extend(v.to_le_bytes());
    }
    d.extend(fourcc);
    d.extend(bits.to_le_bytes());
    for m in masks {
        d.extend(m.to_le_bytes());
    }
    d.extend([0u8; 20]);
    assert_eq!(d.len(), 128);
    d
}

#[test]
fn bitmask_layouts_scale_as_pillow() {
    // 16-bit X1R5G5B5: 31 -> 255, 16 -> int(16 / 31 * 255) = 131, 1 -> int(255 / 31) = 8.
    let mut d = header(2, 1, 0x40, b"\0\0\0\0", 16, [0x7c00, 0x03e0, 0x001f, 0]);
    for (r, g, b) in [(31u16, 16u16, 1u16), (0, 31, 30)] {
        d.extend((r << 10 | g << 5 | b).to_le_bytes());
    }
    let s = src("bgr15.dds", d);
    let h = probe(&s, &DecodeOptions::default()).unwrap();
    assert_eq!((h.width, h.height, h.format), (2, 1, "DDS"));
    let img = load_image(&s, &DecodeOptions::default()).unwrap();
    assert_eq!(img.as_raw(), &[255, 131, 8, 0, 255, 246]);
}

#[test]
fn bc1_and_bc5_blocks_decode_as_pillow() {
    // One BC1 block, red (0xf800) to blue (0x001f), first row using colours 0, 1, 2, 3.
    let mut d = header(4, 1, 0x4, b"DXT1", 0, [0; 4]);
    d.extend([0x00, 0xf8, 0x1f, 0x00, 0b11_10_01_00, 0, 0, 0]);
    let img = load_image(&src("bc1.dds", d), &DecodeOptions::default()).unwrap();
    assert_eq!(
        img.as_raw(),
        &[255, 0, 0, 0, 0, 255, 170, 0, 85, 85, 0, 170]
    );
    // One BC5 (ATI2) block: red channel 200 / 10 ramp, green constant 50; blue stays 0.
    let mut d = header(2, 1, 0x4, b"ATI2", 0, [0; 4]);
    d.extend([200, 10, 0b001_000, 0, 0, 0, 0, 0]);
    d.extend([50, 50, 0, 0, 0, 0, 0, 0]);
    let img = load_image(&src("bc5.dds", d), &DecodeOptions::default()).unwrap();
    assert_eq!(img.as_raw(), &[200, 50, 0, 10, 50, 0]);
}

#[test]
fn budget_and_truncation_are_refused_bc6h_is_read() {
    let big = header(100_000, 100_000, 0x4, b"DXT1", 0, [0; 4]);
    for r in [
        probe(&src("big.dds", big.clone()), &DecodeOptions::default()).map(|_| ()),
        load_image(&src("big.dds", big), &DecodeOptions::default()).map(|_| ()),
    ] {
        assert!(
            matches!(
                r,
                Err(PrepError::DecodeBudget {
                    pixels: 10_000_000_000,
                    ..
                })
            ),
            "{r:?}"
        );
    }
    // A BC1 image of 8 x 8 with one block of the four it needs.
    let mut d = header(8, 8, 0x4, b"DXT1", 0, [0; 4]);
    d.extend([0u8; 8]);
    let e = load_image(&src("cut.dds", d), &DecodeOptions::default()).unwrap_err();
    assert!(
        matches!(&e, PrepError::Corrupt { format, .. } if format == "DDS"),
        "{e}"
    );
    // DX10 with BC6H_UF16 (95): read. An all-zero block is mode 0 with zero endpoints: black.
    let mut d = header(4, 4, 0x4, b"DX10", 0, [0; 4]);
    for v in [95u32, 3, 0, 1, 0] {
        d.extend(v.to_le_bytes());
    }
    d.extend([0u8; 16]);
    let h = probe(&src("bc6h.dds", d.clone()), &DecodeOptions::default()).unwrap();
    assert_eq!((h.width, h.height), (4, 4));
    let img = load_image(&src("bc6h.dds", d), &DecodeOptions::default()).unwrap();
    assert_eq!(img.as_raw(), &[0u8; 48]);
}
