//! The decode budget (PIL's DecompressionBombError): refused from the header, before decoding,
//! with flat memory. Kept in its own test binary so that the peak-memory check sees only itself.

use glm5v_prep::PrepError;
use glm5v_prep::decode::{DEFAULT_DECODE_BUDGET, DecodeOptions, ImageSource, load_image, probe};
use image::ImageEncoder;

mod common;

/// The IDAT payload of the test headers.
const IDAT: &[u8] = &[0x78, 0x9c, 0x03, 0x00];

/// A PNG header promising `w x h` (see `common::png_header`).
fn png_header(w: u32, h: u32) -> Vec<u8> {
    common::png_header(w, h, IDAT)
}

/// Peak resident memory of this process (VmHWM), in KiB.
fn peak_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[test]
fn huge_header_is_refused_with_flat_memory() {
    let before = peak_kib();
    let src = ImageSource::Bytes {
        name: "bomb.png".into(),
        bytes: png_header(100_000, 100_000),
    };
    for r in [
        probe(&src, &DecodeOptions::default()).map(|_| ()),
        load_image(&src, &DecodeOptions::default()).map(|_| ()),
    ] {
        match r {
            Err(PrepError::DecodeBudget {
                width,
                height,
                pixels,
                budget,
                input,
            }) => {
                assert_eq!((width, height, pixels), (100_000, 100_000, 10_000_000_000));
                assert_eq!(budget, DEFAULT_DECODE_BUDGET);
                assert_eq!(input, "bomb.png");
            }
            other => panic!("{other:?}"),
        }
    }
    let grown = peak_kib().saturating_sub(before);
    assert!(
        grown < 16 * 1024,
        "peak memory grew by {grown} KiB refusing a header"
    );
}

#[test]
fn budget_uses_pils_strict_comparison() {
    // PIL raises when w * h > 2 * MAX_IMAGE_PIXELS: exactly the budget passes.
    let img = image::RgbImage::from_pixel(61, 47, image::Rgb([1, 2, 3]));
    let mut png = Vec::new();
    image::codecs::png::PngEncoder::new(&mut png)
        .write_image(img.as_raw(), 61, 47, image::ExtendedColorType::Rgb8)
        .unwrap();
    let src = ImageSource::Bytes {
        name: "small.png".into(),
        bytes: png,
    };
    let at = DecodeOptions {
        max_pixels: 61 * 47,
        ..Default::default()
    };
    assert!(load_image(&src, &at).is_ok());
    assert_eq!(probe(&src, &at).unwrap().width, 61);
    let below = DecodeOptions {
        max_pixels: 61 * 47 - 1,
        ..Default::default()
    };
    assert!(matches!(
        load_image(&src, &below),
        Err(PrepError::DecodeBudget { .. })
    ));
    assert!(matches!(
        probe(&src, &below),
        Err(PrepError::DecodeBudget { .. })
    ));
    // PIL's threshold itself: 2 * 89_478_485.
    assert_eq!(DEFAULT_DECODE_BUDGET, 178_956_970);
}

#[test]
fn every_format_checks_the_budget_before_decoding() {
    // Headers promising 20000 x 20000 = 4e8 pixels in each format, with no pixel data behind them.
    let mut jpeg = vec![0xff, 0xd8, 0xff, 0xc0, 0, 11, 8];
    jpeg.extend(20000u16.to_be_bytes());
    jpeg.extend(20000u16.to_be_bytes());
    jpeg.extend([1, 1, 0x11, 0, 0xff, 0xda, 0, 8, 1, 1, 0, 0, 0x3f, 0]);
    let mut gif = b"GIF89a".to_vec();
    gif.extend(20000u16.to_le_bytes());
    gif.extend(20000u16.to_le_bytes());
    gif.extend([0, 0, 0, b',', 0, 0, 0, 0, 1, 0, 1, 0, 0, 2, 0, b';']);
    let mut bmp = b"BM".to_vec();
    bmp.extend([0u8; 12]);
    bmp.extend(40u32.to_le_bytes());
    bmp.extend(20000i32.to_le_bytes());
    bmp.extend(20000i32.to_le_bytes());
    bmp.extend([1, 0, 24, 0]);
    bmp.extend([0u8; 24]);
    let mut webp = b"RIFF".to_vec();
    webp.extend(30u32.to_le_bytes());
    webp.extend(b"WEBPVP8X");
    webp.extend(10u32.to_le_bytes());
    webp.extend([0u8; 4]);
    webp.extend(&19999u32.to_le_bytes()[..3]);
    webp.extend(&19999u32.to_le_bytes()[..3]);
    let mut tiff = b"II*\0".to_vec();
    tiff.extend(8u32.to_le_bytes());
    tiff.extend(2u16.to_le_bytes());
    for tag in [256u16, 257] {
        tiff.extend(tag.to_le_bytes());
        tiff.extend(4u16.to_le_bytes());
        tiff.extend(1u32.to_le_bytes());
        tiff.extend(20000u32.to_le_bytes());
    }
    tiff.extend(0u32.to_le_bytes());
    let before = peak_kib();
    for (name, data) in [
        ("jpeg", jpeg),
        ("gif", gif),
        ("bmp", bmp),
        ("webp", webp),
        ("tiff", tiff),
        ("png", png_header(20000, 20000)),
    ] {
        let src = ImageSource::Bytes {
            name: name.into(),
            bytes: data,
        };
        match load_image(&src, &DecodeOptions::default()) {
            Err(PrepError::DecodeBudget { pixels, .. }) => {
                assert_eq!(pixels, 400_000_000, "{name}")
            }
            other => panic!("{name}: {other:?}"),
        }
    }
    assert!(peak_kib().saturating_sub(before) < 16 * 1024);
}
