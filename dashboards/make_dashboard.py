#!/usr/bin/env python3
"""Writes dashboards/cogfeed.json (Grafana dashboard) from the panel list below, so panels,
their PromQL and dashboards/README.md stay in one place. Run after editing:
python3 dashboards/make_dashboard.py
"""
import json
import os

SEL = 'dataset=~"$dataset",job=~"$job"'
PROC = 'job=~"$scrape_job"'


def q(expr, legend):
    return {"expr": expr, "legend": legend}


# (title, unit, description, [queries])
PANELS = [
    ("Throughput", "Bps", "Tensor bytes sent to clients per second, per training job.",
     [q(f'sum by (job) (rate(cogfeed_stream_sent_bytes_total{{{SEL}}}[$__rate_interval]))', "{{job}}")]),
    ("Batches per second", "ops", "Batches sent per second, per job.",
     [q(f'sum by (job) (rate(cogfeed_stream_batches_total{{{SEL}}}[$__rate_interval]))', "{{job}}")]),
    ("Stall fraction", "percentunit",
     "Share of time a job's streams were ready to send and had no batch queued (data stall). Near 0 is healthy; near 1 means training waits on data.",
     [q(f'sum by (job) (rate(cogfeed_stream_starved_seconds_total{{{SEL}}}[$__rate_interval])) / clamp_min(sum by (job) (cogfeed_stream_active{{{SEL}}}), 1)', "{{job}}")]),
    ("Trainer data wait (client-reported)", "percentunit",
     "Share of wall time training loops waited for data, as their clients report it at each stream open: the trainer-side stall, beside the server-side stall fraction.",
     [q(f'sum by (job) (rate(cogfeed_client_data_wait_seconds_total{{{SEL}}}[$__rate_interval]))', "{{job}}")]),
    ("Queue depth", "short", "Batches ready and queued towards clients, per job. Full queues mean clients read slower than the daemon produces.",
     [q(f'sum by (job) (cogfeed_stream_queue_depth_batches{{{SEL}}})', "{{job}}")]),
    ("Active streams", "short", "Streams open now, per job.",
     [q(f'sum by (job) (cogfeed_stream_active{{{SEL}}})', "{{job}}")]),
    ("Stream errors", "ops", "Streams ended by an error per second, by gRPC code.",
     [q(f'sum by (code) (rate(cogfeed_stream_errors_total{{{SEL}}}[$__rate_interval])) or sum(rate(cogfeed_stream_batches_total{{{SEL}}}[$__rate_interval])) * 0', "{{code}}")]),
    ("Cache hit ratio", "percentunit", "Tile cache hits / (hits + misses).",
     [q('sum(rate(cogfeed_cache_hits_total[$__rate_interval])) / clamp_min(sum(rate(cogfeed_cache_hits_total[$__rate_interval])) + sum(rate(cogfeed_cache_misses_total[$__rate_interval])), 1e-9)', "hit ratio")]),
    ("Cache size", "bytes", "Decoded bytes held by the tile cache against its capacity.",
     [q('sum(cogfeed_cache_size_bytes)', "size"), q('sum(cogfeed_cache_capacity_bytes)', "capacity")]),
    ("Cache evictions and single-flight waits", "ops",
     "Tiles evicted per second (sustained evictions with a low hit ratio = thrash), those an open stream's plan still needed (the cache is smaller than the plans), and requests that waited for another request's load of the same tile.",
     [q('sum(rate(cogfeed_cache_evictions_total[$__rate_interval]))', "evictions"),
      q('sum(rate(cogfeed_cache_evictions_planned_total[$__rate_interval]))', "evicted while planned"),
      q('sum(rate(cogfeed_cache_coalesced_waits_total[$__rate_interval]))', "single-flight waits")]),
    ("Tiles loaded by source", "ops",
     "Tiles decoded into the cache per second by where their bytes came from: store (a GET), compressed or disk (a tier below the decoded cache: no GET), peer (a fleet's owner decoded it).",
     [q('sum by (source) (rate(cogfeed_tiles_loaded_total[$__rate_interval])) or sum(rate(cogfeed_stream_batches_total[$__rate_interval])) * 0', "{{source}}")]),
    ("Tiles decoded by extent", "ops",
     "Tiles decoded per second: whole blocks, and top_rows, row-limited decodes of only a block's top rows (a footprint that spills a few rows over a tile's upper edge; a sixteenth of a tile or so). Decoded bytes in cogfeed_tiles_decoded_bytes_total.",
     [q('sum by (extent) (rate(cogfeed_tiles_decoded_total[$__rate_interval]))', "{{extent}}")]),
    ("Cache tiers: hits and misses", "ops",
     "Lookups per second in the tiers below the decoded cache (compressed RAM, disk): a hit costs a decode instead of a GET. Corrupt disk entries are deleted and counted, never served.",
     [q('sum by (tier) (rate(cogfeed_cache_tier_hits_total[$__rate_interval])) or sum(rate(cogfeed_stream_batches_total[$__rate_interval])) * 0', "hits {{tier}}"),
      q('sum by (tier) (rate(cogfeed_cache_tier_misses_total[$__rate_interval])) or sum(rate(cogfeed_stream_batches_total[$__rate_interval])) * 0', "misses {{tier}}"),
      q('sum by (tier, reason) (rate(cogfeed_cache_tier_discarded_total[$__rate_interval])) or sum(rate(cogfeed_stream_batches_total[$__rate_interval])) * 0', "discarded {{tier}} {{reason}}")]),
    ("Cache tiers: size", "bytes", "Compressed bytes each tier holds against its capacity (compressed_bytes, disk_bytes).",
     [q('sum by (tier) (cogfeed_cache_tier_size_bytes) or sum by (tier) (cogfeed_cache_tier_capacity_bytes) * 0', "size {{tier}}"),
      q('sum by (tier) (cogfeed_cache_tier_capacity_bytes)', "capacity {{tier}}")]),
    ("Store requests", "reqps", "Object-store requests per second by store, operation and result.",
     [q('sum by (store, op, result) (rate(cogfeed_store_requests_total[$__rate_interval]))', "{{store}} {{op}} {{result}}")]),
    ("Store latency p50 / p99", "s", "Object-store request latency including retries.",
     [q('histogram_quantile(0.5, sum by (le, store) (rate(cogfeed_store_request_duration_seconds_bucket[$__rate_interval])))', "p50 {{store}}"),
      q('histogram_quantile(0.99, sum by (le, store) (rate(cogfeed_store_request_duration_seconds_bucket[$__rate_interval])))', "p99 {{store}}")]),
    ("Store errors", "reqps", "Failed object-store requests per second (after retries), by store.",
     [q('sum by (store) (rate(cogfeed_store_requests_total{result!="ok"}[$__rate_interval])) or sum by (store) (rate(cogfeed_store_requests_total[$__rate_interval])) * 0', "{{store}}")]),
    ("Store bytes", "Bps", "Bytes read from object stores per second.",
     [q('sum by (store) (rate(cogfeed_store_bytes_total[$__rate_interval]))', "{{store}}")]),
    ("Store rate governor", "reqps",
     "Per bucket: the governor's request rate (at its ceiling it paces nothing), throttle answers (503 SlowDown / ServerBusy, 429) and the share of time requests waited for it. Local data has no governor (0).",
     [q('sum by (store, bucket) (cogfeed_store_rate_limit_per_second) or sum(rate(cogfeed_stream_batches_total[$__rate_interval])) * 0', "rate {{store}} {{bucket}}"),
      q('sum by (store, bucket) (rate(cogfeed_store_throttled_total[$__rate_interval])) or sum(rate(cogfeed_stream_batches_total[$__rate_interval])) * 0', "throttled {{store}} {{bucket}}"),
      q('sum by (store, bucket) (rate(cogfeed_store_rate_wait_seconds_total[$__rate_interval])) or sum(rate(cogfeed_stream_batches_total[$__rate_interval])) * 0', "waiting {{store}} {{bucket}}")]),
    ("In-flight store requests", "short", "Object-store requests in flight now (latency hiding at work).",
     [q('sum by (store) (cogfeed_store_in_flight_requests)', "{{store}}")]),
    ("Decode latency per codec (p50 / p99)", "s", "Time to decode one tile, by codec.",
     [q('histogram_quantile(0.5, sum by (le, codec) (rate(cogfeed_decode_duration_seconds_bucket[$__rate_interval])))', "p50 {{codec}}"),
      q('histogram_quantile(0.99, sum by (le, codec) (rate(cogfeed_decode_duration_seconds_bucket[$__rate_interval])))', "p99 {{codec}}")]),
    ("Assemble and transform latency (p99)", "s", "CPU time per sample to stitch tiles into a patch and to cast/normalise/augment it.",
     [q('histogram_quantile(0.99, sum by (le, stage) (rate(cogfeed_pipeline_stage_duration_seconds_bucket[$__rate_interval])))', "p99 {{stage}}")]),
    ("Memory budget in use", "bytes",
     "Request-sized memory admitted now (streams' batches and look-ahead, ReadWindow responses) against limits.memory_budget_bytes.",
     [q('sum(cogfeed_memory_reserved_bytes)', "reserved"), q('sum(cogfeed_memory_budget_bytes)', "budget")]),
    ("Admission refusals and closed connections", "ops",
     "Calls refused by a limit (memory, caller memory, streams, caller, job, rate) and connections the server closed (idle, evicted at the connection limit, stalled streams), per second.",
     [q('sum by (limit) (rate(cogfeed_admission_refused_total[$__rate_interval])) or sum(rate(cogfeed_stream_batches_total[$__rate_interval])) * 0', "refused {{limit}}"),
      q('sum by (reason) (rate(cogfeed_connections_closed_total[$__rate_interval])) or sum(rate(cogfeed_stream_batches_total[$__rate_interval])) * 0', "closed {{reason}}")]),
    ("CPU", "percentunit", "Daemon CPU use (1 = one core).",
     [q(f'sum by (instance) (rate(process_cpu_seconds_total{{{PROC}}}[$__rate_interval]))', "{{instance}}")]),
    ("Memory (RSS)", "bytes", "Daemon resident memory.",
     [q(f'sum by (instance) (process_resident_memory_bytes{{{PROC}}})', "{{instance}}")]),
    ("Open file descriptors", "short", "Daemon open file descriptors.",
     [q(f'sum by (instance) (process_open_fds{{{PROC}}})', "{{instance}}")]),
    ("Up", "short", "1 when Prometheus can scrape the daemon.",
     [q(f'up{{{PROC}}}', "{{instance}}")]),
]


def dashboard():
    panels = []
    for i, (title, unit, desc, queries) in enumerate(PANELS):
        panels.append({
            "id": i + 1,
            "type": "timeseries",
            "title": title,
            "description": desc,
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "gridPos": {"h": 8, "w": 12, "x": (i % 2) * 12, "y": (i // 2) * 8},
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}},
            "targets": [
                {"refId": chr(65 + j), "expr": t["expr"], "legendFormat": t["legend"],
                 "datasource": {"type": "prometheus", "uid": "${datasource}"}}
                for j, t in enumerate(queries)
            ],
        })
    var = lambda name, query: {
        "name": name, "type": "query", "label": name, "includeAll": True, "multi": True, "allValue": ".*",
        "current": {"text": "All", "value": "$__all"}, "refresh": 2,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "query": {"query": query, "refId": name}, "definition": query,
    }
    return {
        "uid": "cogfeed",
        "title": "cogfeed",
        "description": "cogfeed daemon: throughput, data stalls, queues, cache, object stores, decode, process",
        "tags": ["cogfeed"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": [
            {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus",
             "current": {}, "hide": 0},
            var("dataset", "label_values(cogfeed_stream_batches_total, dataset)"),
            var("job", 'label_values(cogfeed_stream_batches_total{dataset=~"$dataset"}, job)'),
            {"name": "scrape_job", "type": "custom", "label": "scrape job", "query": "cogfeed",
             "current": {"text": "cogfeed", "value": "cogfeed"},
             "options": [{"text": "cogfeed", "value": "cogfeed", "selected": True}]},
        ]},
        "panels": panels,
    }


def readme():
    lines = [
        "# Dashboards",
        "",
        "`cogfeed.json` is a Grafana dashboard (generated by `make_dashboard.py`; edit the panel list there).",
        "Import it in Grafana (Dashboards → New → Import → upload `cogfeed.json`) or provision it with",
        "`provisioning/` (`datasources/prometheus.yml` and `dashboards/cogfeed.yml`, used by `deploy/compose.yaml`).",
        "Variables: `datasource` (a Prometheus data source), `dataset`, `job` (training job, as sent by clients;",
        "capped by `[server] max_job_labels`, excess as `other`), `scrape_job` (the Prometheus job scraping the daemon).",
        "Prometheus must scrape with `honor_labels: true`: the daemon's metrics carry a `job` label of their own.",
        "",
        "Every panel's queries are evaluated against a real Prometheus scraping a loaded daemon by",
        "`dashboards/test_dashboards.py` (run by `.ci/test`); each must return data.",
        "",
        "| panel | what it shows | metrics |",
        "|---|---|---|",
    ]
    import re
    for title, _unit, desc, queries in PANELS:
        names = sorted({m for t in queries for m in re.findall(r"\b(cogfeed_[a-z_]+|process_[a-z_]+|up)\b", t["expr"])})
        names = [n.removesuffix("_bucket") for n in names]
        lines.append(f"| {title} | {desc} | {', '.join('`' + n + '`' for n in sorted(set(names)))} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "cogfeed.json"), "w") as f:
        json.dump(dashboard(), f, indent=2)
        f.write("\n")
    with open(os.path.join(here, "README.md"), "w") as f:
        f.write(readme())
    print(f"wrote {len(PANELS)} panels")
