//! One store per bucket/container/origin, shared by every object in it (built with the
//! profile a dataset set for it), and prefix listing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use object_store::ObjectStore;

use super::{Location, ObjectReader, Scheme, StoreOptions, StoreRules, build_store};
use crate::error::{Error, Result};

/// Stores by container, built on first use.
#[derive(Debug)]
pub struct Stores {
    options: StoreOptions,
    metrics: Option<Arc<crate::metrics::Metrics>>,
    rules: StoreRules,
    stores: Mutex<HashMap<(Scheme, String), Arc<dyn ObjectStore>>>,
}

impl Stores {
    /// An empty registry with these timeouts and retries.
    pub fn new(options: StoreOptions) -> Self {
        Self {
            options,
            metrics: None,
            rules: StoreRules::default(),
            stores: Mutex::new(HashMap::new()),
        }
    }

    /// Stores built from now on follow `rules` (the datasets' `[datasets.store]`).
    pub fn with_rules(mut self, rules: StoreRules) -> Self {
        self.rules = rules;
        self
    }

    /// Readers made from now on record into `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<crate::metrics::Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    fn store_for(&self, location: &Location) -> Result<Arc<dyn ObjectStore>> {
        let key = (location.scheme, location.container.clone());
        let mut stores = self
            .stores
            .lock()
            .map_err(|_| Error::InvalidArgument("store registry poisoned".into()))?;
        if let Some(s) = stores.get(&key) {
            return Ok(s.clone());
        }
        let governor = (location.scheme != Scheme::Local).then(|| {
            let metrics = self.metrics.as_ref().map(|m| {
                let labels = [location.scheme.name(), location.container.as_str()];
                super::rate::RateMetrics {
                    rate: m.store_rate_limit.with_label_values(&labels),
                    throttled: m.store_throttled.with_label_values(&labels),
                    waited: m.store_rate_wait_seconds.with_label_values(&labels),
                }
            });
            Arc::new(super::rate::RateGovernor::new(
                self.options.max_requests_per_second,
                self.options.min_requests_per_second,
                metrics,
            ))
        });
        let store = build_store(
            location,
            &self.options,
            self.rules.profile(location).as_deref(),
            governor,
        )?;
        stores.insert(key, store.clone());
        Ok(store)
    }

    /// A range reader for `url`.
    pub fn reader(&self, url: &str) -> Result<Arc<ObjectReader>> {
        let location = Location::parse(url)?;
        let store = self.store_for(&location)?;
        let signed = self
            .rules
            .profile(&location)
            .is_some_and(|p| p.config.sign != crate::config::Sign::None);
        Ok(Arc::new(
            ObjectReader::new(store, location)
                .with_latency(self.options.simulated_latency)
                .with_metrics(self.metrics.clone())
                .with_retry_denied(signed),
        ))
    }

    /// URLs of the `.tif`/`.tiff` objects directly under `prefix` (a URL ending in `/`),
    /// sorted; sub-folders are not descended into.
    pub async fn list_tiffs(&self, prefix: &str) -> Result<Vec<String>> {
        self.list_suffixed(prefix, &[".tif", ".tiff"]).await
    }

    /// URLs of the objects directly under `prefix` whose names end (any case) in one of
    /// `suffixes`, sorted.
    pub async fn list_suffixed(&self, prefix: &str, suffixes: &[&str]) -> Result<Vec<String>> {
        let base = prefix.trim_end_matches('/');
        let location = Location::parse(&format!("{base}/x.tif"))?;
        let store = self.store_for(&location)?;
        let dir = location.path.parts().collect::<Vec<_>>();
        let dir: object_store::path::Path = dir[..dir.len() - 1].iter().cloned().collect();
        // Direct children only: a `labels/` folder next to the scenes is not scenes.
        let listed = store
            .list_with_delimiter(Some(&dir))
            .await
            .map_err(|e| Error::InvalidArgument(format!("cannot list {prefix}: {e}")))?
            .objects;
        let mut urls: Vec<String> = listed
            .into_iter()
            .filter_map(|m| {
                let p = m.location.as_ref().to_string();
                let lower = p.to_ascii_lowercase();
                suffixes.iter().any(|x| lower.ends_with(x)).then(|| {
                    let rel = p.strip_prefix(dir.as_ref()).unwrap_or(&p).trim_start_matches('/');
                    format!("{base}/{rel}")
                })
            })
            .collect();
        urls.sort();
        Ok(urls)
    }
}
