//! Video files against upstream (`fixtures/video/`, made by `fixtures/scripts/gen_video.py` with
//! transformers 5.23.0 and torchcodec 0.17.0 over the system's FFmpeg): per clip the metadata,
//! the sampled frame indices and timestamps, every sampled frame's RGB bit for bit, `video_grid_thw`,
//! the digest of `pixel_values_videos` and the prompt. Needs the `video` feature and the same
//! FFmpeg (Debian bookworm's 5.1) that made the fixtures.
#![cfg(feature = "video")]

use glm5v_prep::{
    PrepOptions, decode_video_frames, plan_video, prep_video_file, probe_video, prompt,
};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

fn set_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/video")
}

fn cases() -> Vec<(String, Value)> {
    let mut v: Vec<(String, Value)> = std::fs::read_dir(set_dir().join("expected"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .map(|p| {
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            (
                name,
                serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap(),
            )
        })
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(v.len() >= 12, "{} video fixtures", v.len());
    v
}

fn bits(hex: &Value) -> f64 {
    f64::from_bits(u64::from_str_radix(hex.as_str().unwrap(), 16).unwrap())
}

fn usizes(v: &Value) -> Vec<usize> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as usize)
        .collect()
}

fn sha_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
fn metadata_sampling_and_plan_match_torchcodec() {
    let o = PrepOptions::default();
    for (name, c) in cases() {
        let clip = set_dir().join(c["clip"].as_str().unwrap());
        let m = &c["metadata"];
        let info = probe_video(&clip).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            info.num_frames as u64,
            m["num_frames"].as_u64().unwrap(),
            "{name}"
        );
        assert_eq!(
            info.average_fps.map(f64::to_bits),
            Some(bits(&c["average_fps_bits"]).to_bits()),
            "{name}"
        );
        assert_eq!(
            info.duration.to_bits(),
            bits(&c["duration_bits"]).to_bits(),
            "{name}"
        );
        assert_eq!(
            (info.width as u64, info.height as u64),
            (m["width"].as_u64().unwrap(), m["height"].as_u64().unwrap()),
            "{name}"
        );
        let rot = m["rotation"]
            .as_f64()
            .map(|r| ((r / 90.0).round() as i32 * 90).rem_euclid(360))
            .unwrap_or(0);
        assert_eq!(info.rotation.rem_euclid(360), rot, "{name}");
        assert_eq!(info.codec, m["codec"].as_str().unwrap(), "{name}");
        let plan = plan_video(&clip, &o).unwrap();
        assert_eq!(plan.frame_indices, usizes(&c["frame_indices"]), "{name}");
        let want_t: Vec<u64> = c["timestamps_bits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| bits(b).to_bits())
            .collect();
        let got_t: Vec<u64> = plan.timestamps.iter().map(|t| t.to_bits()).collect();
        assert_eq!(got_t, want_t, "{name}");
        assert_eq!(
            plan.grid_thw.to_vec(),
            usizes(&c["video_grid_thw"]),
            "{name}"
        );
    }
}

#[test]
fn decoded_frames_match_torchcodec() {
    for (name, c) in cases() {
        let clip = set_dir().join(c["clip"].as_str().unwrap());
        let idx = usizes(&c["frame_indices"]);
        let frames = decode_video_frames(&clip, &idx).unwrap_or_else(|e| panic!("{name}: {e}"));
        let want: Vec<&str> = c["decoded_sha256"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        let got: Vec<String> = frames.iter().map(|f| sha_hex(f.as_raw())).collect();
        assert_eq!(got, want, "{name}: decoded RGB differs from torchcodec's");
    }
}

#[test]
fn pixel_values_videos_and_prompt_match_upstream() {
    let o = PrepOptions::default();
    for (name, c) in cases() {
        let clip = set_dir().join(c["clip"].as_str().unwrap());
        let v = prep_video_file(&clip, &o).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(v.grid_thw.to_vec(), usizes(&c["video_grid_thw"]), "{name}");
        assert_eq!(v.frame_indices, usizes(&c["frame_indices"]), "{name}");
        let shape = usizes(&c["pixel_values_videos_shape"]);
        assert_eq!(v.pixel_values.len(), shape[0] * shape[1], "{name}");
        let le: Vec<u8> = v
            .pixel_values
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        assert_eq!(
            sha_hex(&le),
            c["pixel_values_videos_sha256"].as_str().unwrap(),
            "{name}: pixel_values_videos"
        );
        let replacement =
            prompt::video_replacement(v.grid_thw, o.video.pixels.merge_size, &v.timestamps);
        let text = c["prompt_in"]
            .as_str()
            .unwrap()
            .replace("<|video|>", &replacement);
        assert_eq!(text, c["prompt"].as_str().unwrap(), "{name}: prompt");
    }
}
