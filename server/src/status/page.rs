//! The status page's HTML: datasets (with the footprint map and preview links), the
//! streams open now, and the cache, memory and store figures. Server-rendered, no script;
//! every name is escaped (job names come from clients), and nothing is shown that the API
//! would not show (dataset and scene names, never URLs or credentials).

use std::fmt::Write;

use prometheus::core::Collector;
use prometheus::proto::MetricType;

use super::{StatusState, map};

/// `text` safe inside HTML text and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Every series of a metric: its labels and value (counters and gauges).
fn series(c: &dyn Collector) -> Vec<(Vec<(String, String)>, f64)> {
    let mut out = Vec::new();
    for family in c.collect() {
        let kind = family.get_field_type();
        for m in family.get_metric() {
            let labels = m
                .get_label()
                .iter()
                .map(|l| (l.name().to_string(), l.value().to_string()))
                .collect();
            let v = match kind {
                MetricType::COUNTER => m.get_counter().get_value(),
                MetricType::GAUGE => m.get_gauge().get_value(),
                _ => continue,
            };
            out.push((labels, v));
        }
    }
    out
}

fn label<'a>(labels: &'a [(String, String)], name: &str) -> &'a str {
    labels.iter().find(|(n, _)| n == name).map_or("", |(_, v)| v.as_str())
}

fn bytes(n: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

const STYLE: &str = "body{font:14px system-ui,sans-serif;margin:24px;color:#222;background:#fff}\
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:24px 0 8px}\
table{border-collapse:collapse}th,td{padding:3px 10px;border-bottom:1px solid #ddd;text-align:left}\
th{background:#f2f2f2}td.n{text-align:right;font-variant-numeric:tabular-nums}\
.muted{color:#777}.bad{color:#b00;font-weight:bold}progress{width:120px}iframe{border:1px solid #ccc;width:840px;height:560px}\
.grid{display:flex;gap:24px;flex-wrap:wrap}figure{margin:0}figcaption{font-weight:600;margin:4px 0}";

/// The whole page. `refresh`: seconds between automatic reloads (none when None);
/// `preview`: a dataset whose preview the page opens with.
pub fn render(state: &StatusState, refresh: Option<u32>, preview: Option<&str>) -> String {
    let mut h = String::with_capacity(32 << 10);
    let _ = write!(
        h,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>cogfeed status</title>"
    );
    if let Some(s) = refresh {
        let _ = write!(h, "<meta http-equiv=\"refresh\" content=\"{s}\">");
    }
    let _ = write!(h, "<style>{STYLE}</style></head><body>");
    let up = state.started.elapsed().as_secs();
    let _ = write!(
        h,
        "<h1>cogfeed {}</h1><p class=\"muted\">up {}h {:02}m {:02}s · {} of {} streams open · \
         <a href=\"/\">reload</a> · <a href=\"/?refresh=5\">reload every 5 s</a> · <a href=\"/metrics\">metrics</a></p>",
        env!("CARGO_PKG_VERSION"),
        up / 3600,
        up / 60 % 60,
        up % 60,
        state.active_streams(),
        state.limits.max_streams
    );
    datasets(&mut h, state);
    streams(&mut h, state);
    figures(&mut h, state);
    h.push_str(
        "<h2>Preview</h2><p class=\"muted\">Click a dataset's <em>preview</em> to draw one batch of random \
         samples here.</p><iframe name=\"preview\" id=\"preview\" title=\"sample preview\"",
    );
    if let Some(d) = preview.filter(|d| state.catalog.get(d).is_some()) {
        let _ = write!(h, " src=\"/preview.png?dataset={}\"", url_escape(d));
    }
    h.push_str("></iframe></body></html>");
    h
}

fn datasets(h: &mut String, state: &StatusState) {
    let all = state.catalog.all();
    h.push_str(
        "<h2>Datasets</h2><table id=\"datasets\"><tr><th>name</th><th>kind</th><th>scenes</th><th>items</th>\
         <th>layers / bands</th><th>CRS</th><th>version</th><th></th></tr>",
    );
    for ds in all.iter() {
        let name = escape(&ds.name);
        let (kind, items, layers, crs) = match &ds.map {
            Some(m) => (
                "STAC",
                m.item_count().to_string(),
                m.layers
                    .iter()
                    .map(|l| format!("{} ({} × {} m)", escape(&l.name), l.bands, l.resolution))
                    .collect::<Vec<_>>()
                    .join(", "),
                escape(&m.crs_name()),
            ),
            None => (
                "scenes",
                "–".to_string(),
                format!("{} × {}", ds.bands.len(), ds.dtype.name()),
                ds.scenes
                    .first()
                    .and_then(|s| s.object.as_ref()?.cog.header().geo.epsg)
                    .map_or_else(|| "–".to_string(), |e| format!("EPSG:{e}")),
            ),
        };
        let version: String = ds.version.chars().take(12).collect();
        let _ = write!(
            h,
            "<tr class=\"dataset\" data-name=\"{name}\"><td>{name}</td><td>{kind}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{items}</td><td>{layers}</td><td>{crs}</td><td><code>{}</code></td>\
             <td><a class=\"preview\" href=\"/preview.png?dataset={}\" target=\"preview\">preview</a></td></tr>",
            ds.scenes.len(),
            escape(&version),
            url_escape(&ds.name),
        );
    }
    for (name, u) in state.catalog.unready() {
        let name = escape(&name);
        let _ = write!(
            h,
            "<tr class=\"dataset unready\" data-name=\"{name}\"><td>{name}</td><td class=\"bad\">unready</td>\
             <td colspan=\"6\">{} <span class=\"muted\">({} failed attempts; next in {} s)</span></td></tr>",
            escape(&u.reason),
            u.attempts,
            u.next_attempt_in().as_secs()
        );
    }
    h.push_str("</table><h2>Footprints</h2><div class=\"grid\">");
    let outlines = map::outlines(&all);
    for (d, ds) in all.iter().enumerate() {
        let many =
            ds.scenes.len() > map::MAX_OUTLINES || ds.map.as_ref().is_some_and(|m| m.item_count() > map::MAX_OUTLINES);
        let note = if many {
            format!(
                " <span class=\"muted\">(the first {} scenes and Items)</span>",
                map::MAX_OUTLINES
            )
        } else {
            String::new()
        };
        let _ = write!(
            h,
            "<figure><figcaption>{}{note}</figcaption>{}</figure>",
            escape(&ds.name),
            map::svg(&outlines, d, &ds.name)
        );
    }
    h.push_str("</div><p class=\"muted\">Solid: scene grids. Dashed: STAC Item bboxes. Lon/lat, no basemap.</p>");
}

/// `text` as a URL query value.
fn url_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

fn streams(h: &mut String, state: &StatusState) {
    let live = state.live.snapshot();
    let waits = series(&state.metrics.client_data_wait_seconds);
    let _ = write!(h, "<h2>Streams ({})</h2>", live.len());
    if live.is_empty() {
        h.push_str("<p class=\"muted\" id=\"streams-none\">No stream is open.</p>");
        return;
    }
    h.push_str(
        "<table id=\"streams\"><tr><th>dataset</th><th>job</th><th>rank</th><th>epoch</th><th>progress</th>\
         <th>batches</th><th>MB/s</th><th>starved</th><th>client data wait</th><th>open for</th></tr>",
    );
    for stream in live {
        let f = stream.figures();
        let p = stream.progress();
        let s = &stream.info;
        let job_wait: f64 = waits
            .iter()
            .filter(|(l, _)| label(l, "dataset") == s.dataset && label(l, "job") == s.job)
            .fold(0.0, |a, (_, v)| a + v);
        let _ = write!(
            h,
            "<tr class=\"stream\" data-dataset=\"{ds}\" data-job=\"{job}\"><td>{ds}</td><td>{job}</td>\
             <td class=\"n\">{}/{}</td><td class=\"n\">{}</td>\
             <td><progress value=\"{p:.4}\" max=\"1\"></progress> {:.1} %</td><td class=\"n\">{}/{}</td>\
             <td class=\"n\">{:.1}</td><td class=\"n\">{:.1} %</td><td class=\"n\">{job_wait:.1} s</td>\
             <td class=\"n\">{:.0} s</td></tr>",
            s.rank,
            s.world,
            s.epoch,
            p * 100.0,
            f.batches_sent,
            s.batches,
            f.mb_per_s(),
            f.starved_fraction() * 100.0,
            f.seconds,
            ds = escape(&s.dataset),
            job = escape(&s.job),
        );
    }
    h.push_str(
        "</table><p class=\"muted\">Progress: the stream's cursor over the epoch's samples (all ranks). \
         Starved: time the daemon had no batch ready when the client asked. Client data wait: what the \
         job's training loops report waiting (the job's total).</p>",
    );
}

fn figures(h: &mut String, state: &StatusState) {
    let m = &state.metrics;
    let (hits, misses) = (m.cache_hits.get() as f64, m.cache_misses.get() as f64);
    let ratio = if hits + misses > 0.0 {
        hits / (hits + misses) * 100.0
    } else {
        0.0
    };
    let reserved = state.memory.total_bytes() - state.memory.available_bytes();
    h.push_str("<div class=\"grid\"><div><h2>Cache and memory</h2><table id=\"cache\">");
    let rows = [
        (
            "tile cache",
            format!(
                "{} of {}",
                bytes(m.cache_size_bytes.get() as f64),
                bytes(m.cache_capacity_bytes.get() as f64)
            ),
        ),
        (
            "hit ratio",
            format!("{ratio:.1} % ({hits:.0} hits, {misses:.0} misses)"),
        ),
        ("coalesced waits", format!("{}", m.cache_coalesced.get())),
        ("evictions", format!("{}", m.cache_evictions.get())),
        (
            "request memory",
            format!(
                "{} of {}",
                bytes(reserved as f64),
                bytes(state.memory.total_bytes() as f64)
            ),
        ),
        ("connections open", format!("{}", m.connections_open.get())),
    ];
    let tiers = [("compressed", "compressed tier"), ("disk", "disk tier")]
        .into_iter()
        .filter(|(t, _)| m.tier_capacity_bytes.with_label_values(&[t]).get() > 0)
        .map(|(t, name)| {
            let get = |v: &prometheus::IntCounterVec| v.with_label_values(&[t]).get();
            let held = m.tier_size_bytes.with_label_values(&[t]).get() as f64;
            let cap = m.tier_capacity_bytes.with_label_values(&[t]).get() as f64;
            let value = format!(
                "{} of {} ({} hits, {} misses)",
                bytes(held),
                bytes(cap),
                get(&m.tier_hits),
                get(&m.tier_misses)
            );
            (name, value)
        });
    for (k, v) in rows.into_iter().chain(tiers) {
        let _ = write!(h, "<tr><th>{k}</th><td>{v}</td></tr>");
    }
    h.push_str("</table></div><div><h2>Object stores</h2><table id=\"stores\"><tr><th>store</th><th>requests</th><th>errors</th><th>bytes read</th><th>retries</th></tr>");
    let mut stores: std::collections::BTreeMap<String, (f64, f64, f64, f64)> = Default::default();
    for (l, v) in series(&m.store_requests) {
        let e = stores.entry(label(&l, "store").to_string()).or_default();
        e.0 += v;
        if label(&l, "result") != "ok" {
            e.1 += v;
        }
    }
    for (l, v) in series(&m.store_bytes) {
        stores.entry(label(&l, "store").to_string()).or_default().2 += v;
    }
    for (l, v) in series(&m.store_retries) {
        stores.entry(label(&l, "store").to_string()).or_default().3 += v;
    }
    if stores.is_empty() {
        h.push_str("<tr><td colspan=\"5\" class=\"muted\">no request yet</td></tr>");
    }
    for (store, (req, err, b, retries)) in stores {
        let _ = write!(
            h,
            "<tr><td>{}</td><td class=\"n\">{req:.0}</td><td class=\"n\">{err:.0}</td><td class=\"n\">{}</td><td class=\"n\">{retries:.0}</td></tr>",
            escape(&store),
            bytes(b)
        );
    }
    h.push_str("</table></div></div>");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_covers_html_and_queries() {
        assert_eq!(
            escape("<a href='x'>&\"</a>"),
            "&lt;a href=&#39;x&#39;&gt;&amp;&quot;&lt;/a&gt;"
        );
        assert_eq!(url_escape("demo stac/&x"), "demo%20stac%2F%26x");
        assert_eq!(bytes(1536.0), "1.5 KiB");
    }
}
