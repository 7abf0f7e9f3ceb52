//! `glm5v serve`: the vision tower as an HTTP service beside an LLM server.
//!
//! Layers, each a file: [`api`] (the wire format), [`routes`] (parse, validate, map errors to
//! statuses), the library's [`Batcher`] (admission by header price, decode pool, dynamic
//! batching; it knows nothing of HTTP), [`ec_cache`] (the hand-off to vLLM), [`metrics`].
//!
//! Admission: `--max-concurrent-requests` is a semaphore taken with `try_acquire`, so an
//! overloaded server answers 429 at once and nothing queues without bound; every input is priced
//! from its header before anything is decoded, and one over `--max-batch-tokens` is refused with
//! 413 instead of waiting forever; a request whose client left is dropped before decode and
//! before the forward. SIGTERM or SIGINT: `/ready` turns 503, new requests are refused, every
//! admitted request is answered, then the process exits 0.

pub mod api;
mod auth;
pub mod ec_cache;
pub mod error;
pub mod loadgen;
pub mod metrics;
pub mod routes;

use crate::api::WireDtype;
use crate::metrics::Metrics;
use glm5v_reference::{Batcher, BatcherOptions, Embedder};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::{Notify, Semaphore};

/// Everything `glm5v serve` is told.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub addr: SocketAddr,
    /// Most merged tokens in one forward; an input over it is refused (413).
    pub max_batch_tokens: usize,
    /// Embedding requests admitted at once; more get 429.
    pub max_concurrent_requests: usize,
    /// Largest request body in bytes; larger get 413.
    pub payload_limit: usize,
    /// An admitted request not answered within this gets 504 (its inputs are dropped).
    pub request_timeout: Duration,
    /// After SIGTERM, how long admitted requests may take before the server stops anyway.
    pub drain_timeout: Duration,
    /// Where each input's embeddings are also written for vLLM's encoder cache.
    pub ec_cache_dir: Option<PathBuf>,
    pub ec_cache_dtype: WireDtype,
    /// `Authorization: Bearer KEY` on every route but `/health` and `/ready`.
    pub api_key: Option<String>,
    /// Threads decoding images, apart from the tower's.
    pub decode_threads: usize,
    /// The `model` answers carry (default: the model directory's name).
    pub model_name: String,
    /// What `/info` tells about the model and backend (config, backend, precision, ...).
    pub info: serde_json::Value,
}

impl ServeOptions {
    /// Defaults for a model: loopback port 8080, 4096 tokens a forward, 64 requests, 32 MiB
    /// bodies, 60 s timeout, 2 decoders.
    pub fn new(model_name: impl Into<String>) -> Self {
        Self {
            addr: SocketAddr::from(([127, 0, 0, 1], 8080)),
            max_batch_tokens: 4096,
            max_concurrent_requests: 64,
            payload_limit: 32 << 20,
            request_timeout: Duration::from_secs(60),
            drain_timeout: Duration::from_secs(30),
            ec_cache_dir: None,
            ec_cache_dtype: WireDtype::Bf16,
            api_key: None,
            decode_threads: 2,
            model_name: model_name.into(),
            info: serde_json::Value::Null,
        }
    }
}

/// What every handler shares.
pub struct AppState {
    pub options: ServeOptions,
    pub batcher: Batcher,
    pub metrics: Arc<Metrics>,
    pub admission: Arc<Semaphore>,
    /// Set after the warm-up forward.
    pub ready: AtomicBool,
    /// Set by SIGTERM/SIGINT (or [`Server::drain`]).
    pub draining: AtomicBool,
    /// Set when the warm-up failed.
    pub warmup_failed: AtomicBool,
    /// Notified whenever an admitted request finishes (for the drain).
    pub finished: Notify,
    pub out_hidden: usize,
}

/// A running server.
pub struct Server {
    pub addr: SocketAddr,
    state: Arc<AppState>,
    handle: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Batcher(#[from] glm5v_reference::BatcherError),
    #[error("--ec-cache-dir {dir}: {detail}")]
    EcCacheDir { dir: PathBuf, detail: String },
    #[error("{0}")]
    Option(String),
    #[error("the server stopped: {0}")]
    Io(#[from] std::io::Error),
}

impl Server {
    /// Binds, starts the batcher over `workers` (one per GPU, or the CPU) and answers at once;
    /// `/ready` is 503 until a warm-up forward on every worker has run. Call from a tokio
    /// runtime.
    pub async fn start(
        workers: Vec<Arc<Embedder>>,
        options: ServeOptions,
    ) -> Result<Self, ServeError> {
        if options.max_concurrent_requests == 0 {
            return Err(ServeError::Option(
                "--max-concurrent-requests must be at least 1".into(),
            ));
        }
        if options.max_batch_tokens == 0 {
            return Err(ServeError::Option(
                "--max-batch-tokens must be at least 1".into(),
            ));
        }
        if let Some(dir) = &options.ec_cache_dir {
            std::fs::create_dir_all(dir).map_err(|e| ServeError::EcCacheDir {
                dir: dir.clone(),
                detail: e.to_string(),
            })?;
        }
        let out_hidden = workers
            .first()
            .map(|e| e.config().out_hidden_size)
            .unwrap_or_default();
        let metrics = Arc::new(Metrics::new());
        let m = metrics.clone();
        let batcher = Batcher::with_observer(
            workers.clone(),
            BatcherOptions::new(options.max_batch_tokens, options.decode_threads),
            Some(Arc::new(move |b| m.observe_batch(b))),
        )?;
        let listener = tokio::net::TcpListener::bind(options.addr)
            .await
            .map_err(|source| ServeError::Bind {
                addr: options.addr,
                source,
            })?;
        let addr = listener.local_addr()?;
        let state = Arc::new(AppState {
            admission: Arc::new(Semaphore::new(options.max_concurrent_requests)),
            options,
            batcher,
            metrics,
            ready: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            warmup_failed: AtomicBool::new(false),
            finished: Notify::new(),
            out_hidden,
        });
        let warm = state.clone();
        tokio::task::spawn_blocking(move || match warm_up(&workers) {
            Ok(()) => warm.ready.store(true, Ordering::SeqCst),
            Err(e) => {
                tracing::error!("warm-up forward failed: {e}");
                warm.warmup_failed.store(true, Ordering::SeqCst);
            }
        });
        let app = routes::router(state.clone());
        let stop = state.clone();
        let handle = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move { drained(&stop).await })
                .await
        });
        Ok(Self {
            addr,
            state,
            handle,
        })
    }

    pub fn state(&self) -> &Arc<AppState> {
        &self.state
    }

    /// Starts draining: `/ready` 503, new requests 503, admitted ones answered.
    pub fn drain(&self) {
        self.state.draining.store(true, Ordering::SeqCst);
        self.state.finished.notify_waiters();
    }

    /// Waits until the server stopped (after [`drain`](Self::drain) and the last answer),
    /// then finishes the batcher.
    pub async fn wait(self) -> Result<(), ServeError> {
        let r = self
            .handle
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let state = self.state.clone();
        tokio::task::spawn_blocking(move || state.batcher.shutdown())
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok(r?)
    }

    /// Serves until SIGTERM or SIGINT, then drains and returns.
    pub async fn run_until_signal(self) -> Result<(), ServeError> {
        shutdown_signal().await;
        tracing::info!("signal received: draining (new requests refused, admitted ones answered)");
        self.drain();
        self.wait().await
    }
}

/// Resolves once draining began and every admitted request was answered (or the drain
/// timeout passed).
async fn drained(state: &AppState) {
    while !state.draining.load(Ordering::SeqCst) {
        let notified = state.finished.notified();
        if state.draining.load(Ordering::SeqCst) {
            break;
        }
        notified.await;
    }
    let deadline = tokio::time::Instant::now() + state.options.drain_timeout;
    loop {
        let busy = state.metrics.in_flight.get();
        if busy <= 0 {
            break;
        }
        let notified = state.finished.notified();
        if tokio::time::timeout_at(deadline, notified).await.is_err() {
            tracing::warn!("drain timeout passed with {busy} request(s) unanswered");
            break;
        }
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}

/// One small forward on every worker (kernels compiled, buffers made) before `/ready`.
fn warm_up(workers: &[Arc<Embedder>]) -> Result<(), String> {
    for e in workers {
        let cfg = e.config();
        let m = cfg.spatial_merge_size;
        let grid = [1, 2 * m, 2 * m];
        let rows = grid.iter().product::<usize>();
        let dim = cfg.patch_dim();
        let pixels = ndarray::Array2::from_shape_fn((rows, dim), |(r, c)| {
            ((r * 31 + c * 7) % 255) as f32 / 127.5 - 1.0
        });
        e.embed_pixels(pixels.view(), &[grid])
            .map_err(|err| err.to_string())?;
    }
    Ok(())
}
