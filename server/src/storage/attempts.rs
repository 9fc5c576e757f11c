//! Every HTTP attempt a store client makes, seen from inside `object_store`.
//!
//! `object_store` retries 5xx answers, time-outs, dropped connections and interrupted bodies
//! on its own and reports only the final outcome. [`CountingConnector`] wraps its HTTP
//! client and notes each attempt's outcome in a task-local log; [`observe`] collects that
//! log around one logical request, so the caller can count retries and their causes.
//! Each attempt first waits for the store's [`RateGovernor`] and tells it how it was
//! answered.

use std::cell::RefCell;
use std::future::Future;
use std::sync::Arc;

use super::rate::RateGovernor;

use object_store::ClientOptions;
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpResponse, HttpService, ReqwestConnector,
};

tokio::task_local! {
    static LOG: RefCell<Vec<Attempt>>;
}

/// One HTTP attempt: the path it asked for and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// The request's URL path (still percent-encoded).
    pub path: String,
    pub outcome: Outcome,
}

/// How one HTTP attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Any answer that is not a retryable error status (the body may still fail later).
    Answered,
    /// 5xx from the store.
    ServerError,
    /// 429 or 408.
    Throttled,
    /// No answer in time.
    Timeout,
    /// Could not connect or send.
    Connect,
    /// Any other transport failure.
    Transport,
}

impl Outcome {
    /// The metric label for a retry caused by an attempt that ended this way: an attempt
    /// that was answered and retried all the same lost its body half-way.
    pub fn retry_reason(self) -> &'static str {
        match self {
            Outcome::Answered => "body",
            Outcome::ServerError => "5xx",
            Outcome::Throttled => "throttled",
            Outcome::Timeout => "timeout",
            Outcome::Connect => "connect",
            Outcome::Transport => "transport",
        }
    }
}

/// Runs `request` and returns its output with every HTTP attempt it made, in order
/// (credential fetches included: filter by path). Stores without HTTP (local files, memory)
/// make none.
pub async fn observe<F: Future>(request: F) -> (F::Output, Vec<Attempt>) {
    LOG.scope(RefCell::new(Vec::new()), async move {
        let out = request.await;
        let log = LOG.with(|l| l.take());
        (out, log)
    })
    .await
}

fn note(path: &str, outcome: Outcome) {
    // Outside `observe` (listing, HEAD at start-up) nothing is collected.
    let _ = LOG.try_with(|l| {
        l.borrow_mut().push(Attempt {
            path: path.to_string(),
            outcome,
        })
    });
}

/// The default reqwest connector, with every attempt noted (and paced by `governor`).
#[derive(Debug, Default)]
pub struct CountingConnector {
    /// The store's governor (None: unpaced).
    pub governor: Option<Arc<RateGovernor>>,
    /// Told of every 403 (its SAS token is then refreshed before the next request).
    pub on_denied: Option<Arc<super::pc_sign::PcSigner>>,
}

impl HttpConnector for CountingConnector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let inner = ReqwestConnector::default().connect(options)?;
        Ok(HttpClient::new(Counting {
            inner,
            governor: self.governor.clone(),
            on_denied: self.on_denied.clone(),
        }))
    }
}

#[derive(Debug)]
struct Counting {
    inner: HttpClient,
    governor: Option<Arc<RateGovernor>>,
    on_denied: Option<Arc<super::pc_sign::PcSigner>>,
}

#[async_trait::async_trait]
impl HttpService for Counting {
    async fn call(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        let path = req.uri().path().to_string();
        if let Some(g) = &self.governor {
            g.admit().await;
        }
        let result = self.inner.execute(req).await;
        if let Some(g) = &self.governor {
            g.answered(matches!(&result, Ok(r) if matches!(r.status().as_u16(), 503 | 429)));
        }
        if let (Some(s), Ok(r)) = (&self.on_denied, &result)
            && r.status().as_u16() == 403
        {
            s.invalidate();
        }
        note(
            &path,
            match &result {
                Ok(r) if r.status().is_server_error() => Outcome::ServerError,
                Ok(r) if r.status().as_u16() == 429 || r.status().as_u16() == 408 => Outcome::Throttled,
                Ok(_) => Outcome::Answered,
                Err(e) => match e.kind() {
                    HttpErrorKind::Timeout => Outcome::Timeout,
                    HttpErrorKind::Connect | HttpErrorKind::Request => Outcome::Connect,
                    _ => Outcome::Transport,
                },
            },
        );
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn outcomes_are_collected_only_inside_observe() {
        note("/b/x.tif", Outcome::Timeout);
        let ((), log) = observe(async {
            note("/b/x.tif", Outcome::ServerError);
            note("/b/x.tif", Outcome::Answered);
        })
        .await;
        let outcomes: Vec<_> = log.iter().map(|a| a.outcome).collect();
        assert_eq!(outcomes, vec![Outcome::ServerError, Outcome::Answered]);
        assert_eq!(log[0].outcome.retry_reason(), "5xx");
        assert_eq!(log[1].path, "/b/x.tif");
    }
}
