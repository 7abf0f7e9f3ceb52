//! `prep_images` (the batch path the CLI and the library run: rows streamed into bands, JPEGs
//! resized while decoded, PNGs inflated on two threads) against `load_image` + `preprocess_rgb`
//! + `batch_of_images` (decode, then resize, pad, patchify), on one thread and on two.
//!
//! The first byte picks the alpha mode (bit 0), the token budget (bit 1: 64 or 256), the decode
//! budget (bit 2: 1 or 4 Mpixel) and a batch of one copy of the file or two (bit 3); the rest is
//! the file, or with bit 4 a recipe for a large 8-bit RGB PNG used at its own size ([`recipe_png`]:
//! the path where prep inflates on two threads and writes bands from both). Invariant: the same `pixel_values` bits and grids, or both sides an error of the same
//! kind (`PrepError` variant), on either thread count.
//!
//! The check itself; `prep_images.rs` is the cargo-fuzz target calling it, and
//! `prep/tests/fuzz_regressions.rs` replays the committed findings and seeds through it.

use glm5v_prep::{
    AlphaMode, ImageSource, PrepError, PrepOptions, batch_of_images, load_image, prep_images,
    preprocess_rgb,
};
use std::sync::OnceLock;

fn pool(n: usize) -> &'static rayon::ThreadPool {
    static POOLS: [OnceLock<rayon::ThreadPool>; 2] = [OnceLock::new(), OnceLock::new()];
    POOLS[n - 1].get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .expect("a thread pool")
    })
}

/// A batch's values as bits (NaN-safe comparison) and its grids, or the error's variant name.
type Outcome = Result<(Vec<u32>, Vec<[i64; 3]>), String>;

fn kind(e: &PrepError) -> String {
    // the variant name: the text up to the first '{' / '(' of its Debug form
    let d = format!("{e:?}");
    d.split([' ', '{', '(']).next().unwrap_or("").to_string()
}

fn outcome(r: glm5v_prep::Result<glm5v_prep::PixelBatch>) -> (Outcome, String) {
    match r {
        Ok(b) => (
            Ok((
                b.pixel_values.iter().map(|v| v.to_bits()).collect(),
                b.image_grid_thw,
            )),
            String::new(),
        ),
        Err(e) => (Err(kind(&e)), e.to_string()),
    }
}

/// One execution of the `prep_images` fuzz target (also replayed by `prep/tests/fuzz_regressions.rs`):
/// panics when an invariant fails.
pub fn check(data: &[u8]) {
    let Some((&mode, bytes)) = data.split_first() else {
        return;
    };
    let mut opts = PrepOptions::default();
    opts.image.min_tokens = 4;
    opts.image.max_tokens = if mode & 2 == 0 { 64 } else { 256 };
    opts.decode.max_pixels = if mode & 4 == 0 { 1 << 20 } else { 1 << 22 };
    opts.decode.alpha = if mode & 1 == 0 {
        AlphaMode::Drop
    } else {
        AlphaMode::White
    };
    let bytes = if mode & 16 == 0 {
        bytes.to_vec()
    } else {
        opts.image.max_tokens = 256;
        recipe_png(bytes)
    };
    let src = ImageSource::Bytes {
        name: "fuzz".into(),
        bytes,
    };
    let srcs = if mode & 8 == 0 {
        vec![src]
    } else {
        vec![src.clone(), src]
    };
    // the reference: image by image, decode then preprocess (one thread)
    let want = pool(1).install(|| {
        let mut images = Vec::new();
        for s in &srcs {
            let img = load_image(s, &opts.decode)?;
            images.push(preprocess_rgb(&img, &opts)?);
        }
        Ok(batch_of_images(images, opts.image.patch_dim()))
    });
    let (want, want_msg) = outcome(want);
    for threads in [1, 2] {
        let (got, got_msg) = outcome(pool(threads).install(|| prep_images(&srcs, &opts)));
        match (&want, &got) {
            (Ok((wv, wg)), Ok((gv, gg))) => {
                assert_eq!(wg, gg, "{threads} threads: other grids");
                assert_eq!(wv.len(), gv.len(), "{threads} threads: other value counts");
                if let Some(i) = wv.iter().zip(gv).position(|(a, b)| a != b) {
                    panic!(
                        "{threads} threads: value {i} differs: {} (load_image + preprocess_rgb) \
                         against {} (prep_images)",
                        f32::from_bits(wv[i]),
                        f32::from_bits(gv[i])
                    );
                }
            }
            (Err(a), Err(b)) => assert_eq!(
                a, b,
                "{threads} threads: errors of other kinds: `{want_msg}` against `{got_msg}`"
            ),
            (Ok(_), Err(_)) => panic!(
                "{threads} threads: load_image + preprocess_rgb succeeded, prep_images failed: {got_msg}"
            ),
            (Err(_), Ok(_)) => panic!(
                "{threads} threads: prep_images succeeded, load_image + preprocess_rgb failed: {want_msg}"
            ),
        }
    }
}

/// An 8-bit RGB PNG from a recipe: sides of 28 to 448 pixels in steps of 28 (so that prep uses it
/// at its own size under a 256-token budget), pixels from the recipe's bytes with more or less
/// noise (several hundred KiB of image data in many deflate blocks: the two-thread inflate's
/// case), one row filter or adaptive, zlib level 1-9, and sometimes one byte of the file flipped.
fn recipe_png(r: &[u8]) -> Vec<u8> {
    let at = |i: usize| r.get(i).copied().unwrap_or(0) as usize;
    let (w, h) = (28 * (1 + at(0) % 16), 28 * (1 + at(1) % 16));
    let body = r.get(8..).filter(|b| !b.is_empty()).unwrap_or(&[0x5a]);
    let noise = at(2) % 64;
    let mut s = 0x9e37_79b9_7f4a_7c15u64 ^ at(3) as u64;
    let px: Vec<u8> = (0..w * h * 3)
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let n = if noise == 0 {
                0
            } else {
                (s % (noise as u64 + 1)) as u8
            };
            body[i % body.len()]
                .wrapping_add((i / (w * 3)) as u8)
                .wrapping_add(n)
        })
        .collect();
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, w as u32, h as u32);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        enc.set_filter(match at(4) % 6 {
            0 => png::Filter::NoFilter,
            1 => png::Filter::Sub,
            2 => png::Filter::Up,
            3 => png::Filter::Avg,
            4 => png::Filter::Paeth,
            _ => png::Filter::Adaptive,
        });
        enc.set_deflate_compression(png::DeflateCompression::Level(1 + (at(5) % 9) as u8));
        let mut wr = enc.write_header().expect("a PNG header");
        wr.write_image_data(&px).expect("the image data");
        wr.finish().expect("a PNG");
    }
    if at(6) & 1 == 1 && out.len() > 64 {
        let k = 33 + (at(6) << 8 | at(7)) % (out.len() - 33);
        out[k] ^= 1 << (at(6) % 8);
    }
    out
}
