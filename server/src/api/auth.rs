//! Who may call the daemon and how much: bearer tokens from the config (kept only as
//! SHA-256 digests), the datasets each may read, and per-caller limits on concurrent
//! streams and call rate. [`Auth::interceptor`] runs on every Feed call, authenticates it
//! and attaches a [`Principal`]; the service asks the principal before touching a dataset.
//! A token never appears in a log, an error or a metric: callers are named by the token's
//! configured name. Anonymous callers get an allowance per client address (streams and
//! call rate), so one flooding client cannot spend everyone's; calls between replicas of a
//! fleet (the Peer service) are authenticated but not rate-limited.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;

use crate::config::{AuthConfig, LimitsConfig};
use crate::error::{Error, Result};
use crate::memory::MemoryBudget;

/// An authenticated (or anonymous) caller.
#[derive(Debug, Clone)]
pub struct Principal {
    inner: Arc<Caller>,
}

#[derive(Debug)]
struct Caller {
    name: String,
    scope: Scope,
    streams: Arc<Semaphore>,
    max_streams: usize,
    /// This caller's share of the daemon's memory budget.
    memory: MemoryBudget,
    rate: DefaultDirectRateLimiter,
    requests_per_second: u32,
}

#[derive(Debug)]
enum Scope {
    All,
    Only(HashSet<String>),
}

impl Principal {
    fn new(name: String, scope: Scope, max_streams: usize, requests_per_second: u32, memory_share: u64) -> Self {
        let rps = NonZeroU32::new(requests_per_second).unwrap_or(NonZeroU32::MIN);
        let burst = rps.saturating_mul(NonZeroU32::new(2).unwrap_or(NonZeroU32::MIN));
        Self {
            inner: Arc::new(Caller {
                name,
                scope,
                streams: Arc::new(Semaphore::new(max_streams)),
                max_streams,
                memory: MemoryBudget::named(memory_share, "limits.memory_per_caller_bytes"),
                rate: RateLimiter::direct(Quota::per_second(rps).allow_burst(burst)),
                requests_per_second,
            }),
        }
    }

    /// The caller's name in logs and errors (`anonymous` without a token).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Whether this caller may read `dataset`.
    pub fn may_read(&self, dataset: &str) -> bool {
        match &self.inner.scope {
            Scope::All => true,
            Scope::Only(names) => names.contains(dataset),
        }
    }

    /// Whether this caller may read every dataset (a replica's or an admin's token).
    pub fn may_read_all(&self) -> bool {
        matches!(self.inner.scope, Scope::All)
    }

    /// `Ok` when this caller may read `dataset`, else PERMISSION_DENIED naming both.
    pub fn check(&self, dataset: &str) -> Result<()> {
        if self.may_read(dataset) {
            Ok(())
        } else {
            Err(Error::PermissionDenied(format!(
                "{} may not read dataset {dataset:?}",
                self.inner.name
            )))
        }
    }

    /// This caller's share of the memory budget (a request reserves here and globally).
    pub fn memory(&self) -> &MemoryBudget {
        &self.inner.memory
    }

    /// One of this caller's stream slots, or RESOURCE_EXHAUSTED.
    pub fn stream_slot(&self) -> Result<tokio::sync::OwnedSemaphorePermit> {
        self.inner.streams.clone().try_acquire_owned().map_err(|_| {
            Error::LimitExceeded(format!(
                "too many concurrent streams for {} (limit {})",
                self.inner.name, self.inner.max_streams
            ))
        })
    }

    /// Counts one call against the caller's rate, or RESOURCE_EXHAUSTED.
    fn admit(&self) -> Result<()> {
        self.inner.rate.check().map_err(|_| {
            Error::LimitExceeded(format!(
                "call rate limit for {} exceeded ({} per second)",
                self.inner.name, self.inner.requests_per_second
            ))
        })
    }
}

/// Client addresses whose anonymous allowances are remembered; past this, addresses new
/// to the daemon share one allowance (a flood of addresses cannot grow memory).
const MAX_ANONYMOUS_ADDRESSES: usize = 4096;

/// The token table and the anonymous callers.
#[derive(Debug)]
pub struct Auth {
    required: bool,
    tokens: Vec<([u8; 32], Principal)>,
    /// Anonymous callers by client address (one allowance each).
    anonymous: Mutex<HashMap<IpAddr, Principal>>,
    /// Anonymous callers without a known address, or past the address cap.
    anonymous_rest: Principal,
    anonymous_limits: (usize, u32, u64),
    metrics: Option<[u8; 32]>,
    /// What the metrics token may preview on the status page.
    metrics_scope: Scope,
}

/// Why the status listener refuses a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusRefusal {
    /// No (valid) credentials: 401, ask for them.
    Unauthenticated,
    /// Valid credentials that may not see this: 403.
    Forbidden,
    /// `auth.required` without a metrics token: the listener serves nobody (403).
    Closed,
}

impl Auth {
    /// Builds the table from `[auth]` and the default limits of `[limits]`.
    pub fn new(config: &AuthConfig, limits: &LimitsConfig) -> Result<Self> {
        let digest = |hex_text: &str, what: &str| -> Result<[u8; 32]> {
            let mut out = [0u8; 32];
            hex::decode_to_slice(hex_text, &mut out)
                .map_err(|_| Error::InvalidArgument(format!("config: {what} is not a hex SHA-256")))?;
            Ok(out)
        };
        let mut tokens = Vec::with_capacity(config.tokens.len());
        for (i, t) in config.tokens.iter().enumerate() {
            let name = t.name.clone().unwrap_or_else(|| format!("token-{}", i + 1));
            let scope = if t.datasets.iter().any(|d| d == "*") {
                Scope::All
            } else {
                Scope::Only(t.datasets.iter().cloned().collect())
            };
            let principal = Principal::new(
                format!("token {name:?}"),
                scope,
                t.max_streams.unwrap_or(limits.max_streams_per_token),
                t.requests_per_second.unwrap_or(limits.requests_per_second),
                crate::memory::per_caller_bytes(limits),
            );
            tokens.push((digest(&t.sha256, &format!("auth.tokens #{}", i + 1))?, principal));
        }
        let metrics = match &config.metrics_token_sha256 {
            Some(h) => Some(digest(h, "auth.metrics_token_sha256")?),
            None => None,
        };
        let metrics_scope = match &config.metrics_datasets {
            Some(d) if d.iter().any(|d| d == "*") => Scope::All,
            Some(d) => Scope::Only(d.iter().cloned().collect()),
            None if config.required => Scope::Only(HashSet::new()),
            None => Scope::All,
        };
        Ok(Self {
            required: config.required,
            metrics_scope,
            tokens,
            anonymous: Mutex::new(HashMap::new()),
            anonymous_rest: Principal::new(
                "anonymous caller".into(),
                Scope::All,
                limits.max_streams_per_token,
                limits.requests_per_second,
                crate::memory::per_caller_bytes(limits),
            ),
            anonymous_limits: (
                limits.max_streams_per_token,
                limits.requests_per_second,
                crate::memory::per_caller_bytes(limits),
            ),
            metrics,
        })
    }

    /// The anonymous caller at `ip` (its own allowance while the address table has room).
    fn anonymous(&self, ip: Option<IpAddr>) -> Principal {
        let Some(ip) = ip else {
            return self.anonymous_rest.clone();
        };
        let mut table = self.anonymous.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = table.get(&ip) {
            return p.clone();
        }
        if table.len() >= MAX_ANONYMOUS_ADDRESSES {
            // Forget addresses with no stream open (their rate state is lost, which only
            // helps them), then share the rest allowance if still full.
            table.retain(|_, p| p.inner.streams.available_permits() < p.inner.max_streams);
            if table.len() >= MAX_ANONYMOUS_ADDRESSES {
                return self.anonymous_rest.clone();
            }
        }
        let (streams, rps, memory) = self.anonymous_limits;
        let p = Principal::new(format!("anonymous caller at {ip}"), Scope::All, streams, rps, memory);
        table.insert(ip, p.clone());
        p
    }

    /// Whether calls without a token are refused.
    pub fn required(&self) -> bool {
        self.required
    }

    /// The caller presenting `authorization` (the header's value, if any) from `ip`. A
    /// token that is given must be valid, whether or not tokens are required.
    pub fn authenticate(&self, authorization: Option<&[u8]>, ip: Option<IpAddr>) -> Result<Principal> {
        let Some(header) = authorization else {
            if self.required {
                return Err(Error::Unauthenticated(
                    "this server requires a bearer token (metadata `authorization: Bearer <token>`)".into(),
                ));
            }
            return Ok(self.anonymous(ip));
        };
        let token = bearer(header)?;
        let got: [u8; 32] = Sha256::digest(token).into();
        // Compare against every digest without stopping early.
        let mut found = None;
        for (digest, principal) in &self.tokens {
            if constant_time_eq(digest, &got) {
                found = Some(principal);
            }
        }
        found
            .cloned()
            .ok_or_else(|| Error::Unauthenticated("unknown bearer token".into()))
    }

    /// Authenticates and rate-limits one call.
    pub fn admit(&self, authorization: Option<&[u8]>, ip: Option<IpAddr>) -> Result<Principal> {
        let principal = self.authenticate(authorization, ip)?;
        principal.admit()?;
        Ok(principal)
    }

    /// Whether the status listener serves nobody: tokens are required and no metrics
    /// token is set (warned at start-up).
    pub fn status_closed(&self) -> bool {
        self.required && self.metrics.is_none()
    }

    /// Whether a `/metrics` request with `authorization` may read the metrics.
    pub fn metrics_allowed(&self, authorization: Option<&[u8]>) -> bool {
        let Some(want) = &self.metrics else {
            return !self.required;
        };
        let Some(token) = authorization.and_then(|h| bearer(h).ok()) else {
            return false;
        };
        let got: [u8; 32] = Sha256::digest(token).into();
        constant_time_eq(want, &got)
    }

    /// The token of a status-listener `authorization` header: `Bearer <token>`, or the
    /// password of HTTP Basic (any user name), which browsers ask for once and then send
    /// with the page's images too.
    fn status_token(authorization: &[u8]) -> Option<Vec<u8>> {
        basic_password(authorization).or_else(|| bearer(authorization).ok().map(<[u8]>::to_vec))
    }

    /// Whether a status-page request with `authorization` may see the page: the metrics
    /// token (see `Auth::status_token`); anyone when no metrics token is set and tokens
    /// are not required; nobody when tokens are required and no metrics token is set.
    pub fn status_allowed(&self, authorization: Option<&[u8]>) -> bool {
        if self.metrics.is_none() {
            return !self.required;
        }
        let Some(token) = authorization.and_then(Self::status_token) else {
            return false;
        };
        let mut header = b"Bearer ".to_vec();
        header.extend_from_slice(&token);
        self.metrics_allowed(Some(&header))
    }

    /// Whether `authorization` may preview `dataset` (a preview is data): a data token
    /// brings its own dataset scopes; the metrics token has `auth.metrics_datasets`;
    /// without a token, only an open daemon (no token required, no metrics token) answers.
    pub fn preview_allowed(&self, authorization: Option<&[u8]>, dataset: &str) -> Result<(), StatusRefusal> {
        if self.status_closed() {
            return Err(StatusRefusal::Closed);
        }
        let Some(token) = authorization.and_then(Self::status_token) else {
            return if self.metrics.is_none() && !self.required {
                Ok(())
            } else {
                Err(StatusRefusal::Unauthenticated)
            };
        };
        let mut header = b"Bearer ".to_vec();
        header.extend_from_slice(&token);
        if let Ok(principal) = self.authenticate(Some(&header), None) {
            return if principal.may_read(dataset) {
                Ok(())
            } else {
                Err(StatusRefusal::Forbidden)
            };
        }
        if self.metrics.is_some() && self.metrics_allowed(Some(&header)) {
            let allowed = match &self.metrics_scope {
                Scope::All => true,
                Scope::Only(d) => d.contains(dataset),
            };
            return if allowed { Ok(()) } else { Err(StatusRefusal::Forbidden) };
        }
        Err(StatusRefusal::Unauthenticated)
    }

    /// A tonic interceptor: authenticates and rate-limits every call, and attaches the
    /// [`Principal`] to the request for the service.
    pub fn interceptor(self: &Arc<Self>) -> impl tonic::service::Interceptor + Clone + use<> {
        self.intercept(true)
    }

    /// The Peer service's interceptor: authenticates, never rate-limits (a throttled
    /// replica would look dead to its peers and fetch from the store instead).
    pub fn peer_interceptor(self: &Arc<Self>) -> impl tonic::service::Interceptor + Clone + use<> {
        self.intercept(false)
    }

    fn intercept(self: &Arc<Self>, rate_limited: bool) -> impl tonic::service::Interceptor + Clone + use<> {
        let auth = self.clone();
        move |mut request: tonic::Request<()>| {
            let header = request.metadata().get("authorization").map(|v| v.as_bytes());
            let ip = super::connections::remote_addr(&request).map(|a| a.ip());
            let principal = if rate_limited {
                auth.admit(header, ip)
            } else {
                auth.authenticate(header, ip)
            }
            .map_err(|e| e.to_status())?;
            request.extensions_mut().insert(principal);
            Ok(request)
        }
    }
}

/// The token in `Bearer <token>` (scheme case-insensitive).
fn bearer(header: &[u8]) -> Result<&[u8]> {
    let bad = || Error::Unauthenticated("malformed authorization header: expected `Bearer <token>`".into());
    let text = std::str::from_utf8(header).map_err(|_| bad())?;
    let (scheme, token) = text.trim().split_once(' ').ok_or_else(bad)?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Err(bad());
    }
    Ok(token.as_bytes())
}

/// The password of an HTTP Basic `authorization` header (`Basic base64(user:password)`).
fn basic_password(header: &[u8]) -> Option<Vec<u8>> {
    use base64::Engine;
    let text = std::str::from_utf8(header).ok()?;
    let (scheme, value) = text.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD.decode(value.trim()).ok()?;
    let colon = decoded.iter().position(|&b| b == b':')?;
    let password = decoded[colon + 1..].to_vec();
    (!password.is_empty()).then_some(password)
}

fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Concurrent streams per job name.
#[derive(Debug)]
pub struct JobSlots {
    limit: usize,
    open: std::sync::Mutex<HashMap<String, usize>>,
}

/// A held job slot; dropping it frees the slot.
#[derive(Debug)]
pub struct JobSlot {
    slots: Arc<JobSlots>,
    job: String,
}

impl JobSlots {
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            limit,
            open: std::sync::Mutex::new(HashMap::new()),
        })
    }

    /// A slot for one more stream of `job`, or RESOURCE_EXHAUSTED.
    pub fn acquire(self: &Arc<Self>, job: &str) -> Result<JobSlot> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let n = open.entry(job.to_string()).or_insert(0);
        if *n >= self.limit {
            return Err(Error::LimitExceeded(format!(
                "too many concurrent streams for job {job:?} (limit {})",
                self.limit
            )));
        }
        *n += 1;
        Ok(JobSlot {
            slots: self.clone(),
            job: job.to_string(),
        })
    }
}

impl Drop for JobSlot {
    fn drop(&mut self) {
        let mut open = self.slots.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = open.get_mut(&self.job) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.job);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TokenConfig;

    fn sha(t: &str) -> String {
        hex::encode(Sha256::digest(t.as_bytes()))
    }

    impl Auth {
        fn authenticate_t(&self, h: Option<&[u8]>) -> Result<Principal> {
            self.authenticate(h, None)
        }
    }

    #[test]
    fn anonymous_callers_have_an_allowance_per_address() {
        let limits = LimitsConfig {
            max_streams_per_token: 1,
            requests_per_second: 1,
            ..LimitsConfig::default()
        };
        let a = Auth::new(&AuthConfig::default(), &limits).unwrap();
        let flooder: IpAddr = "127.0.0.2".parse().unwrap();
        let other: IpAddr = "127.0.0.3".parse().unwrap();
        let _held = a.authenticate(None, Some(flooder)).unwrap().stream_slot().unwrap();
        a.admit(None, Some(flooder)).unwrap();
        a.admit(None, Some(flooder)).unwrap();
        assert!(
            a.admit(None, Some(flooder)).is_err(),
            "the flooder spent its own allowance"
        );
        assert!(a.authenticate(None, Some(flooder)).unwrap().stream_slot().is_err());
        // Another address is not affected.
        a.admit(None, Some(other)).unwrap();
        let _slot = a.authenticate(None, Some(other)).unwrap().stream_slot().unwrap();
    }

    fn auth(required: bool) -> Auth {
        let config = AuthConfig {
            required,
            tokens: vec![
                TokenConfig {
                    sha256: sha("alpha-secret"),
                    datasets: vec!["demo".into()],
                    name: Some("alpha".into()),
                    max_streams: Some(1),
                    requests_per_second: Some(1),
                },
                TokenConfig {
                    sha256: sha("root-secret"),
                    datasets: vec!["*".into()],
                    name: None,
                    max_streams: None,
                    requests_per_second: None,
                },
            ],
            metrics_token_sha256: Some(sha("scrape")),
            metrics_datasets: None,
        };
        Auth::new(&config, &LimitsConfig::default()).unwrap()
    }

    #[test]
    fn previews_honour_dataset_scopes() {
        use StatusRefusal::*;
        use base64::Engine;
        let basic = |up: &str| format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(up));
        let a = auth(true);
        // A data token brings its scopes, as Bearer or as a Basic password.
        assert_eq!(a.preview_allowed(Some(b"Bearer alpha-secret"), "demo"), Ok(()));
        assert_eq!(a.preview_allowed(Some(b"Bearer alpha-secret"), "other"), Err(Forbidden));
        assert_eq!(
            a.preview_allowed(Some(basic("u:alpha-secret").as_bytes()), "other"),
            Err(Forbidden)
        );
        assert_eq!(
            a.preview_allowed(Some(basic("u:root-secret").as_bytes()), "other"),
            Ok(())
        );
        // With tokens required the metrics token previews nothing unless told which.
        assert_eq!(a.preview_allowed(Some(b"Bearer scrape"), "demo"), Err(Forbidden));
        assert_eq!(a.preview_allowed(None, "demo"), Err(Unauthenticated));
        assert_eq!(a.preview_allowed(Some(b"Bearer nope"), "demo"), Err(Unauthenticated));
        let scoped = Auth::new(
            &AuthConfig {
                metrics_datasets: Some(vec!["demo".into()]),
                ..scoped_config()
            },
            &LimitsConfig::default(),
        )
        .unwrap();
        assert_eq!(scoped.preview_allowed(Some(b"Bearer scrape"), "demo"), Ok(()));
        assert_eq!(scoped.preview_allowed(Some(b"Bearer scrape"), "other"), Err(Forbidden));
        // Tokens required and no metrics token: the status listener serves nobody.
        let closed = Auth::new(
            &AuthConfig {
                metrics_token_sha256: None,
                ..scoped_config()
            },
            &LimitsConfig::default(),
        )
        .unwrap();
        assert!(closed.status_closed());
        assert!(!closed.status_allowed(None));
        assert!(!closed.metrics_allowed(None));
        assert_eq!(
            closed.preview_allowed(Some(b"Bearer alpha-secret"), "demo"),
            Err(Closed)
        );
        // Open daemon: anyone sees the page, the metrics and every preview.
        let open = Auth::new(&AuthConfig::default(), &LimitsConfig::default()).unwrap();
        assert!(open.status_allowed(None) && open.metrics_allowed(None));
        assert_eq!(open.preview_allowed(None, "anything"), Ok(()));
    }

    fn scoped_config() -> AuthConfig {
        AuthConfig {
            required: true,
            tokens: vec![TokenConfig {
                sha256: sha("alpha-secret"),
                datasets: vec!["demo".into()],
                name: None,
                max_streams: None,
                requests_per_second: None,
            }],
            metrics_token_sha256: Some(sha("scrape")),
            metrics_datasets: None,
        }
    }

    #[test]
    fn tokens_scopes_and_errors() {
        let a = auth(true);
        let code = |r: Result<Principal>| r.unwrap_err().code();
        use crate::error::ErrorCode::*;
        assert_eq!(code(a.authenticate(None, None)), Unauthenticated);
        assert_eq!(code(a.authenticate_t(Some(b"Bearer nope"))), Unauthenticated);
        assert_eq!(code(a.authenticate_t(Some(b"Basic alpha-secret"))), Unauthenticated);
        assert_eq!(code(a.authenticate_t(Some(&[0xff, 0xfe]))), Unauthenticated);
        let alpha = a.authenticate_t(Some(b"bearer  alpha-secret ")).unwrap();
        assert!(alpha.may_read("demo") && !alpha.may_read("other"));
        let denied = alpha.check("other").unwrap_err();
        assert_eq!(denied.code(), PermissionDenied);
        assert!(denied.to_string().contains("alpha") && !denied.to_string().contains("secret"));
        let root = a.authenticate_t(Some(b"Bearer root-secret")).unwrap();
        assert!(root.may_read("anything"));
        assert_eq!(root.name(), "token \"token-2\"");
        // Open mode: no token is fine, a wrong one is not.
        let open = auth(false);
        assert!(open.authenticate(None, None).unwrap().may_read("x"));
        assert_eq!(code(open.authenticate_t(Some(b"Bearer nope"))), Unauthenticated);
    }

    #[test]
    fn limits_per_token() {
        let a = auth(true);
        let alpha = a.authenticate_t(Some(b"Bearer alpha-secret")).unwrap();
        let held = alpha.stream_slot().unwrap();
        assert_eq!(
            alpha.stream_slot().unwrap_err().code(),
            crate::error::ErrorCode::ResourceExhausted
        );
        drop(held);
        let _again = alpha.stream_slot().unwrap();
        // 1 per second with a burst of 2.
        a.admit(Some(b"Bearer alpha-secret"), None).unwrap();
        a.admit(Some(b"Bearer alpha-secret"), None).unwrap();
        let e = a.admit(Some(b"Bearer alpha-secret"), None).unwrap_err();
        assert!(e.to_string().contains("rate"), "{e}");
        // Other tokens are not affected.
        a.admit(Some(b"Bearer root-secret"), None).unwrap();
        let jobs = JobSlots::new(1);
        let j = jobs.acquire("train").unwrap();
        assert!(jobs.acquire("train").is_err());
        jobs.acquire("eval").unwrap();
        drop(j);
        jobs.acquire("train").unwrap();
    }

    #[test]
    fn metrics_token() {
        let a = auth(true);
        assert!(a.metrics_allowed(Some(b"Bearer scrape")));
        assert!(!a.metrics_allowed(Some(b"Bearer root-secret")));
        assert!(!a.metrics_allowed(None));
        // The status page also takes the token as a Basic password (any user name).
        use base64::Engine;
        let basic = |up: &str| format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(up));
        assert!(a.status_allowed(Some(basic("ops:scrape").as_bytes())));
        assert!(a.status_allowed(Some(b"Bearer scrape")));
        assert!(!a.status_allowed(Some(basic("ops:root-secret").as_bytes())));
        assert!(!a.status_allowed(Some(basic("scrape:").as_bytes())));
        assert!(!a.status_allowed(Some(b"Basic !!!")));
        assert!(!a.status_allowed(None));
    }
}
