//! Which store settings each bucket is read with: every dataset's `[datasets.store]`
//! applied to the stores of its document, scenes, labels, points and allowed asset
//! prefixes. Reads nothing; resolves the credentials' environment variables once.

use std::sync::Arc;

use crate::config::DatasetConfig;
use crate::dataset::map::confine::Confinement;
use crate::error::Result;
use crate::storage::{StoreProfile, StoreRules};

/// Every URL whose store a dataset reads: its document, scene list, prefix, manifest,
/// labels template, points file and (STAC) the prefixes its asset hrefs are confined to.
fn urls_of(c: &DatasetConfig) -> Vec<String> {
    let mut urls: Vec<String> = c.scenes.clone();
    urls.extend(
        [&c.stac, &c.prefix, &c.manifest, &c.labels, &c.points]
            .into_iter()
            .flatten()
            .cloned(),
    );
    if c.stac.is_some() {
        urls.extend(Confinement::for_dataset(c).prefixes().iter().cloned());
    }
    urls
}

/// The rules of every dataset that sets `[datasets.store]`.
pub fn store_rules(datasets: &[DatasetConfig]) -> Result<StoreRules> {
    let mut rules = StoreRules::default();
    for c in datasets {
        if let Some(s) = &c.store {
            let profile = Arc::new(StoreProfile::resolve(s, &c.name)?);
            rules.add(&c.name, profile, &urls_of(c))?;
        }
    }
    Ok(rules)
}
