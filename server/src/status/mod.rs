//! The status page on the metrics listener: `/` (datasets, footprint map, live streams,
//! cache and store figures) and `/preview.png?dataset=NAME[&seed=N]` (one batch drawn as a
//! PNG). Both need the metrics token when `[auth]` sets one: as a bearer token, or as the
//! password of HTTP Basic, which a browser asks for once and then sends for the images.

pub mod live;
pub mod map;
pub mod page;
pub mod preview;

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::Query;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::app::App;
use crate::error::ErrorCode;

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

fn allowed(app: &App, headers: &HeaderMap) -> bool {
    app.auth
        .status_allowed(headers.get(header::AUTHORIZATION).map(|v| v.as_bytes()))
}

/// The routes, to merge into the metrics listener's router.
pub fn routes(app: App) -> axum::Router {
    let permits = preview::permits();
    let page_app = app.clone();
    axum::Router::new()
        .route(
            "/",
            get(move |headers: HeaderMap, Query(q): Query<HashMap<String, String>>| {
                let app = page_app.clone();
                async move {
                    if !allowed(&app, &headers) {
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
                        page::render(&app, refresh, q.get("preview").map(String::as_str)),
                    )
                        .into_response()
                }
            }),
        )
        .route(
            "/preview.png",
            get(move |headers: HeaderMap, Query(q): Query<HashMap<String, String>>| {
                let app = app.clone();
                let permits: Arc<_> = permits.clone();
                async move {
                    if !allowed(&app, &headers) {
                        return unauthorized();
                    }
                    let Some(dataset) = q.get("dataset") else {
                        return (StatusCode::BAD_REQUEST, "name a dataset: /preview.png?dataset=NAME\n")
                            .into_response();
                    };
                    let seed = q.get("seed").and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
                    match preview::png(&app, &permits, dataset, seed).await {
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
