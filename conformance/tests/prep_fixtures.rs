//! Our pixel contract against upstream's, fixture by fixture.
//!
//! `fixtures/prep/expected/<case>.safetensors` (made by `fixtures/scripts/gen_prep.py` from
//! `Glm5NextImageProcessor()(images=load_image(path))` / `Glm5NextVideoProcessor`, transformers
//! 5.23.0, torch 2.15.0, torchvision 0.29.2, pillow 13.0.0; see `fixtures/README.md`) holds what
//! upstream produced; this test runs our decode and prep on the same sources and compares:
//!
//! - `decoded`: the RGB image after decoding (bytes when stored, else `decoded_sha256`);
//! - `canvas`: the padded uint8 canvas (differing bytes, max |diff|);
//! - the grid (`image_grid_thw` / `video_grid_thw`);
//! - `pixel_values` (bit-exact when stored, else the sha256 of its little-endian f32 bytes), from
//!   the batch API `prep_images` (which must also equal `preprocess_rgb` image by image);
//! - videos (`prep_video_frames` on all decoded frames with their fps): sampled frame indices,
//!   timestamps, grid, canvases (recovered from our `pixel_values_videos`) and `pixel_values_videos`;
//! - the expanded prompt (`prompt::expand_prompt`) and, for images, the placeholder token ids.
//!
//! One line per fixture; the test fails if any fixture differs anywhere (the target is zero).
//! Run `cargo test -p glm5v-conformance --release --test prep_fixtures -- --nocapture` to see them.

use glm5v_prep::prompt::{VideoPrompt, expand_prompt, image_block_ids};
use glm5v_prep::{
    AlphaMode, DecodeOptions, ImageSource, PrepOptions, jpeg_simd, load_image, prep_images,
    prep_video_frames, preprocess_rgb,
};
use safetensors::{Dtype, SafeTensors};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// `merge_size` of upstream's processors (placeholders per grid: t*h*w / merge^2).
const MERGE: usize = 2;

/// An RGB8 image, row-major `[height, width, 3]` (this crate does not name the `image` crate's type).
#[derive(Clone)]
struct Rgb {
    height: usize,
    width: usize,
    data: Vec<u8>,
}

impl Rgb {
    fn shape(&self) -> [usize; 3] {
        [self.height, self.width, 3]
    }
}

/// Our decoder, as upstream's `load_image` (or `convert_to_rgb` for `AlphaMode::White`).
fn decode(src: &ImageSource, opts: &DecodeOptions) -> Result<Rgb, String> {
    let img = load_image(src, opts).map_err(|e| format!("decode: {e}"))?;
    Ok(Rgb {
        height: img.height() as usize,
        width: img.width() as usize,
        data: img.into_raw(),
    })
}

fn set_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/prep")
}

// ------------------------------------------------------------------------------------------------
// Reading the expected files
// ------------------------------------------------------------------------------------------------

/// A stored tensor: dtype, shape, little-endian bytes.
type TensorView<'a> = (Dtype, Vec<usize>, &'a [u8]);

struct Expected {
    name: String,
    bytes: Vec<u8>,
    meta: HashMap<String, String>,
}

impl Expected {
    fn open(path: &Path) -> Result<Self, String> {
        let bytes =
            std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let (_, md) =
            SafeTensors::read_metadata(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        let meta = md.metadata().clone().unwrap_or_default();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        Ok(Self { name, bytes, meta })
    }

    fn tensor(&self, key: &str) -> Result<Option<TensorView<'_>>, String> {
        let st =
            SafeTensors::deserialize(&self.bytes).map_err(|e| format!("{}: {e}", self.name))?;
        match st.tensor(key) {
            Ok(t) => Ok(Some((t.dtype(), t.shape().to_vec(), t.data()))),
            Err(_) => Ok(None),
        }
    }

    fn required(&self, key: &str, dtype: Dtype) -> Result<(Vec<usize>, &[u8]), String> {
        match self.tensor(key)? {
            Some((d, s, b)) if d == dtype => Ok((s, b)),
            Some((d, _, _)) => Err(format!("{key} is {d:?}, expected {dtype:?}")),
            None => Err(format!("no tensor {key}")),
        }
    }

    fn meta(&self, key: &str) -> Result<&str, String> {
        self.meta
            .get(key)
            .map(String::as_str)
            .ok_or_else(|| format!("metadata has no {key:?}"))
    }

    fn meta_json(&self, key: &str) -> Result<Value, String> {
        serde_json::from_str(self.meta(key)?).map_err(|e| format!("metadata {key:?}: {e}"))
    }

    fn meta_strings(&self, key: &str) -> Result<Vec<String>, String> {
        let v = self.meta_json(key)?;
        v.as_array()
            .and_then(|a| a.iter().map(|s| s.as_str().map(str::to_string)).collect())
            .ok_or_else(|| format!("metadata {key:?} is not a list of strings"))
    }

    fn grid(&self, key: &str) -> Result<Vec<[i64; 3]>, String> {
        let (shape, data) = self.required(key, Dtype::I64)?;
        if shape.len() != 2 || shape[1] != 3 {
            return Err(format!("{key} has shape {shape:?}"));
        }
        let v: Vec<i64> = data
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        Ok(v.chunks_exact(3).map(|c| [c[0], c[1], c[2]]).collect())
    }

    /// Our options for the processor call the generator made (`processor_kwargs`, `alpha`).
    fn options(&self) -> Result<PrepOptions, String> {
        let mut o = PrepOptions::default();
        let kw = self.meta_json("processor_kwargs")?;
        let obj = kw.as_object().ok_or("processor_kwargs is not an object")?;
        for (k, v) in obj {
            let n = v
                .as_u64()
                .ok_or_else(|| format!("processor_kwargs.{k} is not an integer"))?
                as usize;
            match k.as_str() {
                "min_image_tokens" => {
                    o.image.min_tokens = n;
                    o.video.pixels.min_tokens = n;
                }
                "max_image_tokens" => {
                    o.image.max_tokens = n;
                    o.video.pixels.max_tokens = n;
                }
                other => {
                    return Err(format!(
                        "processor kwarg {other:?} is not mapped to our options"
                    ));
                }
            }
        }
        o.decode.alpha = match self.meta("alpha")? {
            "drop" => AlphaMode::Drop,
            "white" => AlphaMode::White,
            other => return Err(format!("unknown alpha mode {other:?}")),
        };
        Ok(o)
    }

    /// The expected canvas `key` (inline U8 [H, W, 3], or the lossless PNG the metadata names).
    fn canvas(&self, key: &str, sha: &str) -> Result<(Vec<usize>, Vec<u8>), String> {
        let loc = self.meta(key)?;
        if loc == "inline" {
            let (shape, data) = self.required(key, Dtype::U8)?;
            return Ok((shape, data.to_vec()));
        }
        let png = decode(
            &ImageSource::Path(set_dir().join(loc)),
            &DecodeOptions::default(),
        )
        .map_err(|e| format!("expected canvas {loc}: {e}"))?;
        let (shape, bytes) = (png.shape().to_vec(), png.data);
        if sha256(&bytes) != sha {
            return Err(format!(
                "expected canvas {loc} does not decode to its recorded sha256 (PNG decoder?)"
            ));
        }
        Ok((shape, bytes))
    }
}

fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn f32_sha(values: &[f32]) -> String {
    let mut h = Sha256::new();
    for v in values {
        h.update(v.to_le_bytes());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

// ------------------------------------------------------------------------------------------------
// Comparisons
// ------------------------------------------------------------------------------------------------

/// Byte-wise comparison of two uint8 arrays.
#[derive(Default)]
struct ByteDiff {
    differing: usize,
    total: usize,
    max: u8,
    /// Set when shapes differ (then nothing else is compared).
    shape: Option<String>,
    /// Images compared through a recorded sha256 instead of stored bytes, and how many matched.
    by_sha: usize,
    sha_equal: usize,
}

impl ByteDiff {
    fn of(ours_shape: &[usize], ours: &[u8], want_shape: &[usize], want: &[u8]) -> Self {
        if ours_shape != want_shape {
            return Self {
                shape: Some(format!("shape {ours_shape:?}, upstream {want_shape:?}")),
                ..Self::default()
            };
        }
        let mut d = Self {
            total: want.len(),
            ..Self::default()
        };
        for (a, b) in ours.iter().zip(want) {
            let x = a.abs_diff(*b);
            if x != 0 {
                d.differing += 1;
                d.max = d.max.max(x);
            }
        }
        d
    }

    fn add(&mut self, o: ByteDiff) {
        self.differing += o.differing;
        self.total += o.total;
        self.max = self.max.max(o.max);
        self.by_sha += o.by_sha;
        self.sha_equal += o.sha_equal;
        if self.shape.is_none() {
            self.shape = o.shape;
        }
    }

    fn ok(&self) -> bool {
        self.shape.is_none() && self.differing == 0 && self.sha_equal == self.by_sha
    }

    fn show(&self) -> String {
        if let Some(s) = &self.shape {
            return s.clone();
        }
        let mut t = String::new();
        if self.total > 0 || self.by_sha == 0 {
            t = format!(
                "{}/{} bytes differ (max |d| {})",
                self.differing, self.total, self.max
            );
        }
        if self.by_sha > 0 {
            let sep = if t.is_empty() { "" } else { ", " };
            let _ = write!(
                t,
                "{sep}sha256 equal for {}/{}",
                self.sha_equal, self.by_sha
            );
        }
        t
    }
}

struct Outcome {
    /// Short name of each comparison and whether it matched.
    parts: Vec<(String, bool)>,
}

impl Outcome {
    fn new() -> Self {
        Self { parts: Vec::new() }
    }
    fn push(&mut self, text: String, ok: bool) {
        self.parts.push((text, ok));
    }
    fn ok(&self) -> bool {
        self.parts.iter().all(|(_, ok)| *ok)
    }
}

/// Our decode of `src` compared with what upstream's `load_image` returned.
fn compare_decoded(
    e: &Expected,
    i: usize,
    multi: bool,
    img: &Rgb,
    out: &mut Outcome,
    acc: &mut ByteDiff,
) -> Result<(), String> {
    let key = if multi {
        format!("decoded.{i}")
    } else {
        "decoded".to_string()
    };
    let shape = img.shape();
    match e.tensor(&key)? {
        Some((Dtype::U8, want_shape, want)) => {
            let plain = ByteDiff::of(&shape, &img.data, &want_shape, want);
            // `load_image` leaves a single-colour transparency key in `info`, and the processor's
            // `convert_to_rgb` whitens that colour: a decoder may return either image.
            match transparency_key(e, i)? {
                Some(rgb) if !plain.ok() => {
                    let keyed = ByteDiff::of(&shape, &img.data, &want_shape, &whiten(want, rgb));
                    if keyed.ok() {
                        out.push(
                            format!(
                                "decoded[{i}] equals load_image's with colour key {rgb:?} whitened"
                            ),
                            true,
                        );
                    }
                    acc.add(if keyed.ok() { keyed } else { plain });
                }
                _ => acc.add(plain),
            }
        }
        Some((d, _, _)) => return Err(format!("{key} is {d:?}")),
        None => {
            let shas = e.meta_strings("decoded_sha256")?;
            let want_shape = e.meta_json("decoded_shape")?;
            let want_shape: Vec<usize> = want_shape[i]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_u64)
                        .map(|v| v as usize)
                        .collect()
                })
                .unwrap_or_default();
            if want_shape != shape {
                out.push(
                    format!("decoded[{i}] shape {shape:?}, upstream {want_shape:?}"),
                    false,
                );
            } else {
                acc.by_sha += 1;
                acc.sha_equal += usize::from(sha256(&img.data) == shas[i]);
            }
        }
    }
    Ok(())
}

/// The colour key `load_image` left on image `i` (`transparency_keys` metadata), if any.
fn transparency_key(e: &Expected, i: usize) -> Result<Option<[u8; 3]>, String> {
    let keys = e.meta_json("transparency_keys")?;
    Ok(keys.get(i).and_then(Value::as_array).and_then(|k| {
        let v: Vec<u8> = k
            .iter()
            .filter_map(Value::as_u64)
            .map(|x| x as u8)
            .collect();
        <[u8; 3]>::try_from(v).ok()
    }))
}

/// Pixels of exactly colour `rgb` turned white, as `convert_to_rgb` does to a colour-keyed image.
fn whiten(data: &[u8], rgb: [u8; 3]) -> Vec<u8> {
    let mut out = data.to_vec();
    for px in out.chunks_exact_mut(3) {
        if px == rgb {
            px.copy_from_slice(&[255, 255, 255]);
        }
    }
    out
}

fn compare_pixel_values(
    e: &Expected,
    key: &str,
    ours: &[f32],
    out: &mut Outcome,
) -> Result<(), String> {
    let shape: Vec<usize> =
        serde_json::from_str(e.meta(&format!("{key}_shape"))?).map_err(|x| x.to_string())?;
    if ours.len() != shape.iter().product::<usize>() {
        out.push(
            format!("{key}: {} values, upstream {shape:?}", ours.len()),
            false,
        );
        return Ok(());
    }
    if let Some((_, _, want)) = e.tensor(key)? {
        let mut differing = 0usize;
        let mut max = 0f32;
        for (a, b) in ours.iter().zip(want.chunks_exact(4)) {
            let b = f32::from_le_bytes(b.try_into().unwrap());
            if a.to_bits() != b.to_bits() {
                differing += 1;
                max = max.max((a - b).abs());
            }
        }
        out.push(
            format!("{key}: {differing} values differ (max |d| {max:e})"),
            differing == 0,
        );
    } else {
        let same = f32_sha(ours) == e.meta(&format!("{key}_sha256"))?;
        out.push(
            format!("{key}: sha256 {}", if same { "equal" } else { "DIFFERS" }),
            same,
        );
    }
    Ok(())
}

fn grid_line(ours: &[[i64; 3]], want: &[[i64; 3]]) -> (String, bool) {
    if ours == want {
        (format!("grid {ours:?}"), true)
    } else {
        (format!("grid {ours:?}, upstream {want:?}"), false)
    }
}

/// The expanded prompt (when the fixture recorded one) against our `expand_prompt`.
fn compare_prompt(
    e: &Expected,
    image_grids: &[[usize; 3]],
    videos: &[VideoPrompt],
    out: &mut Outcome,
) -> Result<(), String> {
    let (Some(template), Some(want)) = (e.meta.get("prompt_in"), e.meta.get("prompt")) else {
        return Ok(());
    };
    match expand_prompt(template, image_grids, videos, MERGE) {
        Ok(ours) if ours == *want => out.push(format!("prompt equal ({} chars)", want.len()), true),
        Ok(ours) => out.push(
            format!(
                "prompt DIFFERS: {} chars, upstream {}",
                ours.len(),
                want.len()
            ),
            false,
        ),
        Err(x) => out.push(format!("prompt: {x}"), false),
    }
    if videos.is_empty() {
        // Image prompts are special tokens only, so upstream's ids are exactly the blocks' ids.
        let (_, ids) = e.required("input_ids", Dtype::I64)?;
        let want: Vec<i64> = ids
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let ours: Vec<i64> = image_grids
            .iter()
            .flat_map(|g| image_block_ids(*g, MERGE))
            .map(i64::from)
            .collect();
        out.push(
            format!(
                "input_ids {}",
                if ours == want { "equal" } else { "DIFFER" }
            ),
            ours == want,
        );
    }
    Ok(())
}

fn check_images(e: &Expected) -> Result<Outcome, String> {
    let mut out = Outcome::new();
    let opts = e.options()?;
    let sources: Vec<ImageSource> = e
        .meta_strings("source")?
        .iter()
        .map(|src| {
            let path = set_dir().join(src);
            Ok(match e.meta("source_kind")? {
                "data_uri" => ImageSource::DataUri(
                    std::fs::read_to_string(&path)
                        .map_err(|x| format!("{}: {x}", path.display()))?,
                ),
                _ => ImageSource::Path(path),
            })
        })
        .collect::<Result<_, String>>()?;
    let multi = sources.len() > 1;

    // Per image: decode, then the image processor on our decoded image.
    let shas = e.meta_strings("canvas_sha256")?;
    let mut decoded = ByteDiff::default();
    let mut canvas = ByteDiff::default();
    let mut per_image_values = Vec::new();
    let mut grids = Vec::new();
    for (i, src) in sources.iter().enumerate() {
        let img = load_image(src, &opts.decode).map_err(|x| format!("decode: {x}"))?;
        let rgb = Rgb {
            height: img.height() as usize,
            width: img.width() as usize,
            data: img.as_raw().clone(),
        };
        compare_decoded(e, i, multi, &rgb, &mut out, &mut decoded)?;
        let p = preprocess_rgb(&img, &opts).map_err(|x| format!("preprocess_rgb: {x}"))?;
        let key = if multi {
            format!("canvas.{i}")
        } else {
            "canvas".to_string()
        };
        let (want_shape, want) = e.canvas(&key, &shas[i])?;
        let shape = [p.canvas.height() as usize, p.canvas.width() as usize, 3];
        canvas.add(ByteDiff::of(&shape, p.canvas.as_raw(), &want_shape, &want));
        per_image_values.extend_from_slice(&p.pixel_values);
        grids.push(p.grid_thw);
    }
    out.push(format!("decoded {}", decoded.show()), decoded.ok());
    out.push(format!("canvas {}", canvas.show()), canvas.ok());

    // The batch API, decode included, is what callers use: its output is the one compared.
    let batch = prep_images(&sources, &opts).map_err(|x| format!("prep_images: {x}"))?;
    let (line, ok) = grid_line(&batch.image_grid_thw, &e.grid("image_grid_thw")?);
    out.push(line, ok);
    if batch.pixel_values != per_image_values {
        out.push(
            "prep_images differs from preprocess_rgb per image".into(),
            false,
        );
    }
    compare_pixel_values(e, "pixel_values", &batch.pixel_values, &mut out)?;
    compare_prompt(e, &grids, &[], &mut out)?;
    Ok(out)
}

/// Inverts normalisation and patchify of one video's rows: `[F, H, W, 3]` uint8, F = 2 * grid_t.
/// Upstream's `(x - m) / s` in f32 is undone as `round(v * s + m)`, exact for values from 0..=255.
fn video_canvas_from_rows(rows: &[f32], [gt, gh, gw]: [usize; 3]) -> Vec<u8> {
    // OPENAI_CLIP_MEAN / STD as Python writes them; torch holds them as f32 and scales by 255 in f32.
    const MEAN: [f64; 3] = [0.48145466, 0.4578275, 0.40821073];
    const STD: [f64; 3] = [0.26862954, 0.26130258, 0.27577711];
    let (ps, tp) = (14, 2);
    let (h, w) = (gh * ps, gw * ps);
    let mut out = vec![0u8; gt * tp * h * w * 3];
    let row_len = 3 * tp * ps * ps;
    let (bh, bw) = (gh / MERGE, gw / MERGE);
    for t in 0..gt {
        for r in 0..bh * bw * MERGE * MERGE {
            // rows of a frame pair: (block_row, block_col, in_row, in_col)
            let (blk, inner) = (r / (MERGE * MERGE), r % (MERGE * MERGE));
            let py = (blk / bw) * MERGE + inner / MERGE;
            let px = (blk % bw) * MERGE + inner % MERGE;
            let row = &rows[(t * gh * gw + r) * row_len..][..row_len];
            for (i, &v) in row.iter().enumerate() {
                let (c, rest) = (i / (tp * ps * ps), i % (tp * ps * ps));
                let (ti, rest) = (rest / (ps * ps), rest % (ps * ps));
                let (y, x) = (py * ps + rest / ps, px * ps + rest % ps);
                let (m, s) = (
                    (MEAN[c] as f32 * 255.0) as f64,
                    (STD[c] as f32 * 255.0) as f64,
                );
                let u = (v as f64 * s + m).round().clamp(0.0, 255.0) as u8;
                out[(((t * tp + ti) * h + y) * w + x) * 3 + c] = u;
            }
        }
    }
    out
}

fn check_video(e: &Expected) -> Result<Outcome, String> {
    let mut out = Outcome::new();
    let opts = e.options()?;
    let fps: f64 = e.meta("fps")?.parse().map_err(|x| format!("fps: {x}"))?;
    let mut frames = Vec::new();
    for src in e.meta_strings("source")? {
        frames.push(
            load_image(&ImageSource::Path(set_dir().join(src)), &opts.decode)
                .map_err(|x| format!("decode: {x}"))?,
        );
    }
    // Upstream got the decoded frames as one array with its fps, and sampled them itself.
    let v =
        prep_video_frames(&frames, fps, &opts).map_err(|x| format!("prep_video_frames: {x}"))?;

    let (_, idx) = e.required("frame_indices", Dtype::I64)?;
    let want_idx: Vec<usize> = idx
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()) as usize)
        .collect();
    out.push(
        format!(
            "frames {:?}{}",
            v.frame_indices,
            if v.frame_indices == want_idx {
                String::new()
            } else {
                format!(", upstream {want_idx:?}")
            }
        ),
        v.frame_indices == want_idx,
    );
    let (_, ts) = e.required("timestamps", Dtype::F64)?;
    let want_ts: Vec<f64> = ts
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    if v.timestamps != want_ts {
        out.push(
            format!("timestamps {:?}, upstream {want_ts:?}", v.timestamps),
            false,
        );
    }
    let grid = [v.grid_thw.map(|d| d as i64)];
    let (line, ok) = grid_line(&grid, &e.grid("video_grid_thw")?);
    out.push(line, ok);

    let (want_shape, want) = e.required("video_canvas", Dtype::U8)?;
    let [gt, gh, gw] = v.grid_thw;
    let shape = [gt * 2, gh * 14, gw * 14, 3];
    if v.pixel_values.len() == gt * gh * gw * 1176 {
        let ours = video_canvas_from_rows(&v.pixel_values, v.grid_thw);
        let d = ByteDiff::of(&shape, &ours, &want_shape, want);
        out.push(format!("canvas {}", d.show()), d.ok());
    } else {
        out.push(
            format!(
                "pixel_values_videos has {} values for grid {:?}",
                v.pixel_values.len(),
                v.grid_thw
            ),
            false,
        );
    }
    compare_pixel_values(e, "pixel_values_videos", &v.pixel_values, &mut out)?;
    let vp = VideoPrompt {
        grid_thw: v.grid_thw,
        timestamps: v.timestamps.clone(),
    };
    compare_prompt(e, &[], &[vp], &mut out)?;
    Ok(out)
}

#[test]
fn prep_matches_upstream_fixtures() {
    let dir = set_dir().join("expected");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    paths.sort();
    assert!(
        paths.len() >= 40,
        "expected the committed prep fixtures in {}, found {}",
        dir.display(),
        paths.len()
    );

    let mut report = format!(
        "JPEG decoder: libjpeg-turbo (mozjpeg-sys), {} paths\n",
        if jpeg_simd() { "SIMD" } else { "C" }
    );
    let mut failed = Vec::new();
    for path in &paths {
        let result = Expected::open(path).and_then(|e| {
            let outcome = match e.meta("kind")? {
                "video" => check_video(&e),
                _ => check_images(&e),
            }?;
            Ok((e.name, outcome))
        });
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        match result {
            Ok((_, o)) => {
                let parts: Vec<&str> = o.parts.iter().map(|(s, _)| s.as_str()).collect();
                let _ = writeln!(
                    report,
                    "{} {name:<28} {}",
                    if o.ok() { "ok  " } else { "DIFF" },
                    parts.join("; ")
                );
                if !o.ok() {
                    failed.push(name);
                }
            }
            Err(err) => {
                let _ = writeln!(report, "ERR  {name:<28} {err}");
                failed.push(name);
            }
        }
    }
    if failed.is_empty() {
        println!("{report}");
    }
    assert!(
        failed.is_empty(),
        "{} of {} prep fixtures differ from upstream: {}\n{report}",
        failed.len(),
        paths.len(),
        failed.join(", ")
    );
}

/// CI installs nasm and then sets GLM5V_REQUIRE_JPEG_SIMD=1, so that the prep fixtures above are
/// known to have run through libjpeg-turbo's SIMD paths (the ones a build with nasm ships); a
/// build that silently fell back to the C paths fails here instead of passing on them.
#[test]
fn jpeg_simd_paths_when_required() {
    if std::env::var_os("GLM5V_REQUIRE_JPEG_SIMD").is_none() {
        println!("JPEG SIMD paths compiled in: {}", jpeg_simd());
        return;
    }
    assert!(
        jpeg_simd(),
        "GLM5V_REQUIRE_JPEG_SIMD is set but the JPEG decoder has no SIMD paths: mozjpeg-sys found \
         no nasm when it was built (install nasm, then `cargo clean -p mozjpeg-sys`)"
    );
}
