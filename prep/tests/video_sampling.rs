//! The sampling rule of video files: `glm5v_prep::sample_frames` against a straight
//! transcription of upstream's `Glm5NextVideoProcessor.sample_frames` (transformers 5.23.0) and
//! numpy's `linspace(..., dtype=int)`, on random metadata of the kinds torchcodec reports
//! (frame counts, average fps from frames / duration, container durations, or none).

use glm5v_prep::sample_frames;
use proptest::prelude::*;

/// `np.linspace(start, stop, num, dtype=int).tolist()` (numpy 2: `arange(num) * step + start`,
/// or `arange(num) / div * delta + start` when the step is 0; the last value set to `stop`;
/// floored; `num == 1` gives `start`).
fn np_linspace_int(start: f64, stop: f64, num: usize) -> Vec<i64> {
    let div = num as f64 - 1.0;
    let delta = stop - start;
    let mut y: Vec<f64> = (0..num).map(|i| i as f64).collect();
    if num > 1 {
        let step = delta / div;
        if step == 0.0 {
            y.iter_mut().for_each(|v| *v = *v / div * delta);
        } else {
            y.iter_mut().for_each(|v| *v *= step);
        }
    } else {
        y.iter_mut().for_each(|v| *v *= delta);
    }
    y.iter_mut().for_each(|v| *v += start);
    if num > 1 {
        y[num - 1] = stop;
    }
    y.into_iter().map(|v| v.floor() as i64).collect()
}

/// Upstream's `sample_frames`, line by line (`metadata.duration or ...`: None and 0.0 both fall
/// through; Python's `round` is half to even, `int` truncates).
fn upstream(
    total_frames: usize,
    fps: f64,
    duration: Option<f64>,
    target_fps: f64,
    max_frames: usize,
    max_duration: f64,
) -> Vec<usize> {
    let max_frame_idx = total_frames as i64 - 1;
    let mut duration = match duration {
        Some(d) if d != 0.0 => d,
        _ => (max_frame_idx as f64 / fps).round_ties_even() + 1.0,
    };
    let max_seconds = duration.trunc();
    duration = if max_duration <= 0.0 {
        duration
    } else {
        duration.min(max_duration)
    };
    let mut extract_t = (duration * target_fps).trunc() as i64;
    extract_t = extract_t.min(max_frames as i64);
    let duration_per_frame = 1.0 / fps;
    let timestamps: Vec<f64> = (0..total_frames)
        .map(|i| i as f64 * duration_per_frame)
        .collect();
    let mut frame_indices: Vec<i64>;
    if (total_frames as i64) < extract_t {
        frame_indices = np_linspace_int(0.0, (total_frames - 1) as f64, extract_t as usize);
    } else {
        frame_indices = Vec::new();
        let mut current_second = 0.0;
        let inv_fps = 1.0 / target_fps;
        #[allow(clippy::needless_range_loop)] // the transcription keeps upstream's loop
        for frame_index in 0..total_frames {
            if timestamps[frame_index] >= current_second {
                current_second += inv_fps;
                frame_indices.push(frame_index as i64);
                if current_second >= max_seconds {
                    break;
                }
            }
        }
    }
    if (frame_indices.len() as i64) < extract_t {
        let (start, end) = if frame_indices.is_empty() {
            (0, (total_frames as i64 - 1).max(0))
        } else {
            (frame_indices[0], frame_indices[frame_indices.len() - 1])
        };
        frame_indices = np_linspace_int(start as f64, end as f64, extract_t as usize);
    } else if (frame_indices.len() as i64) > extract_t {
        frame_indices = np_linspace_int(0.0, (total_frames - 1) as f64, extract_t as usize);
    }
    let mut uniq: Vec<usize> = Vec::new();
    for idx in frame_indices {
        if !uniq.contains(&(idx as usize)) {
            uniq.push(idx as usize);
        }
    }
    if uniq.len() & 1 == 1 {
        uniq.push(uniq[uniq.len() - 1]);
    }
    uniq
}

/// Metadata as torchcodec reports it: an average fps of frames / duration (a common rate, or any),
/// the duration of the packets, or a container duration that disagrees, or none.
fn metadata() -> impl Strategy<Value = (usize, f64, Option<f64>)> {
    let fps = prop_oneof![
        Just(24.0),
        Just(25.0),
        Just(30.0),
        Just(30000.0 / 1001.0),
        Just(60.0),
        Just(12.5),
        0.5f64..120.0,
    ];
    (1usize..6000, fps, 0u8..4, 0.01f64..400.0).prop_map(|(n, fps, kind, d)| {
        let duration = match kind {
            0 => Some(n as f64 / fps),
            1 => Some(d),
            2 => Some(0.0),
            _ => None,
        };
        (n, fps, duration)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn sample_frames_is_upstreams(
        (total, fps, duration) in metadata(),
        target in prop_oneof![Just(2.0), Just(1.0), Just(0.5), Just(3.0), 0.1f64..10.0],
        max_frames in prop_oneof![Just(2048usize), 1usize..64],
        max_duration in prop_oneof![Just(0.0), 0.5f64..100.0],
    ) {
        let want = upstream(total, fps, duration, target, max_frames, max_duration);
        let got = sample_frames(total, fps, duration, target, max_frames, max_duration).unwrap();
        prop_assert_eq!(&got, &want, "total {} fps {} duration {:?} target {} max_frames {} max_duration {}",
            total, fps, duration, target, max_frames, max_duration);
        // and what it promises: sorted, in range, an even count
        prop_assert!(got.windows(2).all(|w| w[0] <= w[1]));
        prop_assert!(got.iter().all(|&i| i < total));
        prop_assert!(got.len().is_multiple_of(2));
    }
}

#[test]
fn transcription_agrees_with_recorded_upstream_examples() {
    // The fixture clips' metadata and upstream's indices (fixtures/video/expected/*.json).
    assert_eq!(
        upstream(50, 25.0, Some(2.0), 2.0, 2048, 0.0),
        vec![0, 13, 25, 38]
    );
    assert_eq!(
        upstream(45, 30.0, Some(1.5), 2.0, 2048, 0.0),
        vec![0, 7, 15, 15]
    );
    assert_eq!(
        upstream(25, 10.0, Some(2.5), 2.0, 2048, 0.0),
        vec![0, 3, 7, 11, 15, 15]
    );
    assert_eq!(np_linspace_int(0.0, 10.0, 4), vec![0, 3, 6, 10]);
    assert_eq!(np_linspace_int(5.0, 5.0, 3), vec![5, 5, 5]);
}

/// Without the `video` feature a video file gets the error that says how to build with it.
#[cfg(not(feature = "video"))]
#[test]
fn without_the_feature_video_files_say_how_to_get_them() {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/video/clips/h264_420_96x64.mp4");
    let o = glm5v_prep::PrepOptions::default();
    for e in [
        glm5v_prep::prep_video_file(&p, &o).unwrap_err(),
        glm5v_prep::plan_video(&p, &o).unwrap_err(),
    ] {
        assert!(
            matches!(e, glm5v_prep::PrepError::VideoSupport { .. }),
            "{e:?}"
        );
        assert!(e.to_string().contains("--features video"), "{e}");
    }
}
