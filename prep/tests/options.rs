//! `PrepOptions::with_model_dir`: which preprocessor-config keys apply, and the errors.

use glm5v_prep::options::{OPENAI_CLIP_MEAN, PrepOptions};
use std::path::PathBuf;

fn dir_with(name: &str, files: &[(&str, &str)]) -> PathBuf {
    let d = std::env::temp_dir().join(format!("glm5v-prep-opts-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    for (f, text) in files {
        std::fs::write(d.join(f), text).unwrap();
    }
    d
}

#[test]
fn defaults_are_upstreams() {
    let o = PrepOptions::default();
    assert_eq!((o.image.min_tokens, o.image.max_tokens), (16, 8000));
    assert_eq!(
        (o.video.pixels.min_tokens, o.video.pixels.max_tokens),
        (16, 240000)
    );
    assert_eq!(
        (
            o.image.patch_size,
            o.image.temporal_patch_size,
            o.image.merge_size
        ),
        (14, 2, 2)
    );
    assert_eq!(o.image.patch_dim(), 1176);
    assert_eq!(o.image.factor(), 28);
    assert_eq!(o.image.image_mean, OPENAI_CLIP_MEAN);
    assert_eq!(
        (o.video.fps, o.video.max_frames, o.video.do_sample_frames),
        (2.0, 2048, true)
    );
    let d = dir_with("empty", &[]);
    assert_eq!(PrepOptions::with_model_dir(&d).unwrap(), o);
}

#[test]
fn config_files_override() {
    let d = dir_with(
        "override",
        &[
            (
                "preprocessor_config.json",
                r#"{"image_processor_type": "Glm5NextImageProcessor", "min_image_tokens": 4, "max_image_tokens": 1024,
                    "image_mean": [0.5, 0.5, 0.5], "image_std": 0.25, "size": {"longest_edge": 1}, "merge_size": null,
                    "resample": 3}"#,
            ),
            (
                "video_preprocessor_config.json",
                r#"{"max_image_tokens": 5000, "fps": 1.5, "max_frames": 64}"#,
            ),
        ],
    );
    let o = PrepOptions::with_model_dir(&d).unwrap();
    assert_eq!((o.image.min_tokens, o.image.max_tokens), (4, 1024));
    assert_eq!(o.image.image_mean, [0.5; 3]);
    assert_eq!(o.image.image_std, [0.25; 3]);
    assert_eq!(o.image.merge_size, 2, "null keeps the default");
    assert_eq!(o.video.pixels.max_tokens, 5000);
    assert_eq!(o.video.pixels.min_tokens, 16);
    assert_eq!((o.video.fps, o.video.max_frames), (1.5, 64));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn errors_name_file_and_key() {
    for (text, key) in [
        (r#"{"max_image_tokens": "lots"}"#, "max_image_tokens"),
        (r#"{"image_mean": [0.5, 0.5]}"#, "image_mean"),
        (r#"{"resample": 2}"#, "resample"),
        (r#"{"do_resize": false}"#, "do_resize"),
        (r#"{"patch_size": 0}"#, "patch_size"),
    ] {
        let d = dir_with("err", &[("preprocessor_config.json", text)]);
        let e = PrepOptions::with_model_dir(&d).unwrap_err().to_string();
        assert!(
            e.contains("preprocessor_config.json") && e.contains(key),
            "{text}: {e}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
    let d = dir_with("json", &[("video_preprocessor_config.json", "{not json")]);
    let e = PrepOptions::with_model_dir(&d).unwrap_err().to_string();
    assert!(
        e.contains("video_preprocessor_config.json") && e.contains("not valid JSON"),
        "{e}"
    );
    std::fs::remove_dir_all(&d).unwrap();
}
