//! `--api-key`: `Authorization: Bearer KEY` on every route but `/health` and `/ready`, compared
//! in constant time. The key is never logged.

use crate::AppState;
use crate::error::ApiError;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use subtle::ConstantTimeEq;

pub async fn require_key(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let Some(key) = &state.options.api_key else {
        return next.run(req).await;
    };
    if matches!(req.uri().path(), "/health" | "/ready") {
        return next.run(req).await;
    }
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    // lengths differ -> unequal; ct_eq on equal lengths compares every byte
    let ok = given.is_some_and(|g| bool::from(g.as_bytes().ct_eq(key.as_bytes())));
    if ok {
        return next.run(req).await;
    }
    let route = crate::routes::route_name(req.uri().path());
    state.metrics.request(route, "unauthorized");
    let msg = if given.is_some() {
        "wrong API key (Authorization: Bearer KEY)"
    } else {
        "this server needs an API key: send Authorization: Bearer KEY"
    };
    let mut r = ApiError::new(StatusCode::UNAUTHORIZED, msg).into_response();
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer"),
    );
    r
}
