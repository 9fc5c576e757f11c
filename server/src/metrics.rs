//! Every metric of the daemon, in one registry, with names and labels per docs/src/design/metrics.md:
//! `cogfeed_<subsystem>_<name>_<unit>`, base units, counters end in `_total`, durations are
//! `_seconds` histograms, labels are small closed sets. The `job` label is capped: past
//! `max_jobs` distinct values, new jobs are folded into `other`.

use std::collections::HashSet;
use std::sync::Mutex;

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

/// Latency buckets for store requests (1 ms to 30 s).
const STORE_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
/// Buckets for CPU stages (10 µs to 1 s).
const CPU_BUCKETS: &[f64] = &[
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

/// The daemon's metrics.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    jobs: Mutex<HashSet<String>>,
    max_jobs: usize,
    pub bytes_sent: IntCounterVec,
    pub patches_sent: IntCounterVec,
    pub batches_sent: IntCounterVec,
    pub queue_depth: IntGaugeVec,
    pub active_streams: IntGaugeVec,
    pub starved_seconds: prometheus::CounterVec,
    pub stream_errors: IntCounterVec,
    pub store_requests: IntCounterVec,
    pub store_bytes: IntCounterVec,
    pub store_retries: IntCounterVec,
    pub store_seconds: HistogramVec,
    pub store_in_flight: IntGaugeVec,
    /// Per store and bucket: the rate governor's request rate, throttle answers, waits.
    pub store_rate_limit: prometheus::GaugeVec,
    pub store_throttled: IntCounterVec,
    pub store_rate_wait_seconds: prometheus::CounterVec,
    pub peer_requests: IntCounterVec,
    pub peer_bytes: IntCounterVec,
    pub peer_seconds: HistogramVec,
    pub peer_up: IntGaugeVec,
    pub tiles_loaded: IntCounterVec,
    pub cache_hits: IntCounter,
    pub cache_misses: IntCounter,
    pub cache_coalesced: IntCounter,
    pub cache_evictions: IntCounter,
    pub cache_evictions_planned: IntCounter,
    pub plan_uses: IntGauge,
    pub cache_size_bytes: IntGauge,
    pub cache_capacity_bytes: IntGauge,
    /// The tiers below the decoded cache (`compressed` RAM, `disk`), by tier.
    pub tier_hits: IntCounterVec,
    pub tier_misses: IntCounterVec,
    pub tier_evictions: IntCounterVec,
    pub tier_size_bytes: IntGaugeVec,
    pub tier_capacity_bytes: IntGaugeVec,
    /// Tier entries dropped unserved or unwritten, by tier and reason (`corrupt`,
    /// `write_failed`, `backlog`).
    pub tier_discarded: IntCounterVec,
    /// Tiles (and their compressed bytes) fetched into the compressed tier ahead of their
    /// reads by streams' plans.
    pub prefetched_tiles: IntCounter,
    pub prefetched_bytes: IntCounter,
    /// Tiles decoded here and their decoded bytes, by extent (`whole`, or `top_rows`: a
    /// row-limited decode of a block's top rows).
    pub tiles_decoded: IntCounterVec,
    pub tiles_decoded_bytes: IntCounterVec,
    pub decode_seconds: HistogramVec,
    pub stage_seconds: HistogramVec,
    pub ready: IntGauge,
    /// Configured datasets that failed to open and are being retried.
    pub datasets_unready: IntGauge,
    pub samples_skipped: IntCounterVec,
    pub rejected_draws: IntCounterVec,
    pub balanced_class_pixels: IntCounterVec,
    /// Items whose `earthsearch:boa_offset_applied` contradicts their baseline.
    pub harmonize_disagreements: IntCounterVec,
    pub streams_stalled: IntCounterVec,
    pub client_data_wait_seconds: prometheus::CounterVec,
    pub memory_budget_bytes: IntGauge,
    pub memory_reserved_bytes: IntGauge,
    pub admission_refused: IntCounterVec,
    pub connections_open: IntGauge,
    pub connections_closed: IntCounterVec,
    pub cpu_jobs_queued: IntGauge,
    pub cpu_jobs_completed: IntCounter,
    pub cpu_jobs_skipped: IntCounter,
    pub cpu_busy_seconds: prometheus::Counter,
}

fn counter_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let m = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
    r.register(Box::new(m.clone())).expect("unique metric");
    m
}

fn gauge_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let m = IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric");
    r.register(Box::new(m.clone())).expect("unique metric");
    m
}

fn histogram_vec(r: &Registry, name: &str, help: &str, labels: &[&str], buckets: &[f64]) -> HistogramVec {
    let m = HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets.to_vec()), labels).expect("valid metric");
    r.register(Box::new(m.clone())).expect("unique metric");
    m
}

fn counter(r: &Registry, name: &str, help: &str) -> IntCounter {
    let m = IntCounter::new(name, help).expect("valid metric");
    r.register(Box::new(m.clone())).expect("unique metric");
    m
}

fn gauge(r: &Registry, name: &str, help: &str) -> IntGauge {
    let m = IntGauge::new(name, help).expect("valid metric");
    r.register(Box::new(m.clone())).expect("unique metric");
    m
}

impl Metrics {
    /// A fresh registry (one per daemon; tests make several) with `max_jobs` job labels.
    #[allow(clippy::expect_used)] // metric definitions are static: a failure is a bug at start-up
    pub fn new(max_jobs: usize) -> Self {
        let r = Registry::new();
        #[cfg(target_os = "linux")]
        {
            let _ = r.register(Box::new(prometheus::process_collector::ProcessCollector::for_self()));
        }
        let dj = &["dataset", "job"];
        let starved = prometheus::CounterVec::new(
            Opts::new(
                "cogfeed_stream_starved_seconds_total",
                "Time streams were ready to send a batch and had none queued (the data-stall signal)",
            ),
            dj,
        )
        .expect("valid metric");
        r.register(Box::new(starved.clone())).expect("unique metric");
        let data_wait = prometheus::CounterVec::new(
            Opts::new(
                "cogfeed_client_data_wait_seconds_total",
                "Time training loops waited for data, as their clients report it at each stream open",
            ),
            dj,
        )
        .expect("valid metric");
        r.register(Box::new(data_wait.clone())).expect("unique metric");
        Self {
            samples_skipped: counter_vec(
                &r,
                "cogfeed_samples_skipped_total",
                "Samples left out of their batch under on_corrupt = skip, by reason (corrupt, missing)",
                &["dataset", "reason"],
            ),
            rejected_draws: counter_vec(
                &r,
                "cogfeed_rejected_draws_total",
                "Sample draws rejected and redrawn, by reason (split: footprint outside the requested split; valid: under min_valid_fraction; series: a time layer missing a date under require_full_series)",
                &["reason"],
            ),
            balanced_class_pixels: counter_vec(
                &r,
                "cogfeed_balanced_class_pixels_total",
                "Class-layer pixels delivered by balanced streams, by dataset and class (of [datasets.balance]): the achieved proportions, beside DescribeDataset's targets",
                &["dataset", "class"],
            ),
            harmonize_disagreements: counter_vec(
                &r,
                "cogfeed_harmonize_disagreements_total",
                "Items of a dataset with a harmonised layer whose earthsearch:boa_offset_applied is true on a Sentinel-2 processing baseline before 04.00 (the baseline wins), counted once per Item when the dataset first streams",
                &["dataset"],
            ),
            streams_stalled: counter_vec(
                &r,
                "cogfeed_stream_stalled_total",
                "Streams ended because their client read nothing for limits.stall_timeout_secs",
                dj,
            ),
            client_data_wait_seconds: data_wait,
            memory_budget_bytes: gauge(
                &r,
                "cogfeed_memory_budget_bytes",
                "The daemon-wide budget for request-sized memory (limits.memory_budget_bytes)",
            ),
            memory_reserved_bytes: gauge(
                &r,
                "cogfeed_memory_reserved_bytes",
                "Request-sized memory admitted now (streams, look-ahead, ReadWindow)",
            ),
            admission_refused: counter_vec(
                &r,
                "cogfeed_admission_refused_total",
                "Calls refused by a limit, by limit (memory, streams, caller, job, rate)",
                &["limit"],
            ),
            connections_open: gauge(&r, "cogfeed_connections_open", "gRPC connections open now"),
            cpu_jobs_queued: gauge(
                &r,
                "cogfeed_cpu_jobs_queued",
                "CPU jobs (decodes, warps, assembly) waiting for a worker now",
            ),
            cpu_jobs_completed: counter(&r, "cogfeed_cpu_jobs_completed_total", "CPU jobs run to the end"),
            cpu_jobs_skipped: counter(
                &r,
                "cogfeed_cpu_jobs_skipped_total",
                "CPU jobs dropped unstarted because their stream had ended",
            ),
            cpu_busy_seconds: {
                let c = prometheus::Counter::new(
                    "cogfeed_cpu_busy_seconds_total",
                    "Time CPU jobs ran, summed over the pool's threads",
                )
                .expect("valid metric");
                r.register(Box::new(c.clone())).expect("unique metric");
                c
            },
            connections_closed: counter_vec(
                &r,
                "cogfeed_connections_closed_total",
                "gRPC connections closed by the server, by reason (idle, evicted, stalled)",
                &["reason"],
            ),
            bytes_sent: counter_vec(
                &r,
                "cogfeed_stream_sent_bytes_total",
                "Tensor bytes sent to clients",
                dj,
            ),
            patches_sent: counter_vec(
                &r,
                "cogfeed_stream_patches_total",
                "Patches (samples) sent to clients",
                dj,
            ),
            batches_sent: counter_vec(&r, "cogfeed_stream_batches_total", "Batches sent to clients", dj),
            queue_depth: gauge_vec(
                &r,
                "cogfeed_stream_queue_depth_batches",
                "Batches ready and queued towards clients",
                dj,
            ),
            active_streams: gauge_vec(&r, "cogfeed_stream_active", "Streams open now", dj),
            starved_seconds: starved,
            stream_errors: counter_vec(
                &r,
                "cogfeed_stream_errors_total",
                "Streams ended by an error, by gRPC code",
                &["dataset", "job", "code"],
            ),
            store_requests: counter_vec(
                &r,
                "cogfeed_store_requests_total",
                "Object-store requests by store, operation and result",
                &["store", "op", "result"],
            ),
            store_bytes: counter_vec(
                &r,
                "cogfeed_store_bytes_total",
                "Bytes read from object stores",
                &["store", "op"],
            ),
            store_retries: counter_vec(
                &r,
                "cogfeed_store_retries_total",
                "Object-store HTTP attempts repeated by the store client, by cause (5xx, throttled, timeout, connect, body, transport)",
                &["store", "reason"],
            ),
            store_seconds: histogram_vec(
                &r,
                "cogfeed_store_request_duration_seconds",
                "Object-store request latency (incl. retries)",
                &["store", "op"],
                STORE_BUCKETS,
            ),
            store_in_flight: gauge_vec(
                &r,
                "cogfeed_store_in_flight_requests",
                "Object-store requests in flight",
                &["store"],
            ),
            store_rate_limit: {
                let m = prometheus::GaugeVec::new(
                    Opts::new(
                        "cogfeed_store_rate_limit_per_second",
                        "The rate governor's request rate per store and bucket (AIMD on 503/429)",
                    ),
                    &["store", "bucket"],
                )
                .expect("valid metric");
                r.register(Box::new(m.clone())).expect("unique metric");
                m
            },
            store_throttled: counter_vec(
                &r,
                "cogfeed_store_throttled_total",
                "Store answers that asked for less (503 SlowDown/ServerBusy, 429), per store and bucket",
                &["store", "bucket"],
            ),
            store_rate_wait_seconds: {
                let m = prometheus::CounterVec::new(
                    Opts::new(
                        "cogfeed_store_rate_wait_seconds_total",
                        "Time store requests waited for the rate governor, per store and bucket",
                    ),
                    &["store", "bucket"],
                )
                .expect("valid metric");
                r.register(Box::new(m.clone())).expect("unique metric");
                m
            },
            peer_requests: counter_vec(
                &r,
                "cogfeed_peer_requests_total",
                "Tile requests between replicas, by peer, direction (out = we asked, in = we served) and result",
                &["peer", "direction", "result"],
            ),
            peer_bytes: counter_vec(
                &r,
                "cogfeed_peer_bytes_total",
                "Decoded tile bytes between replicas, by peer and direction",
                &["peer", "direction"],
            ),
            peer_seconds: histogram_vec(
                &r,
                "cogfeed_peer_request_duration_seconds",
                "Latency of tile requests to peers (incl. retries)",
                &["peer"],
                STORE_BUCKETS,
            ),
            peer_up: gauge_vec(
                &r,
                "cogfeed_peer_up",
                "1 while a peer is a live member (0: skipped after failures, until its cooldown ends)",
                &["peer"],
            ),
            tiles_loaded: counter_vec(
                &r,
                "cogfeed_tiles_loaded_total",
                "Tiles loaded into this replica's caches, by source: store, compressed or disk (bytes decoded here), peer (decoded by their owner)",
                &["source"],
            ),
            cache_hits: counter(&r, "cogfeed_cache_hits_total", "Tile cache hits"),
            tiles_decoded: counter_vec(
                &r,
                "cogfeed_tiles_decoded_total",
                "Tiles decoded into this replica's cache, by extent: whole, or top_rows (only the block's top rows a window needs, a row-limited decode)",
                &["extent"],
            ),
            tiles_decoded_bytes: counter_vec(
                &r,
                "cogfeed_tiles_decoded_bytes_total",
                "Decoded bytes of the tiles decoded into this replica's cache, by extent (whole, top_rows)",
                &["extent"],
            ),
            prefetched_tiles: counter(
                &r,
                "cogfeed_prefetched_tiles_total",
                "Tiles whose compressed bytes a stream's plan fetched into the compressed tier ahead of their read",
            ),
            prefetched_bytes: counter(
                &r,
                "cogfeed_prefetched_bytes_total",
                "Compressed bytes fetched ahead of their read by streams' plans",
            ),
            cache_misses: counter(
                &r,
                "cogfeed_cache_misses_total",
                "Tile cache misses (each one fetch and one decode)",
            ),
            cache_coalesced: counter(
                &r,
                "cogfeed_cache_coalesced_waits_total",
                "Requests that waited for another request's load of the same tile (single-flight)",
            ),
            cache_evictions: counter(
                &r,
                "cogfeed_cache_evictions_total",
                "Tiles evicted to stay within capacity",
            ),
            cache_evictions_planned: counter(
                &r,
                "cogfeed_cache_evictions_planned_total",
                "Tiles evicted that an open stream's plan still needed (the cache is smaller than the plans)",
            ),
            plan_uses: gauge(
                &r,
                "cogfeed_plan_uses",
                "Tile reads open streams have published in their plans and not yet made",
            ),
            cache_size_bytes: gauge(&r, "cogfeed_cache_size_bytes", "Decoded bytes held by the tile cache"),
            cache_capacity_bytes: gauge(&r, "cogfeed_cache_capacity_bytes", "Capacity of the tile cache"),
            tier_hits: counter_vec(
                &r,
                "cogfeed_cache_tier_hits_total",
                "Compressed tiles found in a tier below the decoded cache (compressed, disk)",
                &["tier"],
            ),
            tier_misses: counter_vec(
                &r,
                "cogfeed_cache_tier_misses_total",
                "Compressed tiles looked up in a tier and not found there",
                &["tier"],
            ),
            tier_evictions: counter_vec(
                &r,
                "cogfeed_cache_tier_evictions_total",
                "Compressed tiles evicted from a tier to stay within its capacity",
                &["tier"],
            ),
            tier_size_bytes: gauge_vec(
                &r,
                "cogfeed_cache_tier_size_bytes",
                "Compressed bytes held by a tier",
                &["tier"],
            ),
            tier_capacity_bytes: gauge_vec(
                &r,
                "cogfeed_cache_tier_capacity_bytes",
                "Capacity of a tier in bytes",
                &["tier"],
            ),
            tier_discarded: counter_vec(
                &r,
                "cogfeed_cache_tier_discarded_total",
                "Tier entries dropped: corrupt (a torn or damaged file, never served), write_failed, backlog (writes skipped while the disk lags)",
                &["tier", "reason"],
            ),
            decode_seconds: histogram_vec(
                &r,
                "cogfeed_decode_duration_seconds",
                "Time to decode one tile, by codec",
                &["codec"],
                CPU_BUCKETS,
            ),
            stage_seconds: histogram_vec(
                &r,
                "cogfeed_pipeline_stage_duration_seconds",
                "CPU time per sample by pipeline stage (assemble, transform)",
                &["stage"],
                CPU_BUCKETS,
            ),
            ready: gauge(&r, "cogfeed_ready", "1 when the catalog is open and the daemon serves"),
            datasets_unready: gauge(
                &r,
                "cogfeed_datasets_unready",
                "Configured datasets that failed to open and are retried in the background",
            ),
            registry: r,
            jobs: Mutex::new(HashSet::new()),
            max_jobs,
        }
    }

    /// The `job` label value for `job`: itself while fewer than `max_jobs` distinct jobs have
    /// been seen (empty → `none`), `other` after that.
    pub fn job_label(&self, job: &str) -> String {
        let job = if job.is_empty() { "none" } else { job };
        let Ok(mut seen) = self.jobs.lock() else {
            return "other".into();
        };
        if seen.contains(job) {
            return job.to_string();
        }
        if seen.len() < self.max_jobs {
            seen.insert(job.to_string());
            return job.to_string();
        }
        "other".into()
    }

    /// Brings the CPU pool's figures (kept by `cogfeed-cpu`) into the registry.
    pub fn refresh_cpu(&self) {
        let s = cogfeed_cpu::stats();
        self.cpu_jobs_queued.set(s.queued as i64);
        self.cpu_jobs_completed
            .inc_by(s.completed.saturating_sub(self.cpu_jobs_completed.get()));
        self.cpu_jobs_skipped
            .inc_by(s.skipped.saturating_sub(self.cpu_jobs_skipped.get()));
        let busy = s.busy_ns as f64 / 1e9 - self.cpu_busy_seconds.get();
        if busy > 0.0 {
            self.cpu_busy_seconds.inc_by(busy);
        }
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        self.refresh_cpu();
        let mut buf = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }
}

/// Observes the elapsed time of a scope into a histogram when dropped.
pub struct Timer(Option<prometheus::HistogramTimer>);

impl Timer {
    /// Starts timing into `h`.
    pub fn start(h: &Histogram) -> Self {
        Self(Some(h.start_timer()))
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        if let Some(t) = self.0.take() {
            t.observe_duration();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_labels_are_capped() {
        let m = Metrics::new(2);
        assert_eq!(m.job_label("a"), "a");
        assert_eq!(m.job_label(""), "none");
        assert_eq!(m.job_label("b"), "other");
        assert_eq!(m.job_label("a"), "a");
    }

    #[test]
    fn renders_the_names() {
        let m = Metrics::new(4);
        m.batches_sent.with_label_values(&["demo", "j"]).inc();
        let text = m.render();
        assert!(text.contains("cogfeed_stream_batches_total{dataset=\"demo\",job=\"j\"} 1"));
        assert!(text.contains("cogfeed_cache_capacity_bytes"));
    }
}
