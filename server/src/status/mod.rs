//! The status page on the metrics listener: `/` (datasets, footprint map, live streams,
//! cache and store figures) and `/preview.png?dataset=NAME[&seed=N]` (one batch drawn as a
//! PNG). Both need the metrics token when `[auth]` sets one: as a bearer token, or as the
//! password of HTTP Basic, which a browser asks for once and then sends for the images.

pub mod map;
pub mod page;
pub mod preview;

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::Query;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::api::auth::Auth;
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

fn allowed(state: &StatusState, headers: &HeaderMap) -> bool {
    state
        .auth
        .status_allowed(headers.get(header::AUTHORIZATION).map(|v| v.as_bytes()))
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
                    if !allowed(&state, &headers) {
                        return unauthorized();
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
                    if !allowed(&state, &headers) {
                        return unauthorized();
                    }
                    let Some(dataset) = q.get("dataset") else {
                        return (StatusCode::BAD_REQUEST, "name a dataset: /preview.png?dataset=NAME\n")
                            .into_response();
                    };
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
                            (status, format!("{e}\n")).into_response()
                        }
                    }
                }
            }),
        )
}
