//! Bad input gives a typed `PrepError` naming the input, never a panic and never garbage as
//! success. The files are built here: encoded with the `image` crate, then cut or corrupted.

use glm5v_prep::PrepError;
use glm5v_prep::decode::{DecodeOptions, ImageSource, load_image, probe};
use image::{ImageEncoder, RgbImage, RgbaImage};

mod common;

/// The IDAT payload of the test headers.
const IDAT: &[u8] = &[];

fn noisy(w: u32, h: u32) -> RgbImage {
    let mut s = 0x1234_5678u32;
    RgbImage::from_fn(w, h, |x, y| {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        image::Rgb([
            (x * 4) as u8 ^ (s as u8 & 31),
            (y * 5) as u8,
            (s >> 8) as u8,
        ])
    })
}

fn encode(format: &str, img: &RgbImage) -> Vec<u8> {
    let mut out = Vec::new();
    let (w, h) = img.dimensions();
    let raw = img.as_raw();
    let rgb = image::ExtendedColorType::Rgb8;
    match format {
        "png" => image::codecs::png::PngEncoder::new(&mut out)
            .write_image(raw, w, h, rgb)
            .unwrap(),
        "jpeg" => image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 85)
            .write_image(raw, w, h, rgb)
            .unwrap(),
        "gif" => {
            let rgba = RgbaImage::from_fn(w, h, |x, y| {
                let p = img.get_pixel(x, y).0;
                image::Rgba([p[0], p[1], p[2], 255])
            });
            image::codecs::gif::GifEncoder::new(&mut out)
                .encode(rgba.as_raw(), w, h, image::ExtendedColorType::Rgba8)
                .unwrap()
        }
        "bmp" => image::codecs::bmp::BmpEncoder::new(&mut out)
            .write_image(raw, w, h, rgb)
            .unwrap(),
        "tiff" => {
            let mut c = std::io::Cursor::new(Vec::new());
            image::codecs::tiff::TiffEncoder::new(&mut c)
                .write_image(raw, w, h, rgb)
                .unwrap();
            out = c.into_inner();
        }
        "webp" => image::codecs::webp::WebPEncoder::new_lossless(&mut out)
            .write_image(raw, w, h, rgb)
            .unwrap(),
        _ => unreachable!(),
    }
    out
}

fn bytes(name: &str, b: Vec<u8>) -> ImageSource {
    ImageSource::Bytes {
        name: name.into(),
        bytes: b,
    }
}

fn opts() -> DecodeOptions {
    DecodeOptions::default()
}

#[test]
fn intact_encodings_decode() {
    let img = noisy(61, 47);
    for f in ["png", "jpeg", "gif", "bmp", "tiff", "webp"] {
        let got =
            load_image(&bytes(f, encode(f, &img)), &opts()).unwrap_or_else(|e| panic!("{f}: {e}"));
        assert_eq!(got.dimensions(), (61, 47), "{f}");
        if matches!(f, "png" | "bmp" | "tiff" | "webp") {
            assert!(got == img, "{f}: lossless round trip differs");
        }
    }
}

/// PNG and JPEG cut anywhere inside the image data are corrupt (PIL: "image file is truncated").
#[test]
fn truncated_png_and_jpeg_are_corrupt() {
    let img = noisy(61, 47);
    for f in ["png", "jpeg"] {
        let data = encode(f, &img);
        // PNG: the last 12 bytes are IEND, which PIL does not need; JPEG: PIL needs the EOI.
        let last = if f == "png" {
            data.len() - 12
        } else {
            data.len()
        };
        let cuts = [
            8,
            20,
            40,
            100,
            data.len() / 4,
            data.len() / 2,
            data.len() * 3 / 4,
            last - 5,
            last - 1,
        ];
        for cut in cuts {
            let name = format!("{f} cut at {cut} of {}", data.len());
            match load_image(&bytes(&name, data[..cut].to_vec()), &opts()) {
                Err(PrepError::Corrupt { input, .. }) => assert_eq!(input, name),
                Err(e) => panic!("{name}: expected Corrupt, got {e}"),
                Ok(_) => panic!("{name}: decoded a truncated file"),
            }
        }
    }
}

/// Every format, cut at many offsets: an error, or (only where the cut spares the pixels, as in
/// PIL) exactly the intact image.
#[test]
fn truncated_files_never_return_garbage() {
    let img = noisy(61, 47);
    for f in ["png", "jpeg", "gif", "bmp", "tiff", "webp"] {
        let data = encode(f, &img);
        let full = load_image(&bytes(f, data.clone()), &opts()).unwrap();
        for k in 1..40 {
            let cut = data.len() * k / 40;
            match load_image(&bytes(f, data[..cut].to_vec()), &opts()) {
                Ok(got) => assert!(
                    got == full,
                    "{f} cut at {cut}/{}: success with different pixels",
                    data.len()
                ),
                Err(PrepError::Corrupt { .. } | PrepError::UnknownFormat { .. }) => {}
                Err(e) => panic!("{f} cut at {cut}: unexpected error kind: {e}"),
            }
        }
    }
}

#[test]
fn corrupted_bytes_do_not_panic() {
    let img = noisy(61, 47);
    for f in ["png", "jpeg", "gif", "bmp", "tiff", "webp"] {
        let data = encode(f, &img);
        let mut s = 99u32;
        for _ in 0..60 {
            let mut d = data.clone();
            for _ in 0..4 {
                s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                let at = 8 + (s as usize >> 8) % (d.len() - 8);
                d[at] ^= (s >> 3) as u8 | 1;
            }
            // Any outcome but a panic; a success must have the header's size.
            if let Ok(got) = load_image(&bytes(f, d.clone()), &opts()) {
                let hdr = probe(&bytes(f, d), &opts()).unwrap();
                assert_eq!(got.dimensions(), (hdr.width, hdr.height), "{f}");
            }
        }
    }
}

#[test]
fn empty_and_non_image_inputs() {
    match load_image(&bytes("empty.png", vec![]), &opts()) {
        Err(e @ PrepError::Empty { .. }) => assert!(e.to_string().contains("empty.png")),
        other => panic!("{other:?}"),
    }
    let text = b"hello, this is not an image\n".repeat(10);
    match load_image(&bytes("notes.txt", text.clone()), &opts()) {
        Err(e @ PrepError::UnknownFormat { .. }) => assert!(e.to_string().contains("notes.txt")),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        probe(&bytes("notes.txt", text), &opts()),
        Err(PrepError::UnknownFormat { .. })
    ));
}

#[test]
fn missing_file_is_io_error_naming_the_path() {
    let src = ImageSource::Path("/nonexistent/dir/photo.jpg".into());
    match load_image(&src, &opts()) {
        Err(e @ PrepError::Io { .. }) => {
            assert!(e.to_string().contains("/nonexistent/dir/photo.jpg"))
        }
        other => panic!("{other:?}"),
    }
}

/// A PNG header promising `w x h` (see `common::png_header`).
fn png_header(w: u32, h: u32) -> Vec<u8> {
    common::png_header(w, h, IDAT)
}

#[test]
fn zero_width_or_height() {
    for (w, h) in [(0, 10), (10, 0)] {
        match load_image(&bytes("zero.png", png_header(w, h)), &opts()) {
            Err(PrepError::ZeroSize { width, height, .. }) => {
                assert_eq!((width, height), (w as u64, h as u64))
            }
            other => panic!("{w}x{h}: {other:?}"),
        }
    }
    // A JPEG frame header with height 0 (DNL-style) is refused the same way.
    let mut jpeg = encode("jpeg", &noisy(16, 16));
    let sof = jpeg.windows(2).position(|w| w == [0xff, 0xc0]).unwrap();
    jpeg[sof + 5] = 0;
    jpeg[sof + 6] = 0;
    assert!(matches!(
        load_image(&bytes("zero.jpg", jpeg), &opts()),
        Err(PrepError::ZeroSize { .. })
    ));
}

#[test]
fn data_uris() {
    use base64::Engine;
    let png = encode("png", &noisy(9, 7));
    let b64 = base64::engine::general_purpose::STANDARD.encode(&png);
    let uri = format!("data:image/png;base64,{b64}");
    let from_uri = load_image(&ImageSource::from_arg(&uri), &opts()).unwrap();
    assert!(from_uri == load_image(&bytes("png", png), &opts()).unwrap());
    // Python's decodebytes skips characters outside the alphabet (line breaks, spaces).
    let wrapped: String = b64
        .as_bytes()
        .chunks(20)
        .map(|c| format!("{}\n", std::str::from_utf8(c).unwrap()))
        .collect();
    let src = ImageSource::DataUri(format!("data:image/png;base64,{wrapped}"));
    assert!(load_image(&src, &opts()).unwrap() == from_uri);
    // A dangling base64 quad is bad base64.
    let bad = ImageSource::DataUri(format!("data:image/png;base64,{}", &b64[..b64.len() - 5]));
    match load_image(&bad, &opts()) {
        Err(e @ PrepError::DataUri { .. }) => assert!(e.to_string().contains("base64"), "{e}"),
        other => panic!("{other:?}"),
    }
    for s in ["data:image/png;base64", "data:text/plain;base64,aGVsbG8="] {
        assert!(
            matches!(
                load_image(&ImageSource::DataUri(s.into()), &opts()),
                Err(PrepError::DataUri { .. })
            ),
            "{s}"
        );
    }
    // Valid base64 of something that is not an image.
    let src = ImageSource::DataUri("data:image/png;base64,aGVsbG8gd29ybGQ=".into());
    assert!(matches!(
        load_image(&src, &opts()),
        Err(PrepError::UnknownFormat { .. })
    ));
}

#[test]
fn unsupported_jpeg_precision_is_reported() {
    let mut jpeg = encode("jpeg", &noisy(16, 16));
    let sof = jpeg.windows(2).position(|w| w == [0xff, 0xc0]).unwrap();
    jpeg[sof + 4] = 12;
    match load_image(&bytes("deep.jpg", jpeg), &opts()) {
        Err(PrepError::Unsupported { detail, .. }) => {
            assert!(detail.contains("12-bit"), "{detail}")
        }
        other => panic!("{other:?}"),
    }
}

/// PIL hands libjpeg 64 KiB at a time and libjpeg's arithmetic decoder cannot wait for more data,
/// so upstream fails on arithmetic-coded JPEGs longer than that: refused the same way, from the
/// header (here a Huffman file whose SOF0 is relabelled SOF9).
#[test]
fn large_arithmetic_jpeg_is_refused_like_pil() {
    let mut jpeg = encode("jpeg", &noisy(400, 300));
    assert!(
        jpeg.len() > 65536,
        "test image too small: {} bytes",
        jpeg.len()
    );
    let sof = jpeg.windows(2).position(|w| w == [0xff, 0xc0]).unwrap();
    jpeg[sof + 1] = 0xc9;
    match load_image(&bytes("arith.jpg", jpeg), &opts()) {
        Err(PrepError::Unsupported { detail, .. }) => {
            assert!(detail.contains("arithmetic"), "{detail}")
        }
        other => panic!("{other:?}"),
    }
}

/// PIL checks the CRC of the chunks `Image.open` reads (before the first IDAT) and of no others.
#[test]
fn png_checksums_as_pil_checks_them() {
    let img = noisy(30, 20);
    let png = encode("png", &img);
    // IHDR's CRC sits at bytes 29..33.
    let mut bad_header = png.clone();
    bad_header[30] ^= 0xff;
    match load_image(&bytes("bad-ihdr.png", bad_header), &opts()) {
        Err(PrepError::Corrupt { detail, .. }) => assert!(detail.contains("IHDR"), "{detail}"),
        other => panic!("{other:?}"),
    }
    // The CRC of the (first) IDAT chunk: PIL does not verify it.
    let idat = png.windows(4).position(|w| w == b"IDAT").unwrap() - 4;
    let len = u32::from_be_bytes(png[idat..idat + 4].try_into().unwrap()) as usize;
    let mut bad_idat = png.clone();
    bad_idat[idat + 8 + len] ^= 0xff;
    assert!(load_image(&bytes("bad-idat-crc.png", bad_idat), &opts()).unwrap() == img);
}
