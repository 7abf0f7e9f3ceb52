//! Bad video files fail with a typed error naming the problem, before any output (`video`
//! feature): no video stream, a codec FFmpeg cannot decode, a truncated file, not a video, the
//! decode budget.
#![cfg(feature = "video")]

use glm5v_prep::{PrepError, PrepOptions, plan_video, prep_video_file, probe_video};
use std::path::{Path, PathBuf};

fn clip(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/video/clips")
        .join(name)
}

fn write(dir: &tempfile_dir::Dir, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.0.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

/// A throwaway directory under the target dir (no tempfile dependency in prep).
mod tempfile_dir {
    pub struct Dir(pub std::path::PathBuf);
    impl Dir {
        pub fn new(tag: &str) -> Self {
            let p = std::env::temp_dir().join(format!("glm5v-video-{tag}-{}", std::process::id()));
            std::fs::create_dir_all(&p).unwrap();
            Dir(p)
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// 0.1 s of 8 kHz mono 16-bit silence as WAV: a media file without a video stream.
fn wav() -> Vec<u8> {
    let samples = 800u32;
    let data = samples * 2;
    let mut b = Vec::new();
    b.extend_from_slice(b"RIFF");
    b.extend_from_slice(&(36 + data).to_le_bytes());
    b.extend_from_slice(b"WAVEfmt ");
    b.extend_from_slice(&16u32.to_le_bytes());
    b.extend_from_slice(&1u16.to_le_bytes()); // PCM
    b.extend_from_slice(&1u16.to_le_bytes()); // mono
    b.extend_from_slice(&8000u32.to_le_bytes());
    b.extend_from_slice(&16000u32.to_le_bytes());
    b.extend_from_slice(&2u16.to_le_bytes());
    b.extend_from_slice(&16u16.to_le_bytes());
    b.extend_from_slice(b"data");
    b.extend_from_slice(&data.to_le_bytes());
    b.resize(b.len() + data as usize, 0);
    b
}

#[test]
fn a_file_without_video_is_refused() {
    let d = tempfile_dir::Dir::new("novideo");
    let p = write(&d, "tone.wav", &wav());
    let e = prep_video_file(&p, &PrepOptions::default()).unwrap_err();
    assert!(matches!(e, PrepError::NoVideoStream { .. }), "{e:?}");
    assert!(e.to_string().contains("no video stream"), "{e}");
    assert!(matches!(
        plan_video(&p, &PrepOptions::default()),
        Err(PrepError::NoVideoStream { .. })
    ));
}

#[test]
fn an_unknown_codec_is_named() {
    // mpeg4_96x72.avi with its FourCC (FMP4, in strh and strf) replaced: no decoder
    let bytes = std::fs::read(clip("mpeg4_96x72.avi")).unwrap();
    let mut patched = bytes.clone();
    let mut n = 0;
    for i in 0..patched.len() - 4 {
        if &patched[i..i + 4] == b"FMP4" {
            patched[i..i + 4].copy_from_slice(b"QZQZ");
            n += 1;
        }
    }
    assert_eq!(n, 2, "two FourCCs in the AVI");
    let d = tempfile_dir::Dir::new("codec");
    let p = write(&d, "unknown.avi", &patched);
    let e = probe_video(&p).unwrap_err();
    match &e {
        PrepError::VideoCodec { codec, .. } => assert!(codec.contains("QZQZ"), "{codec}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn truncated_files_are_refused() {
    let d = tempfile_dir::Dir::new("cut");
    for name in [
        "h264_640x360.mp4",
        "vp9_80x60.webm",
        "mpeg4_96x72.avi",
        "av1_64x48.mkv",
    ] {
        let bytes = std::fs::read(clip(name)).unwrap();
        for frac in [3, 6, 9] {
            let cut = bytes.len() * frac / 10;
            let p = write(&d, &format!("cut{frac}_{name}"), &bytes[..cut]);
            let e = prep_video_file(&p, &PrepOptions::default()).unwrap_err();
            assert!(
                matches!(
                    e,
                    PrepError::VideoCorrupt { .. } | PrepError::NotAVideo { .. }
                ),
                "{name} cut to {cut} bytes: {e:?}"
            );
            let msg = e.to_string();
            assert!(msg.contains("truncated"), "{name} cut to {cut}: {msg}");
        }
    }
}

#[test]
fn not_a_video_and_missing_files() {
    let d = tempfile_dir::Dir::new("text");
    let p = write(
        &d,
        "notes.mp4",
        b"these are not the frames you are looking for\n",
    );
    let e = prep_video_file(&p, &PrepOptions::default()).unwrap_err();
    assert!(matches!(e, PrepError::NotAVideo { .. }), "{e:?}");
    let e = prep_video_file(&d.0.join("absent.mp4"), &PrepOptions::default()).unwrap_err();
    assert!(matches!(e, PrepError::Io { .. }), "{e:?}");
}

#[test]
fn the_decode_budget_is_checked_before_decoding() {
    // h264_640x360.mp4: 6 sampled frames of 640x360 = 4,147,200 bytes of RGB
    let p = clip("h264_640x360.mp4");
    let mut o = PrepOptions::default();
    o.video.decode_budget_bytes = 4_147_200;
    assert!(plan_video(&p, &o).is_ok());
    o.video.decode_budget_bytes = 4_147_199;
    for r in [
        plan_video(&p, &o).map(|_| ()),
        prep_video_file(&p, &o).map(|_| ()),
    ] {
        match r {
            Err(PrepError::VideoDecodeBudget {
                frames,
                width,
                height,
                bytes,
                ..
            }) => {
                assert_eq!((frames, width, height, bytes), (6, 640, 360, 4_147_200))
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn the_token_maximum_shrinks_the_canvas_as_upstream() {
    // With a maximum of 64 tokens the 6 frames of 640x360 are fitted as smart_resize fits them:
    // 3 frame pairs of (gh/2) x (gw/2) merged tokens at most 64.
    let p = clip("h264_640x360.mp4");
    let mut o = PrepOptions::default();
    o.video.pixels.max_tokens = 64;
    let plan = plan_video(&p, &o).unwrap();
    let v = prep_video_file(&p, &o).unwrap();
    assert_eq!(plan.grid_thw, v.grid_thw);
    assert!(plan.tokens <= 64, "{plan:?}");
    assert_eq!(v.pixel_values.len(), plan.patches * 1176);
}
