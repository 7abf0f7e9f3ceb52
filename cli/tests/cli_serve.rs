//! `glm5v serve` as a process: it listens on loopback, answers bit-identically to `glm5v embed`
//! of the same file, and on SIGTERM answers every admitted request, refuses new ones, exits 0.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Starts `glm5v serve` on 127.0.0.1:0; returns the child and its base URL (read from its
/// first line on stderr).
fn serve(extra: &[&str]) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_glm5v"))
        .args([
            "serve",
            "--model",
            "fixtures/tower/tiny",
            "--addr",
            "127.0.0.1:0",
        ])
        .args(extra)
        .current_dir(root())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://127.0.0.1:"))
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_string();
    // keep draining stderr so the child never blocks on it
    std::thread::spawn(move || for _ in err.lines() {});
    (child, url)
}

async fn wait_ready(base: &str) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        if let Ok(r) = reqwest::get(format!("{base}/ready")).await
            && r.status() == 200
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("not ready after 30 s");
}

fn wait_exit(child: &mut Child, limit: Duration) -> i32 {
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s.code().unwrap_or(-1);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("glm5v serve did not exit within {limit:?} of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_equal_embed_and_sigterm_drains() {
    let image = "fixtures/tower/inputs/scene_112x140.png";
    // `glm5v embed` of the file alone
    let out = std::env::temp_dir().join(format!(
        "glm5v-cli-serve-{}.safetensors",
        std::process::id()
    ));
    let st = Command::new(env!("CARGO_BIN_EXE_glm5v"))
        .args(["embed", "--model", "fixtures/tower/tiny", image, "--out"])
        .arg(&out)
        .current_dir(root())
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let bytes = std::fs::read(&out).unwrap();
    let _ = std::fs::remove_file(&out);
    let embed = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let want = embed.tensor("embeddings").unwrap().data().to_vec();

    let (mut child, base) = serve(&["--max-concurrent-requests", "64"]);
    wait_ready(&base).await;
    let b64 = STANDARD.encode(std::fs::read(root().join(image)).unwrap());
    let body = json!({"input": b64, "encoding_format": "base64"});
    let v: Value = reqwest::Client::new()
        .post(format!("{base}/v1/embeddings"))
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let got = STANDARD
        .decode(v["data"][0]["embedding"].as_str().unwrap())
        .unwrap();
    assert_eq!(
        got, want,
        "serve's answer differs from glm5v embed of the same file"
    );

    // 12 requests of 40 images each, SIGTERM while they are in flight
    let many: Vec<String> = (0..40).map(|_| b64.clone()).collect();
    let mut tasks = Vec::new();
    for _ in 0..12 {
        let (base, input, want) = (base.clone(), many.clone(), want.clone());
        tasks.push(tokio::spawn(async move {
            let r = reqwest::Client::new()
                .post(format!("{base}/v1/embeddings"))
                .json(&json!({"input": input, "encoding_format": "base64"}))
                .send()
                .await;
            let r = match r {
                Ok(r) => r,
                Err(e) => return Err(format!("no answer: {e}")),
            };
            let status = r.status().as_u16();
            if status == 200 {
                let v: Value = r.json().await.unwrap();
                for d in v["data"].as_array().unwrap() {
                    let got = STANDARD.decode(d["embedding"].as_str().unwrap()).unwrap();
                    assert_eq!(got, want);
                }
            }
            Ok(status)
        }));
    }
    let start = Instant::now();
    loop {
        let text = reqwest::get(format!("{base}/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let admitted: i64 = text
            .lines()
            .find_map(|l| l.strip_prefix("glm5v_in_flight_requests "))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        if admitted >= 4 || start.elapsed() > Duration::from_secs(10) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // SAFETY: signalling our own child process.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let mut answered = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(200) => answered += 1,
            Ok(503) => {}
            other => panic!("a request was lost in the drain: {other:?}"),
        }
    }
    assert!(
        answered >= 4,
        "only {answered} requests were admitted before SIGTERM"
    );
    let code = tokio::task::spawn_blocking(move || wait_exit(&mut child, Duration::from_secs(30)))
        .await
        .unwrap();
    assert_eq!(code, 0, "glm5v serve's exit code after the drain");
}

#[test]
fn bad_flags_are_usage_errors() {
    let o = Command::new(env!("CARGO_BIN_EXE_glm5v"))
        .args([
            "serve",
            "--model",
            "fixtures/tower/tiny",
            "--request-timeout",
            "0",
        ])
        .current_dir(root())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("--request-timeout"), "{e}");
    let o = Command::new(env!("CARGO_BIN_EXE_glm5v"))
        .args(["serve", "--model", "fixtures/no-such-model"])
        .current_dir(root())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no-such-model"));
}
