//! The differential fuzz targets' checks (`fuzz/fuzz_targets/*_case.rs`, issue 26) over their
//! committed findings (`fuzz/regressions/<target>/`, one file per finding, named after what it
//! found) and their seed corpora (`fuzz/corpus/seed/<target>/`), so that every finding stays a
//! regression test without cargo-fuzz. Each check panics when its invariant fails.

#[allow(dead_code)]
#[path = "../../fuzz/fuzz_targets/split_inflate_case.rs"]
mod split_inflate_case;

#[allow(dead_code)]
#[path = "../../fuzz/fuzz_targets/jpeg_stripes_case.rs"]
mod jpeg_stripes_case;

#[allow(dead_code)]
#[path = "../../fuzz/fuzz_targets/prep_images_case.rs"]
mod prep_images_case;

#[allow(dead_code)]
#[path = "../../fuzz/fuzz_targets/formats_case.rs"]
mod formats_case;

#[cfg(feature = "video")]
#[allow(dead_code)]
#[path = "../../fuzz/fuzz_targets/video_case.rs"]
mod video_case;

use std::path::Path;

/// Runs `check` on every file of the target's findings and seeds; returns how many.
fn replay(target: &str, check: fn(&[u8])) -> usize {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut n = 0;
    for dir in [
        fuzz.join("regressions").join(target),
        fuzz.join("corpus/seed").join(target),
    ] {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut files: Vec<_> = entries.map(|e| e.unwrap().path()).collect();
        files.sort();
        for f in files {
            let data = std::fs::read(&f).unwrap();
            eprintln!("{target}: {}", f.display());
            check(&data);
            n += 1;
        }
    }
    n
}

#[test]
fn split_inflate_findings_and_seeds() {
    let n = replay("split_inflate", split_inflate_case::check);
    assert!(n >= 14, "{n} inputs");
}

#[test]
fn jpeg_stripes_findings_and_seeds() {
    let n = replay("jpeg_stripes", jpeg_stripes_case::check);
    assert!(n >= 10, "{n} inputs");
}

#[test]
fn prep_images_findings_and_seeds() {
    let n = replay("prep_images", prep_images_case::check);
    assert!(n >= 25, "{n} inputs");
}

#[test]
fn formats_findings_and_seeds() {
    let n = replay("formats", formats_case::check);
    assert!(n >= 40, "{n} inputs");
}

/// With `--features video` (FFmpeg's libraries).
#[cfg(feature = "video")]
#[test]
fn video_findings_and_seeds() {
    let n = replay("video", video_case::check);
    assert!(n >= 8, "{n} inputs");
}

/// Finding F7 (the `video` target): damaged clips (an MPEG-4 AVI, an H.264 one) decoded to other
/// pixels from pass to pass (FFmpeg's frame threading), so `prep_video_file` and
/// `decode_video_frames` disagreed; fixed in 0f477bf (one decoding thread). The decode differed
/// in about one pass of six: 40 strict passes of each reproducer.
#[cfg(feature = "video")]
#[test]
fn video_finding_f7_strict() {
    for name in [
        "f7_streamed_differs_from_decoded",
        "f7b_streamed_differs_from_decoded",
    ] {
        let f = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fuzz/regressions/video")
            .join(name);
        let data = std::fs::read(f).unwrap();
        for _ in 0..40 {
            video_case::check_with(&data, true);
        }
    }
}
