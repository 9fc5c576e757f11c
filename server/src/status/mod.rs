//! The status page on the metrics listener: `/` (datasets, footprint map, live streams,
//! cache and store figures) and `/preview.png?dataset=NAME[&seed=N]` (one batch drawn as a
//! PNG). The page needs the metrics token when `[auth]` sets one: as a bearer token, or as
//! the password of HTTP Basic, which a browser asks for once and then sends for the images.
//! A preview is data: its credentials must cover the dataset (a data token's scopes, or
//! `auth.metrics_datasets` for the metrics token). With tokens required and no metrics
//! token the whole listener but the probes is closed. Errors read as a gRPC client's do.

pub mod map;
pub mod page;
pub mod preview;

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::Query;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::api::auth::{Auth, StatusRefusal};
use crate::api::live::LiveStreams;
use crate::config::LimitsConfig;
use crate::dataset::Catalog;
use crate::error::ErrorCode;
use crate::memory::MemoryBudget;
use crate::metrics::Metrics;
use crate::tiles::TileSource;

/// What the page and the previews may see of the daemon: built by `app`, never the
/// whole daemon.
#[derive(Clone)]
pub struct StatusState {
    /// Who may see the page (the metrics token).
    pub auth: Arc<Auth>,
    pub catalog: Arc<Catalog>,
    /// Where previews read tiles.
    pub tiles: Arc<dyn TileSource>,
    pub limits: LimitsConfig,
    pub memory: MemoryBudget,
    pub metrics: Arc<Metrics>,
    pub live: Arc<LiveStreams>,
    /// When the daemon was built (uptime).
    pub started: std::time::Instant,
    /// One permit per allowed concurrent stream (the page shows those taken).
    pub streams: Arc<tokio::sync::Semaphore>,
}

impl StatusState {
    /// Streams open now.
    pub fn active_streams(&self) -> usize {
        self.limits.max_streams - self.streams.available_permits()
    }
}

/// 401 with both schemes offered (browsers show a password prompt for Basic).
fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(
            header::WWW_AUTHENTICATE,
            "Basic realm=\"cogfeed status\", charset=\"UTF-8\"",
        )],
        "the status page requires the metrics token (as a bearer token, or as the password of HTTP Basic)\n",
    )
        .into_response()
}

/// 403 for the whole listener: tokens are required and no metrics token is set.
pub fn closed() -> Response {
    (
        StatusCode::FORBIDDEN,
        "the status listener is closed: [auth] required = true and no auth.metrics_token_sha256 is set\n",
    )
        .into_response()
}

/// The refusal of the page (None: allowed).
fn refusal(state: &StatusState, headers: &HeaderMap) -> Option<Response> {
    if state.auth.status_closed() {
        return Some(closed());
    }
    let allowed = state
        .auth
        .status_allowed(headers.get(header::AUTHORIZATION).map(|v| v.as_bytes()));
    (!allowed).then(unauthorized)
}

/// The refusal of a preview of `dataset` (None: allowed): a preview is data, so the
/// credentials must cover the dataset (see `Auth::preview_allowed`).
fn preview_refusal(state: &StatusState, headers: &HeaderMap, dataset: &str) -> Option<Response> {
    let authorization = headers.get(header::AUTHORIZATION).map(|v| v.as_bytes());
    match state.auth.preview_allowed(authorization, dataset) {
        Ok(()) => None,
        Err(StatusRefusal::Closed) => Some(closed()),
        Err(StatusRefusal::Unauthenticated) => Some(unauthorized()),
        Err(StatusRefusal::Forbidden) => Some(
            (
                StatusCode::FORBIDDEN,
                "these credentials may not read this dataset (a preview is data: present a token whose datasets include it)\n",
            )
                .into_response(),
        ),
    }
}

/// The routes, to merge into the metrics listener's router.
pub fn routes(state: StatusState) -> axum::Router {
    let permits = preview::permits();
    let page_app = state.clone();
    axum::Router::new()
        .route(
            "/",
            get(move |headers: HeaderMap, Query(q): Query<HashMap<String, String>>| {
                let state = page_app.clone();
                async move {
                    if let Some(refused) = refusal(&state, &headers) {
                        return refused;
                    }
                    let refresh = q
                        .get("refresh")
                        .and_then(|v| v.parse::<u32>().ok())
                        .map(|s| s.clamp(1, 3600));
                    (
                        [
                            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
                            (header::CACHE_CONTROL, "no-store"),
                        ],
                        page::render(&state, refresh, q.get("preview").map(String::as_str)),
                    )
                        .into_response()
                }
            }),
        )
        .route(
            "/preview.png",
            get(move |headers: HeaderMap, Query(q): Query<HashMap<String, String>>| {
                let state = state.clone();
                let permits: Arc<_> = permits.clone();
                async move {
                    let Some(dataset) = q.get("dataset") else {
                        if let Some(refused) = refusal(&state, &headers) {
                            return refused;
                        }
                        return (StatusCode::BAD_REQUEST, "name a dataset: /preview.png?dataset=NAME\n")
                            .into_response();
                    };
                    if let Some(refused) = preview_refusal(&state, &headers, dataset) {
                        return refused;
                    }
                    let seed = q.get("seed").and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
                    match preview::png(&state, &permits, dataset, seed).await {
                        Ok(png) => (
                            [(header::CONTENT_TYPE, "image/png"), (header::CACHE_CONTROL, "no-store")],
                            png,
                        )
                            .into_response(),
                        Err(e) => {
                            let status = match e.code() {
                                ErrorCode::InvalidArgument => StatusCode::BAD_REQUEST,
                                ErrorCode::NotFound => StatusCode::NOT_FOUND,
                                ErrorCode::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
                                ErrorCode::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
                                _ => StatusCode::INTERNAL_SERVER_ERROR,
                            };
                            // What a gRPC client would read: object names, never URLs,
                            // credentials or the store's own words (the detail is logged).
                            if status == StatusCode::INTERNAL_SERVER_ERROR {
                                tracing::warn!(dataset = %dataset, error = %e, "preview failed");
                            }
                            (status, format!("{}\n", e.client_message())).into_response()
                        }
                    }
                }
            }),
        )
}
