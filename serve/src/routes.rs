//! The routes: parse, validate, admit, hand inputs to the batcher, map errors to statuses.

use crate::api::{
    self, EmbeddingItem, EmbeddingsRequest, EmbeddingsResponse, EncodingFormat, PlanItem,
    PlanResponse, Usage, WireDtype,
};
use crate::error::ApiError;
use crate::{AppState, auth, ec_cache};
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use glm5v_prep::{ImageSource, Plan};
use glm5v_reference::{CancelToken, JobError, JobOutput};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::sync::OwnedSemaphorePermit;

pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/embeddings", post(embeddings))
        .route("/v1/plan", post(plan))
        .route("/health", get(health))
        .route("/ready", get(ready))
        .route("/metrics", get(metrics))
        .route("/info", get(info))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(state.options.payload_limit))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            auth::require_key,
        ))
        .layer(middleware::from_fn(total_time))
        .layer(tower_http::trace::TraceLayer::new_for_http())
        .with_state(state)
}

/// The metrics label of a path.
pub fn route_name(path: &str) -> &'static str {
    match path {
        "/v1/embeddings" => "embeddings",
        "/v1/plan" => "plan",
        "/health" => "health",
        "/ready" => "ready",
        "/metrics" => "metrics",
        "/info" => "info",
        _ => "other",
    }
}

/// `x-total-time` (milliseconds) on every answer.
async fn total_time(req: Request, next: Next) -> Response {
    let start = Instant::now();
    let mut r = next.run(req).await;
    set_ms(r.headers_mut(), "x-total-time", start.elapsed());
    r
}

fn set_ms(h: &mut HeaderMap, name: &'static str, d: Duration) {
    let v = format!("{:.3}", d.as_secs_f64() * 1e3);
    h.insert(
        HeaderName::from_static(name),
        HeaderValue::from_str(&v).expect("digits"),
    );
}

async fn not_found(req: Request) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!(
            "no route {} {}: POST /v1/embeddings, POST /v1/plan, GET /health, /ready, /metrics, /info",
            req.method(),
            req.uri().path()
        ),
    )
}

/// An admitted embedding request: its permit, counted in flight until dropped.
struct Admitted {
    _permit: OwnedSemaphorePermit,
    state: Arc<AppState>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.state.metrics.in_flight.dec();
        self.state.finished.notify_waiters();
    }
}

/// Cancels a request's inputs if its handler is dropped unanswered (the client left).
struct CancelOnDrop {
    token: CancelToken,
    answered: bool,
    state: Arc<AppState>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if !self.answered {
            self.token.cancel();
            self.state.metrics.request("embeddings", "dropped");
        }
    }
}

fn unavailable(state: &AppState) -> Option<ApiError> {
    if state.draining.load(Ordering::SeqCst) {
        return Some(
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "the server is shutting down: no new requests",
            )
            .with_retry_after(1),
        );
    }
    if !state.ready.load(Ordering::SeqCst) {
        let why = if state.warmup_failed.load(Ordering::SeqCst) {
            "the warm-up forward failed: see the server's log"
        } else {
            "the server is warming up (GET /ready)"
        };
        return Some(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, why).with_retry_after(1));
    }
    None
}

/// The body as a request, or 413/422.
fn parse_body(
    state: &AppState,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<EmbeddingsRequest, ApiError> {
    let body = body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            let len = headers
                .get(header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .map(|v| format!(" of {v} bytes"))
                .unwrap_or_default();
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "request body{len} over the payload limit of {} bytes (--payload-limit)",
                    state.options.payload_limit
                ),
            )
        } else {
            ApiError::new(e.status(), e.body_text())
        }
    })?;
    let req: EmbeddingsRequest = serde_json::from_slice(&body)
        .map_err(|e| ApiError::unprocessable(format!("malformed request body: {e}")))?;
    Ok(req)
}

/// One input ready for the batcher.
struct Input {
    source: ImageSource,
    plan: Plan,
    key: String,
}

/// Inputs as image bytes, priced from their headers (blocking: base64 and header parsing).
fn price_inputs(
    state: &AppState,
    inputs: Vec<String>,
    uuids: Option<Vec<String>>,
    refuse_over_budget: bool,
) -> Result<Vec<Input>, ApiError> {
    if inputs.is_empty() {
        return Err(ApiError::unprocessable(
            "input is empty: give one image or a list",
        ));
    }
    if let Some(u) = &uuids {
        if u.len() != inputs.len() {
            return Err(ApiError::unprocessable(format!(
                "uuid has {} entries for {} inputs: give one per input",
                u.len(),
                inputs.len()
            )));
        }
        if let Some((i, k)) = u.iter().enumerate().find(|(_, k)| !ec_cache::valid_key(k)) {
            return Err(ApiError::unprocessable(format!(
                "uuid {i} ({k:?}) cannot name a cache entry: 1 to 200 of A-Z a-z 0-9 . _ : -"
            )));
        }
    }
    let max = state.options.max_batch_tokens;
    let mut out = Vec::with_capacity(inputs.len());
    for (i, s) in inputs.into_iter().enumerate() {
        let bytes = api::input_bytes(i, &s)?;
        drop(s);
        let key = match &uuids {
            Some(u) => u[i].clone(),
            None => ec_cache::content_key(&bytes),
        };
        let source = api::source(i, bytes);
        let plan = state
            .batcher
            .plan(&source)
            .map_err(|e| ApiError::bad_input(i, &e.to_string()))?;
        if refuse_over_budget && plan.tokens > max {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "input {i}: {} tokens ({}x{} image) exceed the batch budget of {max} tokens (--max-batch-tokens)",
                    plan.tokens, plan.width, plan.height
                ),
            ));
        }
        out.push(Input { source, plan, key });
    }
    Ok(out)
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, format!("internal: {e}")))?
}

async fn embeddings(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let started = Instant::now();
    match embed_request(&state, &headers, body, started).await {
        Ok(r) => {
            state.metrics.request("embeddings", "ok");
            r
        }
        Err(e) => {
            state.metrics.request("embeddings", e.kind());
            e.into_response()
        }
    }
}

async fn embed_request(
    state: &Arc<AppState>,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
    started: Instant,
) -> Result<Response, ApiError> {
    if let Some(e) = unavailable(state) {
        return Err(e);
    }
    let permit = state.admission.clone().try_acquire_owned().map_err(|_| {
        ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "over the limit of {} concurrent requests (--max-concurrent-requests): retry later",
                state.options.max_concurrent_requests
            ),
        )
        .with_retry_after(1)
    })?;
    state.metrics.in_flight.inc();
    let _admitted = Admitted {
        _permit: permit,
        state: state.clone(),
    };
    let req = parse_body(state, headers, body)?;
    let format = req.encoding_format.unwrap_or_default();
    let dtype = req.dtype.unwrap_or_default();
    if format == EncodingFormat::Npy && dtype == WireDtype::Bf16 {
        // refused before any work (encode would refuse it after the forward)
        api::encode(
            ndarray::ArrayView2::from_shape((0, 0), &[]).expect("empty"),
            format,
            dtype,
        )?;
    }
    let st = state.clone();
    let inputs = blocking(move || price_inputs(&st, req.input.into_vec(), req.uuid, true)).await?;

    let mut guard = CancelOnDrop {
        token: CancelToken::new(),
        answered: false,
        state: state.clone(),
    };
    let mut waits = Vec::with_capacity(inputs.len());
    let mut keys = Vec::with_capacity(inputs.len());
    for inp in inputs {
        let (tx, rx) = tokio::sync::oneshot::channel();
        state
            .batcher
            .submit(inp.source, inp.plan.tokens, guard.token.clone(), move |r| {
                let _ = tx.send(r);
            });
        waits.push(rx);
        keys.push(inp.key);
    }
    let all = async {
        let mut v = Vec::with_capacity(waits.len());
        for rx in waits {
            v.push(rx.await.unwrap_or(Err(JobError::ShutDown)));
        }
        v
    };
    let results = match tokio::time::timeout(state.options.request_timeout, all).await {
        Ok(r) => r,
        Err(_) => {
            guard.answered = true;
            guard.token.cancel();
            return Err(ApiError::new(
                StatusCode::GATEWAY_TIMEOUT,
                format!(
                    "not answered within the request timeout of {} s (--request-timeout): {} inputs are in the batcher",
                    state.options.request_timeout.as_secs_f64(),
                    state.batcher.in_flight()
                ),
            ));
        }
    };
    guard.answered = true;
    let mut outputs: Vec<JobOutput> = Vec::with_capacity(results.len());
    for (i, r) in results.into_iter().enumerate() {
        outputs.push(r.map_err(|e| job_error(i, e))?);
    }
    let m = &state.metrics;
    let (mut queue, mut decode, mut forward) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let mut tokens = 0;
    for o in &outputs {
        m.queue_seconds.observe(o.timings.queue.as_secs_f64());
        m.decode_seconds.observe(o.timings.decode.as_secs_f64());
        m.wait_seconds.observe(o.timings.wait.as_secs_f64());
        m.inputs.inc();
        m.tokens.inc_by(o.tokens() as u64);
        queue = queue.max(o.timings.queue);
        decode += o.timings.decode;
        forward = forward.max(o.timings.forward);
        tokens += o.tokens();
    }
    let st = state.clone();
    let model = state.options.model_name.clone();
    let body = blocking(move || {
        let mut data = Vec::with_capacity(outputs.len());
        for (index, (o, key)) in outputs.into_iter().zip(keys).enumerate() {
            if let Some(dir) = &st.options.ec_cache_dir {
                ec_cache::write(dir, &key, o.embeddings.view(), st.options.ec_cache_dtype)
                    .map_err(|e| {
                        ApiError::new(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            format!(
                                "input {index}: cannot write its EC cache entry {key} in {}: {e}",
                                dir.display()
                            ),
                        )
                    })?;
            }
            data.push(EmbeddingItem {
                object: "embedding",
                index,
                embedding: api::encode(o.embeddings.view(), format, dtype)?,
                shape: [o.embeddings.nrows(), o.embeddings.ncols()],
                grid_thw: o.grid,
                key,
            });
        }
        let resp = EmbeddingsResponse {
            object: "list",
            model,
            data,
            usage: Usage {
                prompt_tokens: tokens,
                total_tokens: tokens,
            },
        };
        resp.to_json()
            .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, format!("internal: {e}")))
    })
    .await?;
    m.request_seconds.observe(started.elapsed().as_secs_f64());
    let mut r = (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response();
    let h = r.headers_mut();
    set_ms(h, "x-queue-time", queue);
    set_ms(h, "x-decode-time", decode);
    set_ms(h, "x-inference-time", forward);
    h.insert(
        HeaderName::from_static("x-compute-tokens"),
        HeaderValue::from(tokens),
    );
    Ok(r)
}

fn job_error(index: usize, e: JobError) -> ApiError {
    match e {
        JobError::Input(err) => ApiError::bad_input(index, &err.to_string()),
        JobError::TooLarge { .. } => {
            ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, format!("input {index}: {e}"))
        }
        JobError::ShutDown | JobError::Cancelled => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("input {index}: {e}"),
        )
        .with_retry_after(1),
        JobError::DecoderPanic { .. } | JobError::Backend(_) => ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("input {index}: {e}"),
        ),
    }
}

async fn plan(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let r = async {
        let req = parse_body(&state, &headers, body)?;
        let st = state.clone();
        let inputs =
            blocking(move || price_inputs(&st, req.input.into_vec(), req.uuid, false)).await?;
        let tokens = inputs.iter().map(|i| i.plan.tokens).sum();
        let data = inputs
            .into_iter()
            .enumerate()
            .map(|(index, i)| PlanItem {
                object: "plan",
                index,
                width: i.plan.width,
                height: i.plan.height,
                grid_thw: i.plan.grid_thw,
                tokens: i.plan.tokens,
                shape: [i.plan.tokens, state.out_hidden],
            })
            .collect();
        Ok::<_, ApiError>(axum::Json(PlanResponse {
            object: "list",
            model: state.options.model_name.clone(),
            data,
            usage: Usage {
                prompt_tokens: tokens,
                total_tokens: tokens,
            },
        }))
    }
    .await;
    match r {
        Ok(j) => {
            state.metrics.request("plan", "ok");
            j.into_response()
        }
        Err(e) => {
            state.metrics.request("plan", e.kind());
            e.into_response()
        }
    }
}

async fn health(State(state): State<Arc<AppState>>) -> Response {
    if state.batcher.is_broken() {
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the tower failed on a forward: restart the server",
        )
        .into_response();
    }
    if state.warmup_failed.load(Ordering::SeqCst) {
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the warm-up forward failed",
        )
        .into_response();
    }
    axum::Json(json!({"status": "ok"})).into_response()
}

async fn ready(State(state): State<Arc<AppState>>) -> Response {
    if let Some(e) = unavailable(&state) {
        return e.into_response();
    }
    if state.batcher.is_broken() {
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the tower failed on a forward",
        )
        .into_response();
    }
    axum::Json(json!({"status": "ready"})).into_response()
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let st = state.clone();
    let text = tokio::task::spawn_blocking(move || st.metrics.render(&st.batcher))
        .await
        .unwrap_or_default();
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

async fn info(State(state): State<Arc<AppState>>) -> Response {
    let o = &state.options;
    let prep = state.batcher.prep_options();
    axum::Json(json!({
        "model": o.model_name,
        "version": env!("CARGO_PKG_VERSION"),
        "backend": o.info,
        "limits": {
            "max_batch_tokens": o.max_batch_tokens,
            "max_concurrent_requests": o.max_concurrent_requests,
            "max_image_tokens": prep.image.max_tokens,
            "min_image_tokens": prep.image.min_tokens,
            "payload_limit": o.payload_limit,
            "request_timeout_s": o.request_timeout.as_secs_f64(),
            "decode_threads": o.decode_threads,
        },
        "ec_cache": {
            "dir": o.ec_cache_dir.as_ref().map(|d| d.display().to_string()),
            "dtype": o.ec_cache_dtype.name(),
            "file": format!("<dir>/<key>/{}", ec_cache::FILE_NAME),
            "tensor": "ec_cache",
        },
        "key": "the request's uuid for that input when given, else the sha256 (hex) of the input's image bytes",
        "auth": o.api_key.is_some(),
        "encoding_formats": ["float", "base64", "npy"],
        "dtypes": ["f32", "bf16", "f16"],
    }))
    .into_response()
}
