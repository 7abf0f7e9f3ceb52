//! A rav1d panic that prep's AV1 decoder catches prints nothing on stderr when the library is
//! used without the CLI's panic hook (library users, the Python package): prep installs its own
//! filter, and every other panic still prints. Checked in a child process (this test binary
//! run again with `--nocapture`), since the panic message goes to the process's stderr.

use glm5v_prep::{DecodeOptions, ImageSource, PrepError, load_image};
use std::path::Path;
use std::process::Command;

const CHILD: &str = "GLM5V_AV1_PANIC_CHILD";

#[test]
fn caught_decoder_panics_leave_stderr_quiet() {
    if std::env::var_os(CHILD).is_some() {
        return child();
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "caught_decoder_panics_leave_stderr_quiet",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed: {err}");
    assert!(
        err.contains("decoded: Corrupt (AV1 decoder stopped)"),
        "the child did not decode: {err}"
    );
    // rav1d's panic (third_party/rav1d/src/...) is not printed ...
    assert!(
        !err.contains("rav1d"),
        "a caught rav1d panic printed: {err}"
    );
    // ... and a panic of anyone else still is, through the hook that was there
    assert!(err.contains("an unrelated panic"), "{err}");
    assert_eq!(err.matches("panicked at").count(), 1, "{err}");
}

fn child() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/regressions/formats/f9_av1_decoder_panic");
    // the fuzz input's first byte is its mode byte; the file follows
    let bytes = std::fs::read(file).unwrap()[1..].to_vec();
    for _ in 0..2 {
        let src = ImageSource::Bytes {
            name: "f9.avif".into(),
            bytes: bytes.clone(),
        };
        match load_image(&src, &DecodeOptions::default()) {
            Err(PrepError::Corrupt { detail, .. }) if detail.contains("AV1 decoder stopped") => {
                eprintln!("decoded: Corrupt (AV1 decoder stopped)")
            }
            other => panic!("{other:?}"),
        }
    }
    let r = std::panic::catch_unwind(|| panic!("an unrelated panic"));
    assert!(r.is_err());
}
