//! Planetary Computer signing: an `object_store` credential provider that asks the token
//! API (`GET {sas_api}/token/{account}/{container}` → `{"msft:expiry", "token"}`) for a
//! container's SAS token when a request needs one and the cached token is not fresh. One
//! token per account and container (one provider per store); refreshed a margin before its
//! expiry (a quarter of its life, at most 5 minutes) and at once after the store refused a
//! request ([`PcSigner::invalidate`]); concurrent refreshes are one (the cache's lock is
//! held while the API answers); 429 is honoured with its retry-after, a token that arrives
//! already expired is asked again. Never logs or shows a token: log lines name the
//! account, container and expiry only.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use object_store::azure::AzureCredential;

use crate::config::Secret;

/// Attempts at the token API for one refresh.
const ATTEMPTS: u32 = 6;
/// A token this young is not made stale by a refusal (see `get_credential`).
const FRESH_AFTER_FETCH: Duration = Duration::from_secs(1);
/// Longest wait a 429 may ask for.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

#[derive(Debug)]
struct Token {
    credential: Arc<AzureCredential>,
    fetched: std::time::Instant,
    expiry: DateTime<Utc>,
    /// Refresh from this instant on.
    refresh_at: DateTime<Utc>,
}

/// The SAS tokens of one container.
#[derive(Debug)]
pub struct PcSigner {
    url: String,
    subscription_key: Option<Secret>,
    client: reqwest::Client,
    cached: tokio::sync::Mutex<Option<Token>>,
    stale: AtomicBool,
    fetched: AtomicU64,
    what: String,
}

#[derive(serde::Deserialize)]
struct Answer {
    #[serde(rename = "msft:expiry")]
    expiry: String,
    token: String,
}

impl PcSigner {
    /// A signer of `account`/`container` through the token API at `sas_api`.
    pub fn new(sas_api: &str, account: &str, container: &str, subscription_key: Option<Secret>) -> Self {
        Self {
            url: format!("{}/token/{account}/{container}", sas_api.trim_end_matches('/')),
            subscription_key,
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .connect_timeout(Duration::from_secs(5))
                .build()
                .unwrap_or_default(),
            cached: tokio::sync::Mutex::new(None),
            stale: AtomicBool::new(false),
            fetched: AtomicU64::new(0),
            what: format!("{account}/{container}"),
        }
    }

    /// The cached token is not to be used again (the store refused a request with it).
    pub fn invalidate(&self) {
        self.stale.store(true, Ordering::SeqCst);
    }

    /// Tokens fetched so far.
    pub fn tokens_fetched(&self) -> u64 {
        self.fetched.load(Ordering::SeqCst)
    }

    async fn fetch(&self) -> Result<Token, String> {
        let mut backoff = Duration::from_millis(250);
        let mut last = String::new();
        for _ in 0..ATTEMPTS {
            let mut request = self.client.get(&self.url);
            if let Some(k) = &self.subscription_key {
                request = request.header("Ocp-Apim-Subscription-Key", k.expose());
            }
            match request.send().await {
                Ok(r) if r.status().as_u16() == 429 => {
                    let header = r
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.trim().parse::<f64>().ok());
                    let body = r.text().await.unwrap_or_default();
                    // "Rate limit is exceeded. Try again in 7 seconds."
                    let said = body
                        .split("in ")
                        .nth(1)
                        .and_then(|t| t.split_whitespace().next())
                        .and_then(|n| n.parse::<f64>().ok());
                    let wait = header
                        .or(said)
                        .filter(|w| w.is_finite() && *w >= 0.0)
                        .map_or(backoff, Duration::from_secs_f64)
                        .min(MAX_RETRY_AFTER);
                    tracing::warn!(container = %self.what, wait_secs = wait.as_secs_f64(), "token API: 429, waiting as asked");
                    last = "the token API kept answering 429".into();
                    tokio::time::sleep(wait).await;
                    continue;
                }
                Ok(r) if r.status().is_success() => match r
                    .bytes()
                    .await
                    .ok()
                    .and_then(|b| serde_json::from_slice::<Answer>(&b).ok())
                {
                    Some(a) => {
                        let expiry = DateTime::parse_from_rfc3339(&a.expiry)
                            .map(|t| t.with_timezone(&Utc))
                            .or_else(|_| {
                                // The API writes `2026-12-04T21:00:00Z` or without a zone.
                                chrono::NaiveDateTime::parse_from_str(&a.expiry, "%Y-%m-%dT%H:%M:%S%.f")
                                    .map(|t| t.and_utc())
                            })
                            .map_err(|_| "the token API's expiry is not a time".to_string())?;
                        let now = Utc::now();
                        if expiry <= now + chrono::Duration::seconds(1) {
                            tracing::warn!(container = %self.what, expiry = %expiry, "token API: the token arrived expired; asking again");
                            last = "the token API answered expired tokens".into();
                        } else {
                            let life = expiry - now;
                            let margin = (life / 4).min(chrono::Duration::minutes(5));
                            let pairs: Vec<(String, String)> =
                                url::form_urlencoded::parse(a.token.trim_start_matches('?').as_bytes())
                                    .map(|(k, v)| (k.into_owned(), v.into_owned()))
                                    .collect();
                            if pairs.is_empty() {
                                return Err("the token API answered an empty token".into());
                            }
                            self.fetched.fetch_add(1, Ordering::SeqCst);
                            tracing::info!(container = %self.what, expiry = %expiry, "token API: new SAS token");
                            return Ok(Token {
                                credential: Arc::new(AzureCredential::SASToken(pairs)),
                                fetched: std::time::Instant::now(),
                                expiry,
                                refresh_at: expiry - margin,
                            });
                        }
                    }
                    None => last = "the token API's answer is not a token".into(),
                },
                Ok(r) => last = format!("the token API answered {}", r.status().as_u16()),
                Err(e) if e.is_timeout() => last = "the token API did not answer in 30 s".into(),
                Err(_) => last = "the token API cannot be reached".into(),
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(8));
        }
        Err(format!("no SAS token for {}: {last}", self.what))
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct SignError(String);

#[async_trait::async_trait]
impl object_store::CredentialProvider for PcSigner {
    type Credential = AzureCredential;

    async fn get_credential(&self) -> object_store::Result<Arc<AzureCredential>> {
        let mut cached = self.cached.lock().await;
        let now = Utc::now();
        // Refusals within a second of a fetch came from requests signed with the token
        // before it: they do not make the new one stale.
        if let Some(t) = cached.as_ref()
            && (!self.stale.load(Ordering::SeqCst) || t.fetched.elapsed() < FRESH_AFTER_FETCH)
            && now < t.refresh_at
            && now < t.expiry
        {
            self.stale.store(false, Ordering::SeqCst);
            return Ok(t.credential.clone());
        }
        // Set before the fetch: a refusal seen while it runs asks for the next one.
        self.stale.store(false, Ordering::SeqCst);
        let token = self.fetch().await.map_err(|e| object_store::Error::Generic {
            store: "PlanetaryComputer",
            source: Box::new(SignError(e)),
        })?;
        let credential = token.credential.clone();
        *cached = Some(token);
        Ok(credential)
    }
}
