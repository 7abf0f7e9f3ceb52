//! Processor options under upstream's keyword names, on top of `PrepOptions` (upstream's
//! defaults, then a model directory's `preprocessor_config.json` /
//! `video_preprocessor_config.json`, then the keywords of the call).

use crate::errors::raise;
use glm5v_prep::{AlphaMode, PixelOptions, PrepOptions};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// Keywords both processors take, as upstream names them.
pub const PIXEL_KEYS: [&str; 13] = [
    "min_image_tokens",
    "max_image_tokens",
    "patch_size",
    "temporal_patch_size",
    "merge_size",
    "patch_expand_factor",
    "image_mean",
    "image_std",
    "do_rescale",
    "rescale_factor",
    "do_normalize",
    "do_resize",
    "resample",
];
/// Keywords only the video processor takes.
pub const VIDEO_KEYS: [&str; 3] = ["fps", "max_frames", "do_sample_frames"];
/// Keywords of ours: how files are decoded.
pub const DECODE_KEYS: [&str; 2] = ["alpha", "max_pixels"];
/// Keywords upstream takes that change nothing here: `size` (upstream's `resize` ignores it) and
/// `do_convert_rgb` (must stay True: upstream's default, the only conversion implemented).
pub const ACCEPTED_KEYS: [&str; 2] = ["size", "do_convert_rgb"];

fn opt_err(m: String) -> PyErr {
    raise("OptionsError", m)
}

fn triple(v: &Bound<'_, PyAny>, key: &str) -> PyResult<[f64; 3]> {
    if let Ok(x) = v.extract::<f64>() {
        return Ok([x; 3]);
    }
    let list: Vec<f64> = v
        .extract()
        .map_err(|_| opt_err(format!("`{key}` must be a number or 3 numbers, got {v}")))?;
    <[f64; 3]>::try_from(list.as_slice()).map_err(|_| {
        opt_err(format!(
            "`{key}` must hold 3 numbers (RGB), got {}",
            list.len()
        ))
    })
}

fn count(v: &Bound<'_, PyAny>, key: &str) -> PyResult<usize> {
    if v.is_instance_of::<pyo3::types::PyBool>() {
        return Err(opt_err(format!("`{key}` must be an integer, got {v}")));
    }
    v.extract::<usize>()
        .map_err(|_| opt_err(format!("`{key}` must be a non-negative integer, got {v}")))
}

fn flag(v: &Bound<'_, PyAny>, key: &str) -> PyResult<bool> {
    if !v.is_instance_of::<pyo3::types::PyBool>() {
        return Err(opt_err(format!("`{key}` must be True or False, got {v}")));
    }
    v.extract()
}

fn number(v: &Bound<'_, PyAny>, key: &str) -> PyResult<f64> {
    v.extract::<f64>()
        .map_err(|_| opt_err(format!("`{key}` must be a number, got {v}")))
}

fn apply_pixel(p: &mut PixelOptions, key: &str, v: &Bound<'_, PyAny>) -> PyResult<()> {
    match key {
        "min_image_tokens" => p.min_tokens = count(v, key)?,
        "max_image_tokens" => p.max_tokens = count(v, key)?,
        "patch_size" => p.patch_size = count(v, key)?,
        "temporal_patch_size" => p.temporal_patch_size = count(v, key)?,
        "merge_size" => p.merge_size = count(v, key)?,
        "patch_expand_factor" => p.patch_expand_factor = count(v, key)?,
        "image_mean" => p.image_mean = triple(v, key)?,
        "image_std" => p.image_std = triple(v, key)?,
        "do_rescale" => p.do_rescale = flag(v, key)?,
        "rescale_factor" => p.rescale_factor = number(v, key)?,
        "do_normalize" => p.do_normalize = flag(v, key)?,
        "do_resize" => {
            if !flag(v, key)? {
                return Err(opt_err(
                    "`do_resize=False` is not supported (the model needs aligned canvases)".into(),
                ));
            }
        }
        "resample" => {
            if v.extract::<i64>().ok() != Some(3) {
                return Err(opt_err(format!(
                    "`resample` must be 3 (bicubic, the only filter implemented), got {v}"
                )));
            }
        }
        _ => unreachable!("checked by the caller"),
    }
    Ok(())
}

/// `PrepOptions` from a model directory (or upstream's defaults) and keyword overrides.
/// `video` says whether the pixel keywords go to the video processor's rules.
pub fn build(
    model_dir: Option<std::path::PathBuf>,
    kwargs: Option<&Bound<'_, PyDict>>,
    video: bool,
) -> PyResult<PrepOptions> {
    let mut o = match model_dir {
        Some(d) => PrepOptions::with_model_dir(&d).map_err(crate::errors::prep_err)?,
        None => PrepOptions::default(),
    };
    if let Some(kw) = kwargs {
        for (k, v) in kw.iter() {
            let key: String = k.extract()?;
            if v.is_none() {
                continue; // upstream: None keeps the default
            }
            if PIXEL_KEYS.contains(&key.as_str()) {
                let p = if video {
                    &mut o.video.pixels
                } else {
                    &mut o.image
                };
                apply_pixel(p, &key, &v)?;
            } else if video && key == "fps" {
                o.video.fps = number(&v, &key)?;
            } else if video && key == "max_frames" {
                o.video.max_frames = count(&v, &key)?;
            } else if video && key == "do_sample_frames" {
                o.video.do_sample_frames = flag(&v, &key)?;
            } else if key == "alpha" {
                let s: String = v.extract()?;
                o.decode.alpha = match s.as_str() {
                    "drop" => AlphaMode::Drop,
                    "white" => AlphaMode::White,
                    _ => {
                        return Err(opt_err(format!(
                            "`alpha` must be \"drop\" or \"white\", got {s:?}"
                        )));
                    }
                };
            } else if key == "size" {
                // ignored, as upstream's resize ignores it (the token budget sets the size)
            } else if key == "do_convert_rgb" {
                if !flag(&v, &key)? {
                    return Err(opt_err(
                        "`do_convert_rgb=False` is not supported (upstream's default True is)"
                            .into(),
                    ));
                }
            } else if key == "max_pixels" {
                o.decode.max_pixels = count(&v, &key)? as u64;
            } else {
                let mut known: Vec<&str> = PIXEL_KEYS.to_vec();
                if video {
                    known.extend(VIDEO_KEYS);
                }
                known.extend(DECODE_KEYS);
                known.extend(ACCEPTED_KEYS);
                return Err(opt_err(format!(
                    "unknown option `{key}` (known: {})",
                    known.join(", ")
                )));
            }
        }
    }
    o.validate().map_err(crate::errors::prep_err)?;
    Ok(o)
}

/// The options as upstream's names, for `to_dict()` and `repr`.
pub fn to_json(o: &PrepOptions, video: bool) -> String {
    let p = if video { &o.video.pixels } else { &o.image };
    let mut m = serde_json::json!({
        "min_image_tokens": p.min_tokens,
        "max_image_tokens": p.max_tokens,
        "patch_size": p.patch_size,
        "temporal_patch_size": p.temporal_patch_size,
        "merge_size": p.merge_size,
        "patch_expand_factor": p.patch_expand_factor,
        "image_mean": p.image_mean,
        "image_std": p.image_std,
        "do_rescale": p.do_rescale,
        "rescale_factor": p.rescale_factor,
        "do_normalize": p.do_normalize,
        "alpha": match o.decode.alpha { AlphaMode::Drop => "drop", AlphaMode::White => "white" },
        "max_pixels": o.decode.max_pixels,
    });
    if video {
        m["fps"] = o.video.fps.into();
        m["max_frames"] = o.video.max_frames.into();
        m["do_sample_frames"] = o.video.do_sample_frames.into();
    }
    m.to_string()
}
