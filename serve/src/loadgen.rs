//! A loopback load generator for `glm5v bench serve` and the tests: fixed concurrency (closed
//! loop: N clients, each sends its next request when the last is answered) or fixed rate (open
//! loop: requests start on a clock, whatever the answers do), bounded in count and time.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What to send, how hard and for how long.
#[derive(Debug, Clone)]
pub struct LoadSpec {
    /// `http://127.0.0.1:PORT/v1/embeddings`
    pub url: String,
    /// Request bodies, used in turn.
    pub bodies: Vec<Arc<Vec<u8>>>,
    /// Images per body (for images/s).
    pub images_per_body: usize,
    /// Clients (closed loop), or the most requests in flight at a fixed rate.
    pub concurrency: usize,
    /// Requests per second (open loop); `None` for a closed loop.
    pub rate: Option<f64>,
    /// Stop starting requests after this long...
    pub duration: Duration,
    /// ...or after this many.
    pub max_requests: usize,
    pub api_key: Option<String>,
    /// Per-request client timeout.
    pub timeout: Duration,
}

/// What the load saw.
#[derive(Debug, Clone, Default)]
pub struct LoadReport {
    pub sent: usize,
    pub ok: usize,
    /// Answers by status, other than 200.
    pub statuses: BTreeMap<u16, usize>,
    /// Requests with no answer (connection refused, reset, client timeout).
    pub transport_errors: usize,
    /// Requests a fixed rate could not start because `concurrency` were in flight.
    pub skipped: usize,
    /// Latency of each 200 answer.
    pub latencies: Vec<Duration>,
    pub wall: Duration,
    pub images: usize,
}

impl LoadReport {
    pub fn errors(&self) -> usize {
        self.statuses.values().sum::<usize>() + self.transport_errors + self.skipped
    }

    /// The errors and what they were: `0`, or e.g. `3 (2x 504, 1 no answer)`.
    pub fn errors_described(&self) -> String {
        let mut parts: Vec<String> = self
            .statuses
            .iter()
            .map(|(s, n)| format!("{n}x {s}"))
            .collect();
        if self.transport_errors > 0 {
            parts.push(format!("{} no answer", self.transport_errors));
        }
        if self.skipped > 0 {
            parts.push(format!("{} not sent (all in flight)", self.skipped));
        }
        match parts.is_empty() {
            true => "0".into(),
            false => format!("{} ({})", self.errors(), parts.join(", ")),
        }
    }

    /// The `p`-quantile (0..=1) of the successful latencies, nearest rank.
    pub fn quantile(&self, p: f64) -> Option<Duration> {
        let mut v = self.latencies.clone();
        if v.is_empty() {
            return None;
        }
        v.sort();
        let rank = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len());
        Some(v[rank - 1])
    }

    pub fn images_per_second(&self) -> f64 {
        self.images as f64 / self.wall.as_secs_f64().max(1e-9)
    }
}

async fn one(
    client: &reqwest::Client,
    spec: &LoadSpec,
    body: Arc<Vec<u8>>,
) -> Result<(u16, Duration), ()> {
    let start = Instant::now();
    let mut req = client
        .post(&spec.url)
        .header("content-type", "application/json")
        .body((*body).clone());
    if let Some(k) = &spec.api_key {
        req = req.bearer_auth(k);
    }
    let resp = req.send().await.map_err(|_| ())?;
    let status = resp.status().as_u16();
    // read the whole answer: the latency includes the transfer
    resp.bytes().await.map_err(|_| ())?;
    Ok((status, start.elapsed()))
}

/// Runs the load; returns when the last request started has been answered.
pub async fn run(spec: LoadSpec) -> LoadReport {
    let client = reqwest::Client::builder()
        .timeout(spec.timeout)
        .pool_max_idle_per_host(spec.concurrency.max(1))
        .build()
        .expect("a plain HTTP client");
    let spec = Arc::new(spec);
    let report = Arc::new(std::sync::Mutex::new(LoadReport::default()));
    let start = Instant::now();
    let record =
        |report: &std::sync::Mutex<LoadReport>, r: Result<(u16, Duration), ()>, images: usize| {
            let mut rep = report.lock().expect("report");
            match r {
                Ok((200, d)) => {
                    rep.ok += 1;
                    rep.images += images;
                    rep.latencies.push(d);
                }
                Ok((s, _)) => *rep.statuses.entry(s).or_default() += 1,
                Err(()) => rep.transport_errors += 1,
            }
        };
    let counter = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let next = |counter: &std::sync::atomic::AtomicUsize| {
        let n = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        (n < spec.max_requests && start.elapsed() < spec.duration).then_some(n)
    };
    match spec.rate {
        None => {
            let mut tasks = Vec::new();
            for _ in 0..spec.concurrency.max(1) {
                let (client, spec, report, counter) = (
                    client.clone(),
                    spec.clone(),
                    report.clone(),
                    counter.clone(),
                );
                tasks.push(tokio::spawn(async move {
                    loop {
                        let n = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if n >= spec.max_requests || start.elapsed() >= spec.duration {
                            break;
                        }
                        let body = spec.bodies[n % spec.bodies.len()].clone();
                        let r = one(&client, &spec, body).await;
                        record(&report, r, spec.images_per_body);
                        report.lock().expect("report").sent += 1;
                    }
                }));
            }
            for t in tasks {
                let _ = t.await;
            }
        }
        Some(rate) => {
            let sem = Arc::new(tokio::sync::Semaphore::new(spec.concurrency.max(1)));
            let period = Duration::from_secs_f64(1.0 / rate.max(1e-6));
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            let mut tasks = Vec::new();
            while let Some(n) = next(&counter) {
                tick.tick().await;
                let Ok(permit) = sem.clone().try_acquire_owned() else {
                    report.lock().expect("report").skipped += 1;
                    continue;
                };
                let (client, spec, report) = (client.clone(), spec.clone(), report.clone());
                tasks.push(tokio::spawn(async move {
                    let body = spec.bodies[n % spec.bodies.len()].clone();
                    let r = one(&client, &spec, body).await;
                    record(&report, r, spec.images_per_body);
                    report.lock().expect("report").sent += 1;
                    drop(permit);
                }));
            }
            for t in tasks {
                let _ = t.await;
            }
        }
    }
    let mut rep = Arc::try_unwrap(report)
        .map(|m| m.into_inner().expect("report"))
        .unwrap_or_else(|a| a.lock().expect("report").clone());
    rep.wall = start.elapsed();
    rep
}
