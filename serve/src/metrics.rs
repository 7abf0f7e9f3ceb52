//! `GET /metrics`: Prometheus text, one registry per server (prometheus-client).

use glm5v_reference::{BatchReport, Batcher};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub route: &'static str,
    /// ok, invalid_input, unauthorized, too_large, invalid_request, overloaded, unavailable,
    /// timeout, server_error, dropped (the client left before its answer).
    pub outcome: &'static str,
}

pub struct Metrics {
    registry: Registry,
    pub requests: Family<RequestLabels, Counter>,
    pub inputs: Counter,
    pub tokens: Counter,
    pub in_flight: Gauge,
    queue_size: Gauge,
    ready_tokens: Gauge,
    dropped_inputs: Counter,
    dropped_seen: AtomicU64,
    pub batch_tokens: Histogram,
    pub batch_items: Histogram,
    pub queue_seconds: Histogram,
    pub decode_seconds: Histogram,
    pub wait_seconds: Histogram,
    pub gather_seconds: Histogram,
    pub forward_seconds: Histogram,
    /// The devices' own time in forwards (GPU towers' CUDA events), summed.
    pub device_seconds: Counter<f64, AtomicU64>,
    pub request_seconds: Histogram,
    render: Mutex<()>,
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("glm5v");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "requests",
            "Requests answered, by route and outcome",
            requests.clone(),
        );
        let inputs = Counter::default();
        registry.register("inputs", "Images embedded", inputs.clone());
        let tokens = Counter::default();
        registry.register("tokens", "Merged image tokens embedded", tokens.clone());
        let in_flight = Gauge::default();
        registry.register(
            "in_flight_requests",
            "Embedding requests admitted and not yet answered",
            in_flight.clone(),
        );
        let queue_size = Gauge::default();
        registry.register(
            "queue_size",
            "Inputs in the batcher: pending, decoding, decoded or in a forward",
            queue_size.clone(),
        );
        let ready_tokens = Gauge::default();
        registry.register(
            "ready_tokens",
            "Merged tokens decoded (or decoding) and waiting for a forward",
            ready_tokens.clone(),
        );
        let dropped_inputs = Counter::default();
        registry.register(
            "dropped_inputs",
            "Inputs dropped before decode or forward because their request was gone",
            dropped_inputs.clone(),
        );
        let secs = || Histogram::new(exponential_buckets(0.0005, 2.0, 18));
        let batch_tokens = Histogram::new(exponential_buckets(4.0, 2.0, 16));
        registry.register(
            "batch_tokens",
            "Merged tokens per forward",
            batch_tokens.clone(),
        );
        let batch_items = Histogram::new(exponential_buckets(1.0, 2.0, 10));
        registry.register("batch_items", "Inputs per forward", batch_items.clone());
        let queue_seconds = secs();
        registry.register(
            "queue_duration_seconds",
            "Input submitted until a decoder took it",
            queue_seconds.clone(),
        );
        let decode_seconds = secs();
        registry.register(
            "decode_duration_seconds",
            "Decoding and preprocessing one input",
            decode_seconds.clone(),
        );
        let wait_seconds = secs();
        registry.register(
            "batch_wait_duration_seconds",
            "Input decoded until its batch started (the gather, then the forward)",
            wait_seconds.clone(),
        );
        let gather_seconds = secs();
        registry.register(
            "batch_gather_duration_seconds",
            "Copying a forward's inputs' pixels into one buffer, before the forward",
            gather_seconds.clone(),
        );
        let forward_seconds = secs();
        registry.register(
            "forward_duration_seconds",
            "One forward of the tower",
            forward_seconds.clone(),
        );
        let device_seconds = Counter::<f64, AtomicU64>::default();
        registry.register(
            "device_busy_seconds",
            "Seconds the GPUs spent running forwards (CUDA events; over the wall time: how busy they were)",
            device_seconds.clone(),
        );
        let request_seconds = secs();
        registry.register(
            "request_duration_seconds",
            "Embedding request admitted until answered",
            request_seconds.clone(),
        );
        Self {
            registry,
            requests,
            inputs,
            tokens,
            in_flight,
            queue_size,
            ready_tokens,
            dropped_inputs,
            dropped_seen: AtomicU64::new(0),
            batch_tokens,
            batch_items,
            queue_seconds,
            decode_seconds,
            wait_seconds,
            gather_seconds,
            forward_seconds,
            device_seconds,
            request_seconds,
            render: Mutex::new(()),
        }
    }

    pub fn request(&self, route: &'static str, outcome: &'static str) {
        self.requests
            .get_or_create(&RequestLabels { route, outcome })
            .inc();
    }

    pub fn observe_batch(&self, b: &BatchReport) {
        self.batch_tokens.observe(b.tokens as f64);
        self.batch_items.observe(b.items as f64);
        self.gather_seconds.observe(b.gather.as_secs_f64());
        self.forward_seconds.observe(b.forward.as_secs_f64());
        if let Some(d) = b.device {
            self.device_seconds.inc_by(d.as_secs_f64());
        }
    }

    /// The text exposition, with the batcher's levels read now.
    pub fn render(&self, batcher: &Batcher) -> String {
        let _one = self.render.lock().expect("metrics render");
        let s = batcher.stats();
        self.queue_size
            .set((s.pending + s.decoding + s.ready + s.running) as i64);
        self.ready_tokens.set(s.ready_tokens as i64);
        let seen = self.dropped_seen.swap(s.dropped, Ordering::Relaxed);
        self.dropped_inputs.inc_by(s.dropped.saturating_sub(seen));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String");
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
