//! `bench serve` and `bench corpus`: the service and the corpus pipeline against upstream as a
//! user would run it, same checkpoint, same images, same machine, same run.
//!
//! serve: `glm5v serve` and `cli/scripts/serve_upstream.py` (a stdlib ThreadingHTTPServer
//! running processor + model per request) under the same loopback load, taking turns: a closed
//! loop at `--concurrency` for `--duration` seconds per turn, then an open loop at a fixed rate
//! (80% of our closed-loop rate), then, with `--sustain S`, our server alone for S seconds with
//! its RSS sampled every second (first minute against last).
//! corpus: `glm5v embed DIR --out x.parquet` against `cli/scripts/corpus_upstream.py`
//! (load_image + processor + model over batches of `--batch`, results kept in memory), taking
//! turns; images/s and peak RSS, and ours on a quarter of the inputs (RSS flat in the count).

use super::Args;
use anyhow::{Context, Result, bail};
use glm5v_prep::{DecodeOptions, ImageSource, load_image};
use glm5v_reference::synth::{Preset, SynthSpec, write_checkpoint};
use glm5v_serve::loadgen::{self, LoadReport, LoadSpec};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SERVE_SCRIPT: &str = include_str!("../../../scripts/serve_upstream.py");
const CORPUS_SCRIPT: &str = include_str!("../../../scripts/corpus_upstream.py");
const BENCH_SCRIPT: &str = include_str!("../../../scripts/bench_upstream.py");

fn scripts(dir: &Path) -> Result<()> {
    std::fs::write(dir.join("serve_upstream.py"), SERVE_SCRIPT)?;
    std::fs::write(dir.join("corpus_upstream.py"), CORPUS_SCRIPT)?;
    std::fs::write(dir.join("bench_upstream.py"), BENCH_SCRIPT)?;
    Ok(())
}

/// --model, else the synthetic full-geometry checkpoint (bf16 weights, --seed).
pub(super) fn model(args: &Args, dir: &Path) -> Result<PathBuf> {
    if let Some(m) = &args.model {
        return Ok(m.clone());
    }
    let m = dir.join("full");
    eprintln!(
        "glm5v: writing the synthetic full checkpoint (bf16, seed {}) to {}",
        args.seed,
        m.display()
    );
    let spec = SynthSpec::new(Preset::Full, args.seed);
    write_checkpoint(&m, &spec)?;
    Ok(m)
}

/// Photos cut from the committed 3264x2448 JPEG: `sizes` (w, h) in turn, written as PNG, JPEG,
/// WebP (lossless) and BMP in turn.
pub(super) fn photos(dir: &Path, count: usize, sizes: &[(u32, u32)]) -> Result<Vec<PathBuf>> {
    let rel = "fixtures/prep/images/large_3264x2448.jpg";
    let src = [
        PathBuf::from(rel),
        Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel),
    ]
    .into_iter()
    .find(|p| p.is_file())
    .with_context(|| format!("{rel} not found: run from the repository's root"))?;
    let big = load_image(&ImageSource::Path(src.clone()), &DecodeOptions::default())
        .with_context(|| format!("reading {}", src.display()))?;
    std::fs::create_dir_all(dir)?;
    let formats = [
        ("png", image::ImageFormat::Png),
        ("jpg", image::ImageFormat::Jpeg),
        ("webp", image::ImageFormat::WebP),
        ("bmp", image::ImageFormat::Bmp),
    ];
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let (w, h) = sizes[i % sizes.len()];
        let x = (i as u32 * 97) % (big.width() - w);
        let y = (i as u32 * 61) % (big.height() - h);
        let crop = image::imageops::crop_imm(&big, x, y, w, h).to_image();
        let (ext, fmt) = formats[i % formats.len()];
        let p = dir.join(format!("photo_{i:04}_{w}x{h}.{ext}"));
        crop.save_with_format(&p, fmt)
            .with_context(|| format!("writing {}", p.display()))?;
        out.push(p);
    }
    Ok(out)
}

/// A child whose first stderr line holds `http://127.0.0.1:PORT`; the rest of its stderr is
/// kept in `log`.
fn spawn_server(mut cmd: Command, log: PathBuf) -> Result<(Child, String)> {
    let mut child = cmd.stderr(Stdio::piped()).stdout(Stdio::null()).spawn()?;
    let err = child.stderr.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel();
    let log_path = log.clone();
    std::thread::spawn(move || {
        let mut sent = false;
        let mut kept = String::new();
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if !sent
                && let Some(u) = line
                    .split_whitespace()
                    .find(|w| w.starts_with("http://127.0.0.1:"))
            {
                let _ = tx.send(u.trim_end_matches(['.', ',', ')']).to_string());
                sent = true;
            }
            kept.push_str(&line);
            kept.push('\n');
            let _ = std::fs::write(&log_path, &kept);
        }
    });
    match rx.recv_timeout(Duration::from_secs(600)) {
        Ok(url) => Ok((child, url)),
        Err(_) => {
            let _ = child.kill();
            bail!("the server did not start (its log: {})", log.display())
        }
    }
}

/// The server's `/metrics` text, `None` when it cannot be read.
async fn metrics_text(url: &str) -> Option<String> {
    let r = reqwest::get(format!("{url}/metrics")).await.ok()?;
    r.status().is_success().then_some(())?;
    r.text().await.ok()
}

async fn wait_ready(url: &str, ready: &str) -> Result<()> {
    let start = Instant::now();
    let client = reqwest::Client::new();
    while start.elapsed() < Duration::from_secs(600) {
        if let Ok(r) = client.get(format!("{url}{ready}")).send().await
            && r.status().is_success()
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("{url} not ready after 600 s")
}

/// VmRSS and VmHWM of a process, MB.
fn rss_mb(pid: u32) -> Option<(f64, f64)> {
    let pid = pid.to_string();
    Some((
        super::proc_status_mb(&pid, "VmRSS:")?,
        super::proc_status_mb(&pid, "VmHWM:")?,
    ))
}

/// CPU seconds a process has used so far (user + system, from /proc/PID/stat).
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // the fields after the command name, which is in parentheses and may hold spaces
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name and state;
    // in USER_HZ, 100 a second on Linux
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

/// Waits (at most `max`) until server `pid` is idle: under a tenth of a core over half a
/// second. A server answers the requests it took even after the client gave up on them, so
/// without this one side's leftover work would run into the other side's turn. Returns the
/// time waited.
async fn wait_idle(pid: u32, max: Duration) -> Duration {
    let start = std::time::Instant::now();
    while start.elapsed() < max {
        let Some(a) = cpu_seconds(pid) else { break };
        tokio::time::sleep(Duration::from_millis(500)).await;
        let Some(b) = cpu_seconds(pid) else { break };
        if b - a < 0.05 {
            break;
        }
    }
    start.elapsed()
}

fn ms(d: Option<Duration>) -> String {
    d.map(|d| format!("{:.1}", d.as_secs_f64() * 1e3))
        .unwrap_or_else(|| "n/a".into())
}

struct Side {
    name: &'static str,
    url: String,
    pid: u32,
    turns: Vec<LoadReport>,
}

impl Side {
    fn pooled(&self) -> LoadReport {
        let mut all = LoadReport::default();
        for t in &self.turns {
            all.sent += t.sent;
            all.ok += t.ok;
            all.transport_errors += t.transport_errors;
            all.skipped += t.skipped;
            all.latencies.extend(&t.latencies);
            for (k, v) in &t.statuses {
                *all.statuses.entry(*k).or_default() += v;
            }
            all.images += t.images;
            all.wall += t.wall;
        }
        all
    }
}

fn line(name: &str, mode: &str, reps: &[f64], r: &LoadReport, hwm: Option<f64>) -> String {
    let v = reps.to_vec();
    let lo = v.iter().cloned().fold(f64::INFINITY, f64::min);
    let hi = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    format!(
        "| {name} | {mode} | {:.2} ({lo:.2}-{hi:.2}) | {} | {} | {} | {} | {} |",
        super::median(v),
        ms(r.quantile(0.5)),
        ms(r.quantile(0.95)),
        ms(r.quantile(0.99)),
        r.errors_described(),
        hwm.map(|m| format!("{m:.0}"))
            .unwrap_or_else(|| "n/a".into())
    )
}

pub fn bench_serve(args: &Args, py: Option<&Path>, dir: &Path) -> Result<()> {
    scripts(dir)?;
    let gpu = args.backend.as_deref() == Some("gpu");
    let model = model(args, dir)?;
    let images = photos(&dir.join("photos"), 8, &[(448, 448)])?;
    let bodies: Vec<Arc<Vec<u8>>> = images
        .iter()
        .map(|p| {
            use base64::Engine;
            let b = base64::engine::general_purpose::STANDARD.encode(std::fs::read(p)?);
            Ok(Arc::new(serde_json::to_vec(
                &serde_json::json!({"input": [b], "encoding_format": "base64"}),
            )?))
        })
        .collect::<Result<_>>()?;
    let exe = std::env::current_exe()?;
    let mut ours_cmd = Command::new(&exe);
    ours_cmd.args(["serve", "--model"]).arg(&model).args([
        "--addr",
        "127.0.0.1:0",
        "--max-concurrent-requests",
        "256",
    ]);
    if gpu {
        ours_cmd.args(["--backend", "gpu"]);
    }
    let (mut ours_child, ours_url) = spawn_server(ours_cmd, dir.join("serve_ours.log"))?;
    // the load generator's own threads: a quarter of the cores, 2 to 8 (at 300 images/s it
    // reads 1.7 GB/s of f32 answers; the servers keep the rest)
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let client_threads = (cores / 4).clamp(2, 8);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(client_threads)
        .enable_all()
        .build()?;
    let result = rt.block_on(async {
        wait_ready(&ours_url, "/ready").await?;
        let mut sides = vec![Side { name: "glm5v serve", url: ours_url.clone(), pid: ours_child.id(), turns: vec![] }];
        let mut up_child = None;
        if let Some(py) = py {
            let mut c = Command::new(py);
            c.arg(dir.join("serve_upstream.py")).arg(&model).args(["--device", if gpu { "cuda" } else { "cpu" }]);
            let (child, url) = spawn_server(c, dir.join("serve_upstream.log"))?;
            sides.push(Side { name: "upstream (ThreadingHTTPServer)", url, pid: child.id(), turns: vec![] });
            up_child = Some(child);
        } else {
            eprintln!("bench serve: no Python with torch and transformers: our server alone");
        }
        let spec = |url: &str, rate: Option<f64>, duration: Duration| LoadSpec {
            url: format!("{url}/v1/embeddings"),
            bodies: bodies.clone(),
            images_per_body: 1,
            concurrency: args.concurrency,
            rate,
            duration,
            max_requests: usize::MAX,
            api_key: None,
            timeout: Duration::from_secs(600),
        };
        // a warm-up request each
        for s in &sides {
            let mut w = spec(&s.url, None, Duration::from_secs(3600));
            w.max_requests = args.concurrency;
            loadgen::run(w).await;
            wait_idle(s.pid, Duration::from_secs(60)).await;
        }
        let duration = Duration::from_secs_f64(args.duration);
        let mut stage_lines = Vec::new();
        for turn in 0..args.turns {
            for (i, s) in sides.iter_mut().enumerate() {
                // ours (the first side) has /metrics: where the turn's time went
                let before = if i == 0 { metrics_text(&s.url).await } else { None };
                let r = loadgen::run(spec(&s.url, None, duration)).await;
                eprintln!(
                    "bench serve: turn {turn}: {}: {:.2} images/s, p50 {} ms, errors {}",
                    s.name,
                    r.images_per_second(),
                    ms(r.quantile(0.5)),
                    r.errors_described()
                );
                if let (Some(b), Some(a)) = (before, metrics_text(&s.url).await)
                    && let Some(line) = super::stages::stage_line(&b, &a, r.wall)
                {
                    stage_lines.push(format!("turn {turn}: {line}"));
                }
                s.turns.push(r);
                let waited = wait_idle(s.pid, Duration::from_secs(60)).await;
                if waited > Duration::from_secs(2) {
                    eprintln!(
                        "bench serve: {} was busy {:.1} s after its turn",
                        s.name,
                        waited.as_secs_f64()
                    );
                }
            }
        }
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|c| c.lines().find_map(|l| l.strip_prefix("model name")).map(|m| m.trim_start_matches([' ', '\t', ':']).to_string()))
            .unwrap_or_default();
        println!(
            "serve: {} backend, 448x448 photos (8 distinct), one image a request (f32 answers as base64), concurrency {}, {} turns of {:.0} s each side taking turns; {} ({} cores, the load generator on {client_threads} threads)",
            if gpu { "gpu" } else { "cpu" },
            args.concurrency,
            args.turns,
            args.duration,
            cpu,
            std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0)
        );
        println!("| server | load | images/s median (range) | p50 ms | p95 ms | p99 ms | errors | peak RSS MB |");
        println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
        let mut ours_rate = 0.0;
        for s in &sides {
            let reps: Vec<f64> = s.turns.iter().map(LoadReport::images_per_second).collect();
            let hwm = rss_mb(s.pid).map(|r| r.1);
            println!("{}", line(s.name, &format!("closed, c={}", args.concurrency), &reps, &s.pooled(), hwm));
            if ours_rate == 0.0 {
                ours_rate = super::median(reps.clone());
            }
        }
        for l in &stage_lines {
            println!("glm5v serve, {l}");
        }
        // fixed rate: 80% of our closed-loop images/s, the same for both
        let rate = 0.8 * ours_rate;
        for s in &sides {
            let r = loadgen::run(spec(&s.url, Some(rate), duration)).await;
            wait_idle(s.pid, Duration::from_secs(60)).await;
            let hwm = rss_mb(s.pid).map(|r| r.1);
            println!("{}", line(s.name, &format!("open, {rate:.2}/s"), &[r.images_per_second()], &r, hwm));
        }
        if args.sustain > 0.0 {
            let pid = sides[0].pid;
            let url = sides[0].url.clone();
            let sustain = Duration::from_secs_f64(args.sustain);
            let sampler = tokio::spawn(async move {
                let mut samples = Vec::new();
                let start = Instant::now();
                while start.elapsed() < sustain {
                    if let Some((rss, _)) = rss_mb(pid) {
                        samples.push((start.elapsed().as_secs_f64(), rss));
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                samples
            });
            let r = loadgen::run(spec(&url, None, sustain)).await;
            let samples = sampler.await?;
            let window = 60.0f64.min(args.sustain / 3.0);
            let first = samples.iter().filter(|s| s.0 <= window).map(|s| s.1).fold(0.0, f64::max);
            let last = samples.iter().filter(|s| s.0 >= args.sustain - window).map(|s| s.1).fold(0.0, f64::max);
            println!(
                "sustained: glm5v serve, {:.0} s at concurrency {}: {:.2} images/s, {} requests, errors {}, p99 {} ms; RSS max over the first {window:.0} s {first:.0} MB, over the last {last:.0} MB ({:+.1}%)",
                args.sustain,
                args.concurrency,
                r.images_per_second(),
                r.sent,
                r.errors_described(),
                ms(r.quantile(0.99)),
                (last / first - 1.0) * 100.0
            );
        }
        if let Some(mut c) = up_child {
            let _ = c.kill();
            let _ = c.wait();
        }
        Ok::<_, anyhow::Error>(())
    });
    // SAFETY: signalling our own child.
    unsafe {
        libc::kill(ours_child.id() as i32, libc::SIGTERM);
    }
    let _ = ours_child.wait();
    result
}

/// A child's run: seconds end to end, peak RSS MB, exit code, and what it wrote to stderr.
struct ChildRun {
    secs: f64,
    peak_mb: f64,
    code: i32,
    stderr: String,
}

/// Runs a child to its end, sampling its VmHWM; its stderr is read on a thread of its own.
fn timed_child(mut cmd: Command) -> Result<ChildRun> {
    let start = Instant::now();
    let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn()?;
    let mut err = child.stderr.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut err, &mut s);
        s
    });
    let mut peak: f64 = 0.0;
    loop {
        if let Some((_, hwm)) = rss_mb(child.id()) {
            peak = peak.max(hwm);
        }
        if let Some(s) = child.try_wait()? {
            let secs = start.elapsed().as_secs_f64();
            return Ok(ChildRun {
                secs,
                peak_mb: peak,
                code: s.code().unwrap_or(-1),
                stderr: reader.join().unwrap_or_default(),
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The `GPU busy N%` of `glm5v embed`'s summary line, when it has one.
fn busy_percent(stderr: &str) -> Option<f64> {
    let line = stderr.lines().find(|l| l.contains(" tokens in "))?;
    let after = &line[line.find("busy ")? + 5..];
    after.split('%').next()?.trim().parse().ok()
}

/// The embedding seconds of `glm5v embed`'s summary line (`... tokens in 1.23 s ...`): from
/// the first input to the last row written, after the model is loaded.
fn embed_seconds(stderr: &str) -> Option<f64> {
    let line = stderr.lines().rev().find(|l| l.contains(" tokens in "))?;
    let rest = &line[line.find(" tokens in ")? + " tokens in ".len()..];
    rest.split(' ').next()?.parse().ok()
}

pub fn bench_corpus(args: &Args, py: Option<&Path>, dir: &Path) -> Result<()> {
    scripts(dir)?;
    let gpu = args.backend.as_deref() == Some("gpu");
    let model = model(args, dir)?;
    let sizes = [
        (448, 448),
        (640, 480),
        (336, 448),
        (224, 224),
        (1024, 768),
        (448, 336),
    ];
    let all = dir.join("photos");
    let photos = photos(&all, args.count, &sizes)?;
    let quarter = dir.join("quarter");
    std::fs::create_dir_all(&quarter)?;
    for p in photos.iter().take(args.count / 4) {
        std::fs::copy(p, quarter.join(p.file_name().expect("a file")))?;
    }
    let exe = std::env::current_exe()?;
    let ours = |input: &Path, out: &Path| {
        let mut c = Command::new(&exe);
        c.args(["embed", "--model"])
            .arg(&model)
            .arg(input)
            .arg("--out")
            .arg(out)
            .arg("--quiet");
        c.args(["--batch-tokens", &args.batch_tokens.to_string()]);
        if gpu {
            c.args(["--backend", "gpu"]);
        }
        c
    };
    let upstream = |py: &Path| {
        let mut c = Command::new(py);
        c.arg(dir.join("corpus_upstream.py")).arg(&model).arg(&all);
        c.args([
            "--batch",
            &args.batch.to_string(),
            "--device",
            if gpu { "cuda" } else { "cpu" },
        ]);
        c
    };
    let (mut ours_ips, mut ours_e2e, mut up_ips) = (Vec::new(), Vec::new(), Vec::new());
    let (mut ours_rss, mut up_rss) = (0.0f64, 0.0f64);
    let mut ours_busy = Vec::new();
    for turn in 0..args.turns {
        let out = dir.join(format!("x{turn}.parquet"));
        let run = timed_child(ours(&all, &out))?;
        if run.code != 0 {
            bail!("glm5v embed exited {}: {}", run.code, run.stderr.trim());
        }
        let embed = embed_seconds(&run.stderr).with_context(|| {
            format!("glm5v embed printed no summary line: {}", run.stderr.trim())
        })?;
        ours_ips.push(args.count as f64 / embed);
        ours_e2e.push(args.count as f64 / run.secs);
        ours_rss = ours_rss.max(run.peak_mb);
        let busy = busy_percent(&run.stderr);
        if let Some(b) = busy {
            ours_busy.push(b);
        }
        eprintln!(
            "bench corpus: turn {turn}: glm5v embed {:.2} images/s after the load ({:.2} end to end, {:.1} s), peak RSS {:.0} MB{}",
            args.count as f64 / embed,
            args.count as f64 / run.secs,
            run.secs,
            run.peak_mb,
            busy.map(|b| format!(", GPU busy {b:.0}%"))
                .unwrap_or_default()
        );
        if let Some(py) = py {
            let out = upstream(py)
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .output()?;
            let text = String::from_utf8_lossy(&out.stdout);
            let v: serde_json::Value = text
                .lines()
                .find_map(|l| serde_json::from_str(l).ok())
                .with_context(|| format!("corpus_upstream.py printed no result: {text}"))?;
            let ips = v["images_per_s"].as_f64().unwrap_or(f64::NAN);
            up_ips.push(ips);
            up_rss = up_rss.max(v["peak_rss_mb"].as_f64().unwrap_or(0.0));
            eprintln!("bench corpus: turn {turn}: upstream {ips:.2} images/s");
        }
    }
    let q = timed_child(ours(&quarter, &dir.join("q.parquet")))?;
    if q.code != 0 {
        bail!(
            "glm5v embed (quarter) exited {}: {}",
            q.code,
            q.stderr.trim()
        );
    }
    let q_rss = q.peak_mb;
    let range = |v: &[f64]| {
        let lo = v.iter().cloned().fold(f64::INFINITY, f64::min);
        let hi = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        format!("{lo:.2}-{hi:.2}")
    };
    println!(
        "corpus: {} backend, {} photos (448x448, 640x480, 336x448, 224x224, 1024x768, 448x336; PNG, JPEG, WebP, BMP), {} turns each side taking turns; ours --batch-tokens {}, upstream batches of {}",
        if gpu { "gpu" } else { "cpu" },
        args.count,
        args.turns,
        args.batch_tokens,
        args.batch
    );
    println!(
        "| side | images/s median (range), model loaded | end to end, with the load | peak RSS MB |"
    );
    println!("| --- | --- | --- | --- |");
    println!(
        "| glm5v embed DIR --out x.parquet | {:.2} ({}) | {:.2} ({}) | {ours_rss:.0} ({} inputs: {q_rss:.0}) |",
        super::median(ours_ips.clone()),
        range(&ours_ips),
        super::median(ours_e2e.clone()),
        range(&ours_e2e),
        args.count / 4
    );
    if !ours_busy.is_empty() {
        println!(
            "glm5v embed: GPU busy {:.0}% ({}%) of the embedding time (CUDA events of each forward over the wall time after the load)",
            super::median(ours_busy.clone()),
            range(&ours_busy)
        );
    }
    if !up_ips.is_empty() {
        println!(
            "| upstream loop (processor + model, results in memory) | {:.2} ({}) | not timed | {up_rss:.0} |",
            super::median(up_ips.clone()),
            range(&up_ips)
        );
        println!(
            "ratio (ours / upstream, medians, model loaded on both sides): {:.2}x",
            super::median(ours_ips.clone()) / super::median(up_ips.clone())
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{busy_percent, cpu_seconds, embed_seconds};

    #[test]
    fn a_process_cpu_time_is_read_and_grows_while_it_works() {
        let me = std::process::id();
        let a = cpu_seconds(me).expect("this process's /proc stat");
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed() < std::time::Duration::from_millis(300) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        let b = cpu_seconds(me).unwrap();
        // 0.3 s of spinning on this thread (ticks of 10 ms; other test threads only add)
        assert!(b - a >= 0.2, "{a} -> {b}");
        assert!(cpu_seconds(u32::MAX).is_none());
    }

    /// The corpus summary line as `glm5v embed` prints it (cli/src/corpus/mod.rs), with and
    /// without the GPU's share.
    #[test]
    fn the_summary_line_gives_seconds_and_busy_share() {
        let gpu = "glm5v: 200 input(s): 200 embedded, 0 failed, 0 already done; 61440 tokens \
                   in 4.10 s (14985 tokens/s, GPU busy 93% of the time) -> x.parquet (1 new shard)";
        assert_eq!(embed_seconds(gpu), Some(4.10));
        assert_eq!(busy_percent(gpu), Some(93.0));
        let cpu = "progress\nglm5v: 3 input(s): 3 embedded, 0 failed, 0 already done; 60 tokens \
                   in 0.52 s (115 tokens/s) -> x.parquet (1 new shard)";
        assert_eq!(embed_seconds(cpu), Some(0.52));
        assert_eq!(busy_percent(cpu), None);
    }
}
