//! The bad-input catalog (docs/CATALOG.md): one test per row that no crate-level test already
//! proves, plus the regression tests of every fuzzing finding. Bad inputs are built here, as bytes
//! or in temp dirs; the only files read are the tiny checkpoint and one small fixture JPEG.
//!
//! Memory checks use a per-thread counting allocator: each test measures the peak of bytes
//! allocated by its own thread, so tests running in parallel do not disturb each other (the
//! header checks run on the calling thread).

use glm5v_prep::{
    DecodeOptions, ImageSource, PixelBatch, PrepError, PrepOptions, load_image, plan_image,
    prep_images, probe, read_prep_safetensors, write_prep_safetensors,
};
use glm5v_reference::{ConfigError, TowerWeights, VisionConfig, WeightError};
use sha2::{Digest, Sha256};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

// ---------------------------------------------------------------------------------------------
// A per-thread counting allocator.

struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn add(delta: isize) {
    let _ = LIVE.try_with(|l| {
        let v = l.get() + delta;
        l.set(v);
        let _ = PEAK.try_with(|p| p.set(p.get().max(v)));
    });
}

// SAFETY: forwards to the system allocator; the counters are const-initialised thread locals
// without destructors, so touching them never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            add(l.size() as isize);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(l) };
        if !p.is_null() {
            add(l.size() as isize);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) };
        add(-(l.size() as isize));
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            add(new as isize - l.size() as isize);
        }
        q
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Runs `f` and returns its result with the peak of bytes this thread allocated meanwhile
/// (above what it held before).
fn peak_during<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let start = LIVE.with(|l| l.get());
    PEAK.with(|p| p.set(start));
    let r = f();
    let peak = PEAK.with(|p| p.get());
    (r, (peak - start).max(0) as usize)
}

// ---------------------------------------------------------------------------------------------
// Hand-made PNGs (stored deflate blocks), so tests can write any header and cut anywhere.

fn zlib_stored(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x78, 0x01];
    let blocks: Vec<&[u8]> = if data.is_empty() {
        vec![&[][..]]
    } else {
        data.chunks(65_535).collect()
    };
    for (i, b) in blocks.iter().enumerate() {
        out.push((i + 1 == blocks.len()) as u8);
        out.extend((b.len() as u16).to_le_bytes());
        out.extend((!(b.len() as u16)).to_le_bytes());
        out.extend(*b);
    }
    let (mut a, mut s) = (1u32, 0u32);
    for &x in data {
        a = (a + x as u32) % 65_521;
        s = (s + a) % 65_521;
    }
    out.extend(((s << 16) | a).to_be_bytes());
    out
}

/// An 8-bit RGB PNG of `w x h` from row-major RGB `pixels`.
fn png_rgb(w: u32, h: u32, pixels: &[u8]) -> Vec<u8> {
    let mut raw = Vec::with_capacity(pixels.len() + h as usize);
    for row in pixels.chunks(w as usize * 3) {
        raw.push(0); // filter: none
        raw.extend(row);
    }
    png_with_header(w, h, &zlib_stored(&raw))
}

/// A PNG whose IHDR says `w x h` (8-bit RGB) with the given IDAT payload: prep's test helper.
#[path = "../../prep/tests/common/mod.rs"]
mod prep_common;
use prep_common::png_header as png_with_header;

fn bytes_src(name: &str, b: Vec<u8>) -> ImageSource {
    ImageSource::Bytes {
        name: name.into(),
        bytes: b,
    }
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The message of `e` must contain every needle.
fn names(e: &dyn std::fmt::Display, needles: &[&str]) {
    let text = e.to_string();
    for n in needles {
        assert!(text.contains(n), "message {text:?} should contain {n:?}");
    }
}

// =============================================================================================
// Accepted, handled as upstream.

/// The sliver's pixels: a pattern the upstream side (see below) computes identically.
fn sliver_pixels() -> Vec<u8> {
    (0..60_000usize)
        .flat_map(|x| (0..3).map(move |c| ((x * 37 + c * 101 + (x >> 7) * 13) & 255) as u8))
        .collect()
}

/// A 1 x 60000 (and 60000 x 1) sliver is accepted and prepared exactly as upstream does: no
/// resize (the content fits), a 28 x 60004 canvas, 8572 rows. The expected sha256 of
/// `pixel_values` (f32 little-endian) is upstream's: transformers 5.23.0
/// `Glm5NextImageProcessor()(images=load_image(png))` on the same pattern
/// (`x*37 + c*101 + (x>>7)*13 mod 256`), written as an RGB PNG by PIL.
#[test]
fn sliver_1x60000_matches_upstream() {
    let px = sliver_pixels();
    let cases = [
        (
            "1x60000",
            60_000,
            1,
            [1, 2, 4286],
            "6c9c4dc45ecc7c2287af43ba2e9cda1bdc016a659f13a809b132846095324c1b",
        ),
        (
            "60000x1",
            1,
            60_000,
            [1, 4286, 2],
            "f77a78ebae291ebe89ba36ed36f8c5f1a66669143af87ee5ee1206e49a27f2d6",
        ),
    ];
    for (name, w, h, grid, sha) in cases {
        let src = bytes_src(name, png_rgb(w, h, &px));
        let plan = plan_image(&src, &PrepOptions::default()).unwrap();
        assert_eq!(plan.grid_thw, grid.map(|v| v as usize), "{name}: plan");
        let b = prep_images(&[src], &PrepOptions::default()).unwrap();
        assert_eq!(b.image_grid_thw, vec![grid], "{name}: grid");
        assert_eq!(b.pixel_values.len(), 8572 * 1176, "{name}: rows");
        let le: Vec<u8> = b
            .pixel_values
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(
            sha256_hex(&le),
            sha,
            "{name}: pixel_values differ from upstream's"
        );
    }
}

// =============================================================================================
// Rejected with a typed error naming the problem: images.

/// PNG and JPEG cut at several offsets (inside the signature, the header, the data, just before
/// the end) are refused by plan (when the header is cut) and always by prep, with an error
/// naming the input; never a panic, never pixels.
#[test]
fn truncated_png_and_jpeg() {
    let px: Vec<u8> = (0..40 * 30 * 3).map(|i| (i * 7 % 251) as u8).collect();
    let png = png_rgb(40, 30, &px);
    let jpeg = std::fs::read(repo().join("fixtures/prep/images/jpeg_q75.jpg")).unwrap();
    for (fmt, data, end) in [("PNG", &png, png.len() - 12), ("JPEG", &jpeg, jpeg.len())] {
        let cuts = [
            1,
            4,
            12,
            20,
            33,
            end / 3,
            end / 2,
            end - 100,
            end - 2,
            end - 1,
        ];
        for cut in cuts {
            let name = format!("{fmt} cut at {cut} of {}", data.len());
            let src = bytes_src(&name, data[..cut].to_vec());
            match prep_images(std::slice::from_ref(&src), &PrepOptions::default()) {
                Ok(_) => panic!("{name}: prepared a truncated file"),
                Err(e @ (PrepError::Corrupt { .. } | PrepError::UnknownFormat { .. })) => {
                    names(&e, &[&name])
                }
                Err(e) => panic!("{name}: unexpected error kind: {e}"),
            }
            if cut <= 12 {
                let e = plan_image(&src, &PrepOptions::default()).unwrap_err();
                names(&e, &[&name]);
            }
        }
    }
}

/// Zero width or height: refused by plan and prep, naming the size.
#[test]
fn zero_width_or_height() {
    for (w, h) in [(0, 10), (10, 0), (0, 0)] {
        let name = format!("zero_{w}x{h}.png");
        let src = bytes_src(&name, png_with_header(w, h, &zlib_stored(&[])));
        for e in [
            plan_image(&src, &PrepOptions::default()).unwrap_err(),
            prep_images(std::slice::from_ref(&src), &PrepOptions::default()).unwrap_err(),
        ] {
            assert!(matches!(e, PrepError::ZeroSize { .. }), "{name}: {e}");
            names(&e, &[&name, "zero width or height", &format!("{w}x{h}")]);
        }
    }
}

/// A header promising 100000 x 100000 pixels is refused before decoding, by plan, probe and
/// load, and the calling thread's peak allocation stays under 1 MiB (the pixels would be 30 GB).
#[test]
fn header_promising_100000x100000_is_refused_with_flat_memory() {
    // A JPEG header too: SOI, SOF0 65500 x 65500 x 3, SOS, no real data.
    let mut jpeg = vec![0xff, 0xd8, 0xff, 0xc0, 0, 17, 8];
    jpeg.extend(65_500u16.to_be_bytes());
    jpeg.extend(65_500u16.to_be_bytes());
    jpeg.extend([3, 1, 0x22, 0, 2, 0x11, 1, 3, 0x11, 1]);
    // SOS (3 components), one byte of "scan data", EOI
    jpeg.extend([
        0xff, 0xda, 0, 12, 3, 1, 0, 2, 0x11, 3, 0x11, 0, 63, 0, 0, 0xff, 0xd9,
    ]);
    let cases = [
        (
            "bomb.png",
            png_with_header(100_000, 100_000, &zlib_stored(&[0; 64])),
            10_000_000_000u64,
        ),
        ("bomb.jpg", jpeg, 65_500 * 65_500),
    ];
    for (name, data, pixels) in cases {
        let src = bytes_src(name, data);
        let opts = PrepOptions::default();
        let (results, peak) = peak_during(|| {
            vec![
                plan_image(&src, &opts).map(|_| ()),
                probe(&src, &opts.decode).map(|_| ()),
                load_image(&src, &opts.decode).map(|_| ()),
            ]
        });
        for r in results {
            match r {
                Err(e @ PrepError::DecodeBudget { .. }) => {
                    names(&e, &[name, &pixels.to_string(), "refused before decoding"])
                }
                other => panic!("{name}: {other:?}"),
            }
        }
        assert!(
            peak < 1 << 20,
            "{name}: peak allocation {peak} bytes while refusing a header"
        );
        let e = prep_images(&[src], &opts).unwrap_err();
        assert!(matches!(e, PrepError::DecodeBudget { .. }), "{e}");
    }
}

/// An empty file and a non-image, by path: typed errors naming the path.
#[test]
fn empty_file_and_non_image() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.png");
    std::fs::write(&empty, b"").unwrap();
    let text = dir.path().join("notes.jpg");
    std::fs::write(&text, b"name,age\nada,36\n").unwrap();
    let e = prep_images(&[ImageSource::Path(empty.clone())], &PrepOptions::default()).unwrap_err();
    assert!(matches!(e, PrepError::Empty { .. }), "{e}");
    names(&e, &["empty.png", "empty"]);
    let e = plan_image(&ImageSource::Path(text.clone()), &PrepOptions::default()).unwrap_err();
    assert!(matches!(e, PrepError::UnknownFormat { .. }), "{e}");
    names(&e, &["notes.jpg", "not a supported image"]);
    let e = prep_images(&[ImageSource::Path(text)], &PrepOptions::default()).unwrap_err();
    assert!(matches!(e, PrepError::UnknownFormat { .. }), "{e}");
}

/// Data URIs with bad base64 (a dangling character, bad padding), no comma, or a non-image
/// type: `PrepError::DataUri` saying what is wrong.
#[test]
fn data_uri_with_bad_base64() {
    let cases = [
        (
            "data:image/png;base64,iVBORw0KGgoAA",
            "cannot be 1 more than a multiple of 4",
        ),
        ("data:image/png;base64,iVBORw0KGgo", "incorrect padding"),
        ("data:image/png;base64,iVBORw0KG!g", "incorrect padding"),
        ("data:image/png;base64", "no comma"),
        ("data:text/plain;base64,aGVsbG8=", "data:image/"),
    ];
    for (uri, needle) in cases {
        let src = ImageSource::DataUri(uri.into());
        for e in [
            plan_image(&src, &PrepOptions::default()).unwrap_err(),
            prep_images(std::slice::from_ref(&src), &PrepOptions::default()).unwrap_err(),
        ] {
            assert!(matches!(e, PrepError::DataUri { .. }), "{uri}: {e}");
            names(&e, &["bad data URI", needle]);
        }
    }
    // Valid base64 of something that is not an image: the decoded bytes are judged as a file.
    let e = plan_image(
        &ImageSource::DataUri("data:image/png;base64,aGVsbG8gd29ybGQ=".into()),
        &PrepOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(e, PrepError::UnknownFormat { .. }), "{e}");
}

// =============================================================================================
// Rejected: checkpoints. Built from the tiny checkpoint's tensors.

fn tiny_dir() -> PathBuf {
    repo().join("reference/tests/data/tiny")
}

struct Entry {
    dtype: String,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

fn tiny_tensors() -> BTreeMap<String, Entry> {
    let bytes = std::fs::read(tiny_dir().join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    st.tensors()
        .into_iter()
        .map(|(n, t)| {
            (
                n,
                Entry {
                    dtype: format!("{:?}", t.dtype()),
                    shape: t.shape().to_vec(),
                    bytes: t.data().to_vec(),
                },
            )
        })
        .collect()
}

/// A safetensors file from a header (name -> dtype, shape, offsets) and a data section.
fn safetensors_raw(header: &serde_json::Value, data: &[u8]) -> Vec<u8> {
    let mut text = serde_json::to_vec(header).unwrap();
    while !text.len().is_multiple_of(8) {
        text.push(b' ');
    }
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend(text);
    out.extend(data);
    out
}

fn encode(tensors: &BTreeMap<String, Entry>) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (name, e) in tensors {
        let start = data.len();
        data.extend_from_slice(&e.bytes);
        header.insert(name.clone(), serde_json::json!({"dtype": e.dtype, "shape": e.shape, "data_offsets": [start, data.len()]}));
    }
    safetensors_raw(&serde_json::Value::Object(header), &data)
}

fn checkpoint(config: Option<&str>, files: &[(&str, Vec<u8>)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    match config {
        Some(c) => std::fs::write(dir.path().join("config.json"), c).unwrap(),
        None => {
            std::fs::copy(
                tiny_dir().join("config.json"),
                dir.path().join("config.json"),
            )
            .unwrap();
        }
    }
    for (name, bytes) in files {
        std::fs::write(dir.path().join(name), bytes).unwrap();
    }
    dir
}

fn load_err(dir: &Path) -> WeightError {
    match TowerWeights::<f32>::load(dir) {
        Ok(_) => panic!("loading {} should fail", dir.display()),
        Err(e) => e,
    }
}

/// Truncated header, header length past EOF, overlapping and out-of-range offsets: each a
/// `WeightError::Header` naming the file and the safetensors problem.
#[test]
fn malformed_safetensors_files() {
    let good = encode(&tiny_tensors());
    let hlen = u64::from_le_bytes(good[..8].try_into().unwrap()) as usize;
    let mut past_eof = good.clone();
    past_eof[..8].copy_from_slice(&((good.len() as u64) + 1).to_le_bytes());
    let f32s =
        |n: usize| serde_json::json!({"dtype": "F32", "shape": [n], "data_offsets": [0, 4 * n]});
    let overlapping = safetensors_raw(
        &serde_json::json!({
            "model.visual.a": {"dtype": "F32", "shape": [64], "data_offsets": [0, 256]},
            "model.visual.b": {"dtype": "F32", "shape": [64], "data_offsets": [128, 384]},
        }),
        &[0; 384],
    );
    let out_of_range = safetensors_raw(
        &serde_json::json!({ "model.visual.patch_embed.proj.bias": f32s(64) }),
        &[0; 200],
    );
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("truncated header", good[..8 + hlen / 2].to_vec(), ""),
        (
            "shorter than the length prefix",
            good[..5].to_vec(),
            "bytes long",
        ),
        ("header length past the end of file", past_eof, ""),
        ("overlapping offsets", overlapping, ""),
        ("out-of-range offsets", out_of_range, ""),
    ];
    for (what, bytes, needle) in cases {
        let dir = checkpoint(None, &[("model.safetensors", bytes)]);
        let e = load_err(dir.path());
        assert!(matches!(e, WeightError::Header { .. }), "{what}: {e}");
        names(
            &e,
            &["model.safetensors", "not a valid safetensors file", needle],
        );
    }
}

/// A tensor of the wrong dtype or shape: the error names the tensor, and expected vs found.
#[test]
fn wrong_dtype_or_shape() {
    let mut t = tiny_tensors();
    let e = t.get_mut("model.visual.blocks.0.attn.qkv.weight").unwrap();
    e.dtype = "I16".into(); // same byte size as BF16, so the header stays consistent
    let dir = checkpoint(None, &[("model.safetensors", encode(&t))]);
    let err = load_err(dir.path());
    assert!(matches!(err, WeightError::Dtype { .. }), "{err}");
    names(
        &err,
        &[
            "model.visual.blocks.0.attn.qkv.weight",
            "I16",
            "BF16, F16 or F32",
        ],
    );

    let mut t = tiny_tensors();
    let e = t.get_mut("model.visual.blocks.1.attn.proj.weight").unwrap();
    e.shape = vec![e.shape[0] / 2, e.shape[1] * 2];
    let dir = checkpoint(None, &[("model.safetensors", encode(&t))]);
    let err = load_err(dir.path());
    assert!(matches!(err, WeightError::Shape { .. }), "{err}");
    names(
        &err,
        &[
            "model.visual.blocks.1.attn.proj.weight",
            "[32, 128]",
            "expected [64, 64]",
        ],
    );
}

/// A shard named by the index but absent: `MissingShard` naming the shard and the index.
#[test]
fn missing_shard_named_by_the_index() {
    let all = tiny_tensors();
    let names_: Vec<String> = all.keys().cloned().collect();
    let map: serde_json::Map<String, serde_json::Value> = names_
        .iter()
        .enumerate()
        .map(|(i, n)| {
            (
                n.clone(),
                serde_json::json!(if i < 5 {
                    "part-1.safetensors"
                } else {
                    "part-2.safetensors"
                }),
            )
        })
        .collect();
    let first: BTreeMap<String, Entry> = all.into_iter().take(5).collect();
    let index = serde_json::to_vec(&serde_json::json!({"weight_map": map})).unwrap();
    let dir = checkpoint(
        None,
        &[
            ("model.safetensors.index.json", index),
            ("part-1.safetensors", encode(&first)),
        ],
    );
    let e = load_err(dir.path());
    assert!(matches!(e, WeightError::MissingShard { .. }), "{e}");
    names(
        &e,
        &[
            "part-2.safetensors",
            "model.safetensors.index.json",
            "is missing",
        ],
    );
}

/// Configs: hidden_size % num_heads != 0, zero depth, a non-axial rope. Each a config error
/// naming config.json and the field, both from `Checkpoint` loading and from parsing.
#[test]
fn bad_configs() {
    let weights = encode(&tiny_tensors());
    let cases = [
        (
            r#"{"vision_config": {"hidden_size": 64, "num_heads": 5}}"#,
            "not divisible by num_heads",
        ),
        (
            r#"{"vision_config": {"hidden_size": 64, "num_heads": 4, "depth": 0}}"#,
            "`depth` must be positive",
        ),
        (
            r#"{"vision_config": {"hidden_size": 64, "num_heads": 4, "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}}}"#,
            "must be \"axial\"",
        ),
    ];
    for (text, needle) in cases {
        let dir = checkpoint(Some(text), &[("model.safetensors", weights.clone())]);
        let e = load_err(dir.path());
        assert!(
            matches!(e, WeightError::Config(ConfigError::Invalid { .. })),
            "{text}: {e}"
        );
        names(&e, &["config.json", needle]);
    }
}

/// NaN (and Inf) weights load, with one warning per tensor naming it and the count.
#[test]
fn nan_weights_load_with_a_warning_naming_the_tensor() {
    let mut t = tiny_tensors();
    for (name, at) in [
        ("model.visual.merger.down_proj.weight", 3),
        ("model.visual.blocks.1.norm2.weight", 0),
    ] {
        let e = t.get_mut(name).unwrap();
        assert_eq!(e.dtype, "BF16");
        e.bytes[2 * at..2 * at + 2].copy_from_slice(&0x7fc0u16.to_le_bytes()); // bf16 NaN
    }
    let dir = checkpoint(None, &[("model.safetensors", encode(&t))]);
    let w = TowerWeights::<f32>::load(dir.path()).unwrap();
    assert_eq!(w.warnings.len(), 2, "{:?}", w.warnings);
    for name in [
        "model.visual.merger.down_proj.weight",
        "model.visual.blocks.1.norm2.weight",
    ] {
        assert!(
            w.warnings
                .iter()
                .any(|m| m.contains(name) && m.contains("1 non-finite")),
            "no warning names {name}: {:?}",
            w.warnings
        );
    }
    assert!(w.merger.down_w.iter().any(|v| v.is_nan()));
}

// =============================================================================================
// Rejected: `--pixels` files (TAPS.md section 3).

fn write_pixels(path: &Path, rows: usize, grid: &[[i64; 3]]) {
    let vals = vec![0.5f32; rows * 1176];
    let vbytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    let gbytes: Vec<u8> = grid
        .iter()
        .flatten()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let views = vec![
        (
            "pixel_values",
            safetensors::tensor::TensorView::new(
                safetensors::Dtype::F32,
                vec![rows, 1176],
                &vbytes,
            )
            .unwrap(),
        ),
        (
            "image_grid_thw",
            safetensors::tensor::TensorView::new(
                safetensors::Dtype::I64,
                vec![grid.len(), 3],
                &gbytes,
            )
            .unwrap(),
        ),
    ];
    std::fs::write(path, safetensors::serialize(views, None).unwrap()).unwrap();
}

/// A pixels file whose row count does not match its grid: an error naming the file, the rows and
/// the grid's sum; a matching one reads back.
#[test]
fn pixels_rows_must_match_the_grid() {
    let dir = tempfile::tempdir().unwrap();
    let ok = dir.path().join("ok.safetensors");
    write_pixels(&ok, 8, &[[1, 2, 4]]);
    let b = read_prep_safetensors(&ok).unwrap();
    assert_eq!(b.image_grid_thw, vec![[1, 2, 4]]);
    for (rows, grid) in [
        (7usize, vec![[1i64, 2, 4]]),
        (9, vec![[1, 2, 4]]),
        (8, vec![[1, 2, 2], [1, 2, 2], [1, 2, 2]]),
    ] {
        let p = dir
            .path()
            .join(format!("bad_{rows}_{}.safetensors", grid.len()));
        write_pixels(&p, rows, &grid);
        let e = read_prep_safetensors(&p).unwrap_err();
        let want = grid.iter().map(|g| g.iter().product::<i64>()).sum::<i64>();
        names(
            &e,
            &[
                &p.display().to_string(),
                &format!("{rows} rows"),
                &format!("sums t*h*w to {want}"),
            ],
        );
    }
    // A writer refuses the same inconsistency instead of writing it.
    let bad = PixelBatch {
        patch_dim: 1176,
        pixel_values: vec![0.0; 3 * 1176],
        image_grid_thw: vec![[1, 2, 2]],
        ..Default::default()
    };
    assert!(write_prep_safetensors(dir.path().join("never.safetensors"), &bad).is_err());
    assert!(!dir.path().join("never.safetensors").exists());
}

/// Grid entries whose product overflows must be refused as an error, not panic (debug) or wrap
/// around to a plausible row count (release: 2^32 * 2^32 * 2 wraps to 0, so this file's 4 rows
/// "match" and the tower would then loop 2^32 times building attention segments).
#[test]
fn pixels_grid_overflow_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("overflow.safetensors");
    write_pixels(&p, 4, &[[1 << 32, 1 << 32, 2], [1, 2, 2]]);
    let r = std::panic::catch_unwind(|| read_prep_safetensors(&p));
    match r {
        Ok(Err(e)) => names(&e, &["overflow.safetensors"]),
        Ok(Ok(b)) => panic!("accepted a grid of {:?} for 4 rows", b.image_grid_thw),
        Err(_) => panic!(
            "read_prep_safetensors panicked on an overflowing grid (see CATALOG.md, finding F1)"
        ),
    }
}

/// A vision config that parses must be usable: its derived sizes (patch_dim, merge unit) must
/// not overflow. A patch_size of 2^32 passes `validate` today and then overflows patch_dim.
#[test]
fn config_with_overflowing_sizes_is_an_error() {
    let text = r#"{"patch_size": 4294967296, "temporal_patch_size": 4294967296}"#;
    let r = std::panic::catch_unwind(|| {
        VisionConfig::from_json_str(text, "config.json").map(|c| c.patch_dim())
    });
    match r {
        Ok(Err(e)) => names(&e, &["config.json"]),
        Ok(Ok(d)) => panic!("accepted a config whose patch_dim is {d} (wrapped)"),
        Err(_) => panic!("a parsed config's patch_dim overflowed (see CATALOG.md, finding F2)"),
    }
}

/// A config with a huge depth must fail with an error (missing tensor), not abort allocating
/// `depth` blocks up front.
#[test]
fn huge_depth_fails_cleanly() {
    let cfg = r#"{"vision_config": {"hidden_size": 64, "num_heads": 4, "intermediate_size": 128, "out_hidden_size": 96,
        "projection_intermediate_size": 160, "swiglu_limit": 2.5, "depth": 100000000000000000}}"#;
    let dir = checkpoint(Some(cfg), &[("model.safetensors", encode(&tiny_tensors()))]);
    let ((), peak) = peak_during(|| {
        let r = std::panic::catch_unwind(|| TowerWeights::<f32>::load(dir.path()).map(|_| ()));
        match r {
            // refused by the config's depth cap before any block is read
            Ok(Err(e)) => names(&e, &["depth", "exceeds the limit"]),
            Ok(Ok(())) => panic!("loaded 10^17 blocks"),
            Err(_) => {
                panic!("loading a config with depth 10^17 panicked (see CATALOG.md, finding F3)")
            }
        }
    });
    assert!(
        peak < 64 << 20,
        "peak {peak} bytes loading a 10^17-deep config"
    );
}

/// The prep options a model directory can carry are checked too: a non-object or a zero patch
/// size is a typed error naming the file.
#[test]
fn bad_preprocessor_config() {
    let dir = tempfile::tempdir().unwrap();
    for (text, needle) in [
        ("[1, 2]", "not a JSON object"),
        (r#"{"patch_size": 0}"#, "must be positive"),
        ("{", "not valid JSON"),
    ] {
        std::fs::write(dir.path().join("preprocessor_config.json"), text).unwrap();
        let e = PrepOptions::with_model_dir(dir.path()).unwrap_err();
        names(&e, &["preprocessor_config.json", needle]);
    }
}

/// Data URIs are decoded with Python's lenient base64 rules (newlines, stray characters
/// skipped), so what transformers accepts is accepted: the same image as from the bytes.
#[test]
fn lenient_base64_is_accepted_as_python_does() {
    let px: Vec<u8> = (0..5 * 4 * 3).map(|i| (i * 13 % 256) as u8).collect();
    let png = png_rgb(5, 4, &px);
    // standard base64 with a newline every 8 characters
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut b64 = String::new();
    for c in png.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        for k in 0..4 {
            b64.push(if k <= c.len() {
                A[(n >> (18 - 6 * k)) as usize & 63] as char
            } else {
                '='
            });
        }
    }
    let wrapped: String = b64
        .as_bytes()
        .chunks(8)
        .map(|c| format!("{}\n", std::str::from_utf8(c).unwrap()))
        .collect();
    let uri = ImageSource::DataUri(format!("data:image/png;base64,{wrapped}"));
    let a = load_image(&uri, &DecodeOptions::default()).unwrap();
    let b = load_image(&bytes_src("png", png), &DecodeOptions::default()).unwrap();
    assert!(a == b);
    assert_eq!(a.as_raw(), &px);
}

/// Fuzzing finding F4 (`config_json`, artifact `crash-9f40723eddf5b4e0e135e72581d694a78f1291bd`):
/// a `preprocessor_config.json` with a huge `patch_size` passes `PrepOptions::with_model_dir`,
/// then `PixelOptions::patch_dim()` overflows (a panic in debug, a wrapped size in release).
/// Loading it must be an error naming the file.
#[test]
fn preprocessor_config_with_overflowing_patch_size_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("preprocessor_config.json"),
        r#"{"min_image_tokens": 64, "patch_size": 2222222222745098, "resample": 3}"#,
    )
    .unwrap();
    let r = std::panic::catch_unwind(|| {
        PrepOptions::with_model_dir(dir.path()).map(|o| (o.image.patch_dim(), o.image.factor()))
    });
    match r {
        Ok(Err(e)) => names(&e, &["preprocessor_config.json", "patch_size"]),
        Ok(Ok(d)) => panic!("accepted patch_size 2222222222745098: (patch_dim, factor) = {d:?}"),
        Err(_) => panic!(
            "a loaded preprocessor config's patch_dim overflowed (see CATALOG.md, finding F4)"
        ),
    }
}
