//! One `StreamBatches` response: the bounded queue from the pipeline, metered out to the
//! client (bytes, patches, batches, queue depth, starved time, errors, active streams).
//!
//! The stream's slots (daemon, caller, job) and its memory reservation live in a
//! [`StreamLease`] shared with the pipeline's [`QueueObserver`]: they are returned when the
//! client goes away, and also when the client stops reading for the stall timeout, since a
//! stream that is not read is never polled again. Then the connection it came on is closed
//! (the only way to free what HTTP/2 holds for a client that does not read), and its calls
//! end; clients resume from their cursor.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use futures::Stream;
use futures::task::AtomicWaker;
use prometheus::IntGauge;
use tokio::sync::mpsc;
use tonic::Status;

use cogfeed_proto::v1 as pb;

use crate::dataset::Catalog;
use crate::error::Error;
use crate::metrics::Metrics;
use crate::pipeline::{BatchOut, QueueObserver, Skipped};
use cogfeed_tiff::{ReadError, TiffError};

use super::connections::ConnState;
use super::convert;
use crate::api::live::LiveEntry;

/// What an open stream holds: its slots and memory, and how to end it from the pipeline.
pub struct StreamLease {
    /// Slots and memory, taken (returned) on stall or drop.
    held: Mutex<Option<Box<dyn Send>>>,
    /// The connection the stream came on (closed on stall).
    conn: Option<Arc<ConnState>>,
    stalled: AtomicBool,
    stalled_cursor: AtomicU64,
    waker: AtomicWaker,
}

impl StreamLease {
    pub fn new(held: Box<dyn Send>, conn: Option<Arc<ConnState>>) -> Arc<Self> {
        Arc::new(Self {
            held: Mutex::new(Some(held)),
            conn,
            stalled: AtomicBool::new(false),
            stalled_cursor: AtomicU64::new(0),
            waker: AtomicWaker::new(),
        })
    }

    fn release(&self) {
        let held = self.held.lock().map(|mut h| h.take()).unwrap_or_default();
        drop(held);
    }
}

/// The pipeline's view of the stream: queue depth into the job's gauge, skipped samples,
/// and the stall. After the stream closes, late pushes no longer touch the gauge.
pub struct StreamQueue {
    gauge: IntGauge,
    /// Batches counted into the gauge, and whether the stream has closed.
    state: Mutex<(i64, bool)>,
    lease: Arc<StreamLease>,
    metrics: Arc<Metrics>,
    labels: [String; 2],
    stall_secs: f64,
    span: tracing::Span,
}

impl StreamQueue {
    pub fn new(
        metrics: Arc<Metrics>,
        labels: [String; 2],
        lease: Arc<StreamLease>,
        stall_secs: f64,
        span: tracing::Span,
    ) -> Self {
        Self {
            gauge: metrics
                .queue_depth
                .with_label_values(&[labels[0].as_str(), labels[1].as_str()]),
            state: Mutex::new((0, false)),
            lease,
            metrics,
            labels,
            stall_secs,
            span,
        }
    }

    fn change(&self, delta: i64) {
        if let Ok(mut st) = self.state.lock()
            && !st.1
        {
            st.0 += delta;
            self.gauge.add(delta);
        }
    }

    fn close(&self) {
        if let Ok(mut st) = self.state.lock() {
            self.gauge.sub(st.0);
            *st = (0, true);
        }
    }
}

impl QueueObserver for StreamQueue {
    fn pushed(&self) {
        self.change(1);
    }

    fn unpushed(&self) {
        self.change(-1);
    }

    fn stalled(&self, cursor: u64) {
        tracing::warn!(
            parent: &self.span,
            stall_timeout_secs = self.stall_secs,
            cursor,
            "client read nothing for the stall timeout: ending its stream and closing its connection"
        );
        self.metrics
            .streams_stalled
            .with_label_values(&[self.labels[0].as_str(), self.labels[1].as_str()])
            .inc();
        let lease = &self.lease;
        lease.stalled_cursor.store(cursor, Ordering::Relaxed);
        lease.stalled.store(true, Ordering::Release);
        self.close();
        lease.release();
        lease.waker.wake();
        if let Some(conn) = &lease.conn {
            self.metrics.connections_closed.with_label_values(&["stalled"]).inc();
            conn.close();
        }
    }

    fn skipped(&self, s: &Skipped, error: &Error) {
        self.metrics
            .samples_skipped
            .with_label_values(&[self.labels[0].as_str(), s.reason])
            .inc();
        tracing::warn!(
            parent: &self.span,
            sample = s.sample,
            scene = s.window.scene,
            col = s.window.col,
            row = s.window.row,
            level = s.window.level,
            reason = s.reason,
            error = %error,
            "sample skipped (on_corrupt = skip)"
        );
    }
}

/// The response stream of one `StreamBatches` call. Dropping it (client gone) returns the
/// stream's slots, memory and gauges.
pub struct MeteredStream {
    rx: mpsc::Receiver<Result<BatchOut, Error>>,
    catalog: Arc<Catalog>,
    queue: Arc<StreamQueue>,
    lease: Arc<StreamLease>,
    metrics: Arc<Metrics>,
    labels: [String; 2],
    waiting_since: Option<Instant>,
    active: IntGauge,
    done: bool,
    span: tracing::Span,
    /// The stream's entry on the status page.
    live: Option<LiveEntry>,
}

impl MeteredStream {
    pub fn new(
        rx: mpsc::Receiver<Result<BatchOut, Error>>,
        catalog: Arc<Catalog>,
        queue: Arc<StreamQueue>,
        lease: Arc<StreamLease>,
        metrics: Arc<Metrics>,
        labels: [String; 2],
        span: tracing::Span,
    ) -> Self {
        let active = metrics
            .active_streams
            .with_label_values(&[labels[0].as_str(), labels[1].as_str()]);
        active.inc();
        Self {
            rx,
            catalog,
            queue,
            lease,
            metrics,
            labels,
            waiting_since: None,
            active,
            done: false,
            span,
            live: None,
        }
    }

    /// Lists the stream on the status page for as long as it lives.
    pub fn listed(mut self, live: LiveEntry) -> Self {
        self.live = Some(live);
        self
    }

    fn failed(&self, e: Error) -> Status {
        if matches!(
            &e,
            Error::Tiff {
                source: TiffError::Read(ReadError::Changed),
                ..
            }
        ) {
            // An object of the dataset was replaced: re-open the dataset so the next
            // streams read the new version.
            let (catalog, name) = (self.catalog.clone(), self.labels[0].clone());
            tokio::spawn(async move {
                if let Err(e) = catalog.refresh(&name).await {
                    tracing::warn!(dataset = %name, error = %e, "dataset refresh failed");
                }
            });
        }
        let status = e.to_status_in(&format!("dataset {}", self.labels[0]));
        self.count_error(status.code());
        tracing::warn!(parent: &self.span, error = %e, "stream failed");
        status
    }

    fn count_error(&self, code: tonic::Code) {
        let code = format!("{code:?}");
        self.metrics
            .stream_errors
            .with_label_values(&[self.labels[0].as_str(), self.labels[1].as_str(), code.as_str()])
            .inc();
    }
}

impl Stream for MeteredStream {
    type Item = Result<pb::Batch, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        self.lease.waker.register(cx.waker());
        if self.lease.stalled.load(Ordering::Acquire) {
            self.done = true;
            self.rx.close();
            let cursor = self.lease.stalled_cursor.load(Ordering::Relaxed);
            let status = Error::Stalled {
                secs: self.queue.stall_secs,
                cursor,
            }
            .to_status();
            self.count_error(status.code());
            return Poll::Ready(Some(Err(status)));
        }
        match self.rx.poll_recv(cx) {
            Poll::Pending => {
                // The transport asked for the next batch and none is ready: starved.
                if self.waiting_since.is_none() {
                    self.waiting_since = Some(Instant::now());
                }
                Poll::Pending
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Ready(Some(item)) => {
                let waited = self.waiting_since.take();
                let this = &*self;
                let labels = [this.labels[0].as_str(), this.labels[1].as_str()];
                if let Some(t) = waited {
                    let secs = t.elapsed().as_secs_f64();
                    this.metrics.starved_seconds.with_label_values(&labels).inc_by(secs);
                    if let Some(l) = &this.live {
                        l.stream.starved(secs);
                    }
                }
                Poll::Ready(Some(match item {
                    Ok(batch) => {
                        this.queue.unpushed();
                        let bytes = batch.image.data.len()
                            + batch.label.as_ref().map_or(0, |l| l.data.len())
                            + batch.layers.iter().map(|(_, t)| t.data.len()).sum::<usize>();
                        if let Some(l) = &this.live {
                            l.stream.sent(bytes as u64, batch.cursor);
                        }
                        this.metrics.bytes_sent.with_label_values(&labels).inc_by(bytes as u64);
                        this.metrics
                            .patches_sent
                            .with_label_values(&labels)
                            .inc_by(batch.windows.len() as u64);
                        this.metrics.batches_sent.with_label_values(&labels).inc();
                        Ok(convert::batch(batch))
                    }
                    Err(e) => Err(this.failed(e)),
                }))
            }
        }
    }
}

impl Drop for MeteredStream {
    fn drop(&mut self) {
        self.active.dec();
        self.queue.close();
        self.lease.release();
        tracing::debug!(parent: &self.span, "stream closed");
    }
}
