//! Video files (prep's FFmpeg reader, `prep/src/video/`, cargo feature `video`) through
//! `plan_video`, `prep_video_file` and `decode_video_frames` + `prep_video_frames`.
//!
//! The first byte: bit 0 a small decode budget (32 KiB of sampled RGB frames), bit 1 a small
//! token budget (`max_tokens` 64 instead of 256 per frame pair); the rest is the file, written to
//! a temporary file (the reader takes paths). Invariants:
//! - plan/prep agreement: when `prep_video_file` succeeds, `plan_video` succeeds with its grid,
//!   frame indices, timestamps and `patches * 1176` finite values;
//! - the same typed error class: when `plan_video` fails, `prep_video_file` fails with the same
//!   `PrepError` variant; when only the decode fails, its error is not one of the metadata's
//!   (`NotAVideo`, `NoVideoStream`, `VideoDecodeBudget`);
//! - decode budget before decode: a clip that plans under the large budget and whose sampled
//!   frames (each decoded once) exceed the small one is refused as `VideoDecodeBudget` by both;
//! - the streamed path equals the decoded-frames path: `decode_video_frames` of the plan's
//!   indices, then `prep_video_frames` on those frames (no sampling), gives the same bits, where
//!   two decodes of those frames agree (see [`check_with`]).
//!
//! The check itself; `video.rs` is the cargo-fuzz target calling it (built with
//! `--features video`), and `prep/tests/fuzz_regressions.rs` replays the committed findings and
//! seeds through it when prep is built with the feature.

use glm5v_prep::{
    PrepError, PrepOptions, decode_video_frames, plan_video, prep_video_file, prep_video_frames,
};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A file in the temporary directory holding the input, removed on drop (std only, so that
/// prep's tests replay this without another dependency).
struct TempFile(PathBuf);

impl TempFile {
    fn new(bytes: &[u8]) -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let p =
            std::env::temp_dir().join(format!("glm5v-fuzz-video-{}-{n}.mp4", std::process::id()));
        std::fs::write(&p, bytes).expect("writing the temporary file");
        Self(p)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn kind(e: &PrepError) -> String {
    let d = format!("{e:?}");
    d.split([' ', '{', '(']).next().unwrap_or("").to_string()
}

fn opts(small_budget: bool, small_tokens: bool) -> PrepOptions {
    let mut o = PrepOptions::default();
    o.video.decode_budget_bytes = if small_budget { 32 << 10 } else { 64 << 20 };
    o.video.pixels.min_tokens = 4;
    o.video.pixels.max_tokens = if small_tokens { 64 } else { 256 };
    o
}

/// One execution of the `video` fuzz target: panics when an invariant fails.
pub fn check(data: &[u8]) {
    check_with(
        data,
        std::env::var("GLM5V_FUZZ_STRICT").as_deref() == Ok("1"),
    )
}

/// [`check`]; with `strict`, two decodes of the same frames that differ fail it too (finding F7,
/// FFmpeg's frame threading on damaged files, fixed in 0f477bf); otherwise they end the check
/// before the streamed path is compared with the decoded frames.
pub fn check_with(data: &[u8], strict: bool) {
    let Some((&mode, bytes)) = data.split_first() else {
        return;
    };
    let file = TempFile::new(bytes);
    let path = file.0.as_path();
    let o = opts(mode & 1 == 1, mode & 2 == 2);
    let plan = plan_video(path, &o);
    let prep = prep_video_file(path, &o);
    match (&plan, &prep) {
        (Err(p), Err(q)) => assert_eq!(
            kind(p),
            kind(q),
            "plan and prep fail with other kinds: `{p}` against `{q}`"
        ),
        (Err(p), Ok(_)) => panic!("prep_video_file succeeded but plan_video failed: {p}"),
        (Ok(_), Err(q)) => assert!(
            !matches!(
                q,
                PrepError::NotAVideo { .. }
                    | PrepError::NoVideoStream { .. }
                    | PrepError::VideoDecodeBudget { .. }
            ),
            "plan_video succeeded but prep_video_file failed with a metadata error: {q}"
        ),
        (Ok(_), Ok(_)) => {}
    }
    if mode & 1 == 1
        && let Ok(p) = plan_video(path, &opts(false, mode & 2 == 2))
    {
        // the frames decoded: the sampled ones, a repeated last one once
        let mut unique = p.frame_indices.clone();
        unique.dedup();
        let bytes = unique.len() as u128 * p.info.width as u128 * p.info.height as u128 * 3;
        if bytes > o.video.decode_budget_bytes as u128 {
            for (what, e) in [
                ("plan_video", plan.as_ref().err()),
                ("prep_video_file", prep.as_ref().err()),
            ] {
                assert!(
                    matches!(e, Some(PrepError::VideoDecodeBudget { .. })),
                    "{bytes} bytes of sampled frames over a budget of {}: {what} gave {e:?}",
                    o.video.decode_budget_bytes
                );
            }
        }
    }
    let (Ok(plan), Ok(v)) = (plan, prep) else {
        return;
    };
    assert_eq!(
        v.grid_thw, plan.grid_thw,
        "plan and prep disagree on the grid"
    );
    assert_eq!(v.frame_indices, plan.frame_indices, "other frame indices");
    assert_eq!(v.timestamps, plan.timestamps, "other timestamps");
    assert_eq!(
        v.pixel_values.len(),
        plan.patches * 1176,
        "other value count"
    );
    assert!(v.pixel_values.iter().all(|x| x.is_finite()));
    // the decoded-frames path
    let frames = decode_video_frames(path, &plan.frame_indices)
        .expect("the frames prep_video_file decoded decode again");
    let again = decode_video_frames(path, &plan.frame_indices).expect("the frames decode again");
    if let Some(k) = (0..frames.len()).find(|&k| frames[k] != again[k]) {
        assert!(
            !strict,
            "F7: two decodes of frame {} differ ({} {}x{})",
            plan.frame_indices[k], plan.info.codec, plan.info.width, plan.info.height
        );
        return;
    }
    let mut o2 = o.clone();
    o2.video.do_sample_frames = false;
    let fps = plan.info.average_fps.unwrap_or(1.0).max(1e-3);
    let w = prep_video_frames(&frames, fps, &o2).expect("the decoded frames preprocess");
    assert_eq!(
        w.grid_thw, v.grid_thw,
        "the decoded-frames path gives another grid"
    );
    let differ = |a: &[f32], b: &[f32]| {
        a.iter()
            .zip(b)
            .position(|(a, b)| a.to_bits() != b.to_bits())
    };
    if let Some(i) = differ(&v.pixel_values, &w.pixel_values) {
        // a second streamed pass that differs from the first is F7 again, not this invariant
        let v2 = prep_video_file(path, &o);
        if v2.is_err() || v2.is_ok_and(|v2| differ(&v.pixel_values, &v2.pixel_values).is_some()) {
            assert!(!strict, "F7: two prep_video_file passes differ");
            return;
        }
        panic!(
            "value {i}: {} (prep_video_file) against {} (decode_video_frames + prep_video_frames)",
            v.pixel_values[i], w.pixel_values[i]
        );
    }
}
