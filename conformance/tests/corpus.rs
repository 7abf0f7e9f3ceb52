//! The Pillow 13.0.0 corpus (`fixtures/corpus/corpus.json`, `glm5v_conformance::corpus`): every
//! file of Pillow's `Tests/images` through `prep_images`, against upstream's recorded verdict.
//!
//! The images are not committed: `cargo xtask conformance --corpus` fetches Pillow's sdist from
//! PyPI into `target/corpus/`, checks its sha256, unpacks it and runs
//! `pillow_corpus_matches_upstream` with `GLM5V_CORPUS_DIR` set to the images' folder. By hand:
//!
//! ```sh
//! GLM5V_CORPUS_DIR=target/corpus/pillow-13.0.0/Tests/images \
//!     cargo test -p glm5v-conformance --release --test corpus -- --ignored --nocapture
//! ```
//!
//! Known departures are listed in `conformance/corpus_known.tsv`, each with its outcome; the
//! test fails on any unlisted departure and on any listed line that is no longer true. With
//! `GLM5V_CORPUS_KNOWN_OUT=FILE` it also writes the list as the run found it (reasons kept where
//! the outcome is unchanged), to review and commit after a fix.

use glm5v_conformance::corpus::{Corpus, Known, run};
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn corpus() -> Corpus {
    Corpus::load(&repo().join("fixtures/corpus/corpus.json")).unwrap_or_else(|e| panic!("{e}"))
}

/// The list for this build (lines marked `[no-jpeg-simd]` hold only without the SIMD JPEG paths).
fn known() -> Known {
    known_for(glm5v_prep::jpeg_simd())
}

fn known_for(jpeg_simd: bool) -> Known {
    Known::parse_for(include_str!("../corpus_known.tsv"), jpeg_simd)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Runs without the images: the committed list and manifest agree.
#[test]
fn known_list_names_corpus_files_only() {
    let c = corpus();
    assert_eq!(c.files.len(), 1060, "Pillow 13.0.0 ships 1060 test images");
    for k in [known_for(true), known_for(false)] {
        for path in k.entries.keys() {
            assert!(
                c.files.iter().any(|f| &f.path == path),
                "corpus_known.tsv lists {path}, which is not in corpus.json"
            );
        }
    }
}

#[test]
#[ignore = "needs the Pillow sdist's images: run `cargo xtask conformance --corpus`"]
fn pillow_corpus_matches_upstream() {
    let dir = std::env::var_os("GLM5V_CORPUS_DIR").unwrap_or_else(|| {
        panic!("set GLM5V_CORPUS_DIR to Pillow 13.0.0's Tests/images (cargo xtask conformance --corpus does)")
    });
    // Relative to the repository root (cargo runs tests in the crate's folder).
    let dir = repo().join(dir);
    let c = corpus();
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let report = run(&c, &dir, threads);
    print!("{}", report.table());
    // `GLM5V_CORPUS_KNOWN_OUT=FILE`: write the list as this run has it (to review and commit).
    if let Some(out) = std::env::var_os("GLM5V_CORPUS_KNOWN_OUT") {
        let header: String = include_str!("../corpus_known.tsv")
            .lines()
            .take_while(|l| l.starts_with('#'))
            .map(|l| format!("{l}\n"))
            .collect();
        std::fs::write(&out, header + &report.known_tsv(&known())).unwrap();
    }
    let problems = report.problems(&known());
    println!(
        "{} files in {:.1} s; {} listed in corpus_known.tsv; {} problems",
        report.files.len(),
        report.secs,
        known().entries.len(),
        problems.len()
    );
    for p in &problems {
        println!("  {p}");
    }
    assert!(
        problems.is_empty(),
        "{} corpus problems (listed above)",
        problems.len()
    );
}
