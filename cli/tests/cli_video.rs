//! `glm5v prep|plan|embed --video FILE` on the committed clips (`fixtures/video/`): the output
//! holds upstream's `pixel_values_videos` bit for bit (the fixtures' digests), several videos
//! after the images, in order; a bad video exits 2 naming it and writes nothing. Without the
//! `video` feature, a video file exits 2 with the message saying how to build with it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn glm5v(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_glm5v"))
        .args(args)
        .output()
        .expect("run glm5v")
}

fn clip(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/video/clips")
        .join(name)
        .display()
        .to_string()
}

fn out_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("glm5v-cli-video-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[cfg(feature = "video")]
mod with_ffmpeg {
    use super::*;
    use sha2::{Digest, Sha256};

    fn expected(name: &str) -> serde_json::Value {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fixtures/video/expected")
            .join(format!("{name}.json"));
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    }

    fn hex(b: &[u8]) -> String {
        Sha256::digest(b)
            .iter()
            .map(|x| format!("{x:02x}"))
            .collect()
    }

    #[test]
    fn prep_writes_upstreams_pixel_values_videos() {
        let d = out_dir("prep");
        let out = d.join("px.safetensors");
        let names = ["h264_420_96x64", "mpeg4_odd_71x45", "h264_rot270_90x58"];
        let mut args = vec![
            "prep".to_string(),
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../fixtures/tower/inputs/scene_112x140.png")
                .display()
                .to_string(),
            "--video".into(),
        ];
        let files = [
            clip("h264_420_96x64.mp4"),
            clip("mpeg4_odd_71x45.avi"),
            clip("h264_rot270_90x58.mp4"),
        ];
        args.extend(files.iter().cloned());
        args.extend(["--out".into(), out.display().to_string()]);
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = glm5v(&a);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let bytes = std::fs::read(&out).unwrap();
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let pv = st.tensor("pixel_values_videos").unwrap();
        let grids = st.tensor("video_grid_thw").unwrap();
        let g: Vec<i64> = grids
            .data()
            .chunks(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let mut row = 0usize;
        for (i, name) in names.iter().enumerate() {
            let e = expected(name);
            let want: Vec<i64> = e["video_grid_thw"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_i64().unwrap())
                .collect();
            assert_eq!(&g[i * 3..i * 3 + 3], &want[..], "{name}");
            let rows = (want[0] * want[1] * want[2]) as usize;
            let part = &pv.data()[row * 1176 * 4..(row + rows) * 1176 * 4];
            assert_eq!(
                hex(part),
                e["pixel_values_videos_sha256"].as_str().unwrap(),
                "{name}"
            );
            row += rows;
        }
        assert_eq!(row * 1176 * 4, pv.data().len());
        assert!(st.tensor("image_grid_thw").is_ok(), "the image comes first");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn plan_prints_the_sampling_and_grid_without_decoding() {
        let o = glm5v(&["plan", "--video", &clip("h264_vfr_64x48.mkv")]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let e = expected("h264_vfr_64x48");
        assert_eq!(v["frame_indices"], e["frame_indices"]);
        assert_eq!(v["grid_thw"], e["video_grid_thw"]);
        assert_eq!(v["info"]["num_frames"], e["metadata"]["num_frames"]);
    }

    #[test]
    fn a_truncated_video_exits_2_and_writes_nothing() {
        let d = out_dir("cut");
        let bytes = std::fs::read(clip("vp9_80x60.webm")).unwrap();
        let cut = d.join("cut.webm");
        std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
        let out = d.join("px.safetensors");
        let o = glm5v(&[
            "prep",
            "--video",
            &clip("h264_420_96x64.mp4"),
            cut.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(2));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("cut.webm") && err.contains("truncated"),
            "{err}"
        );
        assert!(!out.exists());
        std::fs::remove_dir_all(&d).unwrap();
    }
}

#[cfg(not(feature = "video"))]
#[test]
fn without_the_feature_a_video_file_says_how_to_build_it() {
    let d = out_dir("nofeature");
    let out = d.join("px.safetensors");
    let o = glm5v(&[
        "prep",
        "--video",
        &clip("h264_420_96x64.mp4"),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--features video") && err.contains("libavcodec-dev"),
        "{err}"
    );
    assert!(!out.exists());
    std::fs::remove_dir_all(&d).unwrap();
}
