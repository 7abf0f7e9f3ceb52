//! Errors as answers: `{"error": {"message", "type", "code"}}` with the status each names.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// An answer that is not a success.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// Seconds a client should wait before retrying (429, 503).
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            retry_after: None,
        }
    }

    /// 400: input `index` cannot be read.
    pub fn bad_input(index: usize, detail: &str) -> Self {
        let detail = detail
            .strip_prefix(&format!("input {index}: "))
            .unwrap_or(detail);
        Self::new(StatusCode::BAD_REQUEST, format!("input {index}: {detail}"))
    }

    /// 422: the body is not a request this route takes.
    pub fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, message)
    }

    pub fn with_retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    /// The `type` field: a stable name per status.
    pub fn kind(&self) -> &'static str {
        match self.status {
            StatusCode::BAD_REQUEST => "invalid_input",
            StatusCode::UNAUTHORIZED => "unauthorized",
            StatusCode::PAYLOAD_TOO_LARGE => "too_large",
            StatusCode::UNPROCESSABLE_ENTITY => "invalid_request",
            StatusCode::TOO_MANY_REQUESTS => "overloaded",
            StatusCode::SERVICE_UNAVAILABLE => "unavailable",
            StatusCode::GATEWAY_TIMEOUT => "timeout",
            StatusCode::NOT_FOUND => "not_found",
            StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
            _ => "server_error",
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {
            "message": self.message,
            "type": self.kind(),
            "code": self.status.as_u16(),
        }});
        let mut r = (self.status, axum::Json(body)).into_response();
        if let Some(s) = self.retry_after {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        r
    }
}
