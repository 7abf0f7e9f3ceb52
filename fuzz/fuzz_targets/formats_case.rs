//! The decoders added after the first fuzz round (BMP in all of PIL's variants, QOI, PNM P1-P6,
//! TGA, ICO, TIFF through libtiff, DDS; PSD in the raw mode from Pillow's files) and the
//! "unsupported format: NAME" sniffing, through `plan_image`, `load_image` +
//! `preprocess_rgb` and `prep_images`.
//!
//! The first byte: bits 0-3 pick a family (0 BMP, 1 QOI, 2 PNM, 3 TGA, 4 ICO, 5 the magic bytes
//! of a format PIL opens and glm5v does not decode, followed by the rest, 6 TIFF (read through
//! libtiff since 5a46635), 7 DDS (33410c2); modulo 8), bit 4 the
//! structured mode (the rest of the input is a recipe [`build`] turns into a file whose header is
//! valid, so that the fuzzer gets past it; otherwise the rest is the file itself), bit 5 the alpha
//! mode, bit 6 a small decode budget (1024 pixels, under the recipes' largest sizes), bit 7 the
//! thread count of `prep_images` (1 or 2).
//!
//! Invariants, on every input:
//! - plan/prep agreement (today's `image` target's): when `load_image` succeeds, `plan_image`
//!   succeeds with its width and height, `preprocess_rgb` gives the plan's grid and
//!   `plan.patches * 1176` finite values, and `prep_images` gives the same bits and grid;
//! - the same typed error class (`PrepError` variant): `prep_images` fails exactly when
//!   `load_image` does, with the same variant; when `plan_image` fails, `load_image` fails with
//!   the same variant (the header check is a prefix of the decode); when only the decode fails,
//!   its error is not one of the header's (budget, zero size, unknown format);
//! - decode budget before decode: a file whose header plans under the large budget but promises
//!   more than the small one is refused as `DecodeBudget` by all three entry points;
//! - sniffing: a file never named by its format in an "unsupported format: NAME" error other than
//!   the one its magic bytes name, and a format's magic bytes are never an unknown format.
//!
//! In the structured mode also:
//! - the header's size is the recipe's (`plan`'s width and height);
//! - differential against the `image` crate's decoder of the same format, where PIL's rules and
//!   the `image` crate agree: 8-bit results (`L`, `LA`, `RGB`, `RGBA` in the `image` crate) with
//!   the alpha dropped; for BMP (our own decoder, `prep/src/decode/bmp.rs`) only uncompressed
//!   files of 1, 4, 8 bits with a complete palette that is not a gray ramp (PIL reads those as
//!   mode L with 8-bit samples whatever the depth), or of 24 / 32 bits, at the offset right after
//!   the palette. QOI, PNM, TGA and ICO are decoded by the `image` crate in prep too
//!   (`prep/src/decode/foreign.rs`), so there the differential checks prep's mode handling and
//!   QOI's end-marker padding, not a second decoder. TIFF (libtiff in prep) is compared with the
//!   `tiff` crate (the `image` crate's decoder, prep's before libtiff) on 8-bit min-is-black gray,
//!   RGB and RGB with unassociated alpha, contiguous, without an orientation other than 1. DDS
//!   (no second decoder here: the `image` crate reads no DDS) has the invariants only.
//!
//! The check itself; the recipes of the structured mode are in `formats_case/` (`recipe.rs`: the
//! recipe reader, [`build`] and the magic bytes; one file per format). `formats.rs` is the
//! cargo-fuzz target calling it, and `prep/tests/fuzz_regressions.rs` replays the committed
//! findings and seeds through it.

use glm5v_prep::{
    AlphaMode, ImageSource, PrepError, PrepOptions, load_image, plan_image, prep_images,
    preprocess_rgb,
};
use std::sync::OnceLock;

// This file is itself loaded by `#[path]` (from `formats.rs` and from prep's tests), which makes
// rustc look for its modules beside it, not in `formats_case/`: hence the paths.
#[path = "formats_case/bmp.rs"]
mod bmp;
#[path = "formats_case/dds.rs"]
mod dds;
#[path = "formats_case/ico.rs"]
mod ico;
#[path = "formats_case/pnm.rs"]
mod pnm;
#[path = "formats_case/qoi.rs"]
mod qoi;
#[path = "formats_case/recipe.rs"]
mod recipe;
#[path = "formats_case/tga.rs"]
mod tga;
#[path = "formats_case/tiff.rs"]
mod tiff;

pub use recipe::{Built, build};

fn pool(n: usize) -> &'static rayon::ThreadPool {
    static POOLS: [OnceLock<rayon::ThreadPool>; 2] = [OnceLock::new(), OnceLock::new()];
    POOLS[n - 1].get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .expect("a thread pool")
    })
}

fn kind(e: &PrepError) -> String {
    let d = format!("{e:?}");
    d.split([' ', '{', '(']).next().unwrap_or("").to_string()
}

/// One execution of the `formats` fuzz target (also replayed by `prep/tests/fuzz_regressions.rs`):
/// panics when an invariant fails.
pub fn check(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let built = if mode & 16 == 0 {
        Built {
            bytes: rest.to_vec(),
            dims: None,
            diff: None,
            magic: None,
        }
    } else {
        build(mode & 15, rest)
    };
    let mut opts = PrepOptions::default();
    opts.image.min_tokens = 4;
    opts.image.max_tokens = 64;
    let small_budget = mode & 64 != 0;
    opts.decode.max_pixels = if small_budget { 1 << 10 } else { 1 << 20 };
    opts.decode.alpha = if mode & 32 == 0 {
        AlphaMode::Drop
    } else {
        AlphaMode::White
    };
    let threads = 1 + (mode >> 7) as usize;
    let src = ImageSource::Bytes {
        name: "fuzz".into(),
        bytes: built.bytes.clone(),
    };
    let plan = plan_image(&src, &opts);
    let load = load_image(&src, &opts.decode);
    let prep = pool(threads).install(|| prep_images(std::slice::from_ref(&src), &opts));

    // sniffing
    for e in [plan.as_ref().err(), load.as_ref().err()]
        .into_iter()
        .flatten()
    {
        let text = e.to_string();
        if let Some(name) = built.magic {
            assert!(
                !matches!(e, PrepError::UnknownFormat { .. }),
                "{name}'s magic bytes: an unknown format: {text}"
            );
            if let Some(at) = text.find("unsupported format: ") {
                let said = &text[at + 20..];
                assert!(
                    said.starts_with(name),
                    "{name}'s magic bytes named otherwise: {text}"
                );
            }
        }
    }

    // the same error class
    match (&plan, &load) {
        (Err(p), Err(l)) => assert_eq!(
            kind(p),
            kind(l),
            "plan and load fail with other kinds: `{p}` against `{l}`"
        ),
        (Err(p), Ok(_)) => panic!("load_image succeeded but plan_image failed: {p}"),
        (Ok(_), Err(l)) => assert!(
            !matches!(
                l,
                PrepError::DecodeBudget { .. }
                    | PrepError::ZeroSize { .. }
                    | PrepError::UnknownFormat { .. }
                    | PrepError::Empty { .. }
            ) && !l.to_string().contains("unsupported format: "),
            "plan_image succeeded but load_image failed with a header error: {l}"
        ),
        (Ok(_), Ok(_)) => {}
    }
    match (&load, &prep) {
        (Err(l), Err(p)) => assert_eq!(
            kind(l),
            kind(p),
            "load and prep_images fail with other kinds: `{l}` against `{p}`"
        ),
        (Err(l), Ok(_)) => panic!("prep_images succeeded but load_image failed: {l}"),
        (Ok(_), Err(p)) => panic!("load_image succeeded but prep_images failed: {p}"),
        (Ok(_), Ok(_)) => {}
    }

    // the header's size is the recipe's
    if let (Some((w, h)), Ok(p)) = (built.dims, &plan) {
        assert_eq!(
            (p.width, p.height),
            (w as usize, h as usize),
            "the header's size is not the recipe's"
        );
    }

    // the budget is checked before the decode
    if small_budget {
        let mut big = opts.clone();
        big.decode.max_pixels = 1 << 20;
        if let Ok(p) = plan_image(&src, &big)
            && (p.width as u64 * p.height as u64) > opts.decode.max_pixels
        {
            for (what, e) in [
                ("plan_image", plan.as_ref().err()),
                ("load_image", load.as_ref().err()),
                ("prep_images", prep.as_ref().err()),
            ] {
                assert!(
                    matches!(e, Some(PrepError::DecodeBudget { .. })),
                    "{}x{} over a budget of {}: {what} gave {e:?}, not DecodeBudget",
                    p.width,
                    p.height,
                    opts.decode.max_pixels
                );
            }
        }
    }

    let Ok(img) = load else {
        return;
    };
    let plan = plan.expect("checked above");
    assert_eq!(
        (plan.width, plan.height),
        (img.width() as usize, img.height() as usize),
        "plan and load disagree on the size"
    );
    let prepared = preprocess_rgb(&img, &opts).expect("a decoded image preprocesses");
    assert_eq!(
        prepared.grid_thw, plan.grid_thw,
        "plan and prep disagree on the grid"
    );
    assert!(plan.tokens <= 64, "token budget exceeded: {}", plan.tokens);
    assert_eq!(prepared.pixel_values.len(), plan.patches * 1176);
    assert!(prepared.pixel_values.iter().all(|v| v.is_finite()));
    let batch = prep.expect("checked above");
    assert_eq!(
        batch.image_grid_thw,
        [prepared.grid_thw.map(|d| d as i64)],
        "prep_images gave another grid"
    );
    if let Some(i) = (prepared.pixel_values.iter().zip(&batch.pixel_values))
        .position(|(a, b)| a.to_bits() != b.to_bits())
    {
        panic!(
            "value {i}: {} (load_image + preprocess_rgb) against {} (prep_images)",
            prepared.pixel_values[i], batch.pixel_values[i]
        );
    }
    assert_eq!(prepared.pixel_values.len(), batch.pixel_values.len());

    // differential against the image crate
    let Some(fmt) = built.diff else {
        return;
    };
    if !matches!(opts.decode.alpha, AlphaMode::Drop) {
        return;
    }
    // 16-bit true-colour TGA (types 2 and 10) is prep's own reader of PIL's rule, 5-bit
    // channels widened as v * 255 / 31, where the image crate (which reads some of them)
    // widens as (v << 3) | (v >> 2): the two differ by design (8 gives 65 against 66), and
    // upstream's pixels check this reader (fixtures/misc, the corpus's 16-bit TGAs)
    let b = &built.bytes;
    if fmt == image::ImageFormat::Tga && b.len() >= 18 && b[2] & 7 == 2 && b[16] == 16 {
        return;
    }
    // An ICO whose largest entries tie: PIL (and prep) open the earliest of them, the image
    // crate another (finding F11, `foreign.rs` `ico_entry`; prep's side checked by
    // `decode_more_formats.rs` against Pillow's pixels)
    if fmt == image::ImageFormat::Ico && ico_largest_tie(b) {
        return;
    }
    let Ok(theirs) = image::load_from_memory_with_format(&built.bytes, fmt) else {
        return;
    };
    use image::ColorType as C;
    if !matches!(theirs.color(), C::L8 | C::La8 | C::Rgb8 | C::Rgba8) {
        return;
    }
    let theirs = theirs.to_rgb8();
    assert_eq!(
        theirs.dimensions(),
        img.dimensions(),
        "{fmt:?}: the image crate decodes another size"
    );
    if let Some((k, (a, b))) = img
        .as_raw()
        .iter()
        .zip(theirs.as_raw())
        .enumerate()
        .find(|(_, (a, b))| a != b)
    {
        let px = k / 3;
        panic!(
            "{fmt:?}: pixel ({}, {}) channel {}: {a} (load_image) against {b} (the image crate)",
            px as u32 % img.width(),
            px as u32 / img.width(),
            k % 3
        );
    }
}

/// Whether two or more ICO directory entries share the largest width x height.
fn ico_largest_tie(b: &[u8]) -> bool {
    let count = b
        .get(4..6)
        .map_or(0, |c| u16::from_le_bytes([c[0], c[1]]) as usize);
    let side = |v: u8| if v == 0 { 256u32 } else { v as u32 };
    let squares: Vec<u32> = (0..count)
        .map_while(|i| b.get(6 + 16 * i..8 + 16 * i))
        .map(|e| side(e[0]) * side(e[1]))
        .collect();
    let max = squares.iter().copied().max().unwrap_or(0);
    squares.iter().filter(|&&s| s == max).count() > 1
}
