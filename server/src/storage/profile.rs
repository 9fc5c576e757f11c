//! Per-dataset store profiles: what `[datasets.store]` asks of requests (unsigned,
//! requester-pays, a region, credentials from named environment variables), resolved once
//! at start-up, and which bucket, container or origin each applies to. Never holds a
//! credential where it could be printed: values live in [`Secret`]s, errors name the
//! variable, not its value.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Location, Scheme};
use crate::config::{DatasetStoreConfig, Secret};
use crate::error::{Error, Result};

/// A dataset's store settings with its credentials read from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreProfile {
    /// The settings as configured (what two datasets sharing a bucket must agree on).
    pub config: DatasetStoreConfig,
    /// S3 access key id, secret and optional session token.
    pub s3_credentials: Option<(Secret, Secret, Option<Secret>)>,
    /// Azure storage account key.
    pub azure_account_key: Option<Secret>,
    /// Planetary Computer subscription key.
    pub subscription_key: Option<Secret>,
}

fn variable(name: &str, what: &str, dataset: &str) -> Result<Secret> {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => Ok(Secret::from(v.as_str())),
        _ => Err(Error::InvalidArgument(format!(
            "dataset {dataset}: [datasets.store] {what} names the environment variable {name}, which is not set"
        ))),
    }
}

impl StoreProfile {
    /// Resolves `config` for dataset `dataset`, reading the variables it names.
    pub fn resolve(config: &DatasetStoreConfig, dataset: &str) -> Result<Self> {
        let bad = |m: &str| {
            Err(Error::InvalidArgument(format!(
                "dataset {dataset}: [datasets.store] {m}"
            )))
        };
        let c = config;
        let s3 = match (&c.access_key_id_env, &c.secret_access_key_env) {
            (Some(id), Some(secret)) => Some((
                variable(id, "access_key_id_env", dataset)?,
                variable(secret, "secret_access_key_env", dataset)?,
                c.session_token_env
                    .as_deref()
                    .map(|t| variable(t, "session_token_env", dataset))
                    .transpose()?,
            )),
            (None, None) if c.session_token_env.is_some() => {
                return bad("session_token_env needs access_key_id_env and secret_access_key_env");
            }
            (None, None) => None,
            _ => return bad("access_key_id_env and secret_access_key_env go together"),
        };
        let azure = c
            .azure_account_key_env
            .as_deref()
            .map(|k| variable(k, "azure_account_key_env", dataset))
            .transpose()?;
        if c.anonymous && (s3.is_some() || azure.is_some()) {
            return bad("anonymous = true sends unsigned requests: it cannot also name credentials");
        }
        if c.anonymous && c.request_payer {
            return bad(
                "request_payer = true needs signed requests (AWS bills the requester's account), not anonymous",
            );
        }
        if let Some(r) = &c.region
            && (r.is_empty() || !r.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '-'))
        {
            return bad(&format!("region {r:?} is not an AWS region name"));
        }
        if let Some(e) = &c.endpoint
            && !(e.starts_with("http://") || e.starts_with("https://"))
        {
            return bad(&format!("endpoint {e:?} is not an http(s) URL"));
        }
        let planetary = c.sign == crate::config::Sign::PlanetaryComputer;
        if !planetary && (c.sas_api.is_some() || c.subscription_key_env.is_some()) {
            return bad("sas_api and subscription_key_env are for sign = \"planetary-computer\"");
        }
        if planetary && (c.anonymous || azure.is_some()) {
            return bad("sign = \"planetary-computer\" signs with its own tokens: no anonymous, no account key");
        }
        if let Some(api) = &c.sas_api
            && !(api.starts_with("http://") || api.starts_with("https://"))
        {
            return bad(&format!("sas_api {api:?} is not an http(s) URL"));
        }
        let subscription_key = c
            .subscription_key_env
            .as_deref()
            .map(|k| variable(k, "subscription_key_env", dataset))
            .transpose()?;
        Ok(Self {
            config: c.clone(),
            s3_credentials: s3,
            azure_account_key: azure,
            subscription_key,
        })
    }
}

/// Which profile each bucket, container or origin is read with.
#[derive(Debug, Clone, Default)]
pub struct StoreRules {
    by_container: BTreeMap<(String, String), (String, Arc<StoreProfile>)>,
}

fn scheme_key(s: Scheme) -> &'static str {
    s.name()
}

impl StoreRules {
    /// Applies `profile` (of dataset `dataset`) to the stores of every URL or prefix in
    /// `urls`; local paths have no store settings and are passed over. Two datasets that
    /// ask different settings of one bucket are refused, naming both.
    pub fn add(&mut self, dataset: &str, profile: Arc<StoreProfile>, urls: &[String]) -> Result<()> {
        for url in urls {
            // A prefix (`s3://bucket/dir/`) or a template names its store as an object would.
            let probe = if url.ends_with('/') {
                format!("{url}x")
            } else {
                url.clone()
            };
            let Ok(location) = Location::parse(&probe) else {
                continue;
            };
            if location.scheme == Scheme::Local {
                continue;
            }
            let key = (scheme_key(location.scheme).to_string(), location.container.clone());
            match self.by_container.get(&key) {
                Some((other, p)) if p.config != profile.config => {
                    return Err(Error::InvalidArgument(format!(
                        "datasets {other} and {dataset} read {}://{} with different [datasets.store] settings: one store, one way of asking",
                        key.0, key.1
                    )));
                }
                Some(_) => {}
                None => {
                    self.by_container.insert(key, (dataset.to_string(), profile.clone()));
                }
            }
        }
        Ok(())
    }

    /// The profile of `location`'s store, if a dataset set one.
    pub fn profile(&self, location: &Location) -> Option<Arc<StoreProfile>> {
        self.by_container
            .get(&(scheme_key(location.scheme).to_string(), location.container.clone()))
            .map(|(_, p)| p.clone())
    }

    /// No dataset set store settings.
    pub fn is_empty(&self) -> bool {
        self.by_container.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_come_from_named_variables_and_never_show() {
        // Variable names no other test sets.
        let c = DatasetStoreConfig {
            access_key_id_env: Some("COGFEED_TEST_PROFILE_KEY".into()),
            secret_access_key_env: Some("COGFEED_TEST_PROFILE_SECRET_UNSET".into()),
            ..Default::default()
        };
        let e = StoreProfile::resolve(&c, "d").unwrap_err().to_string();
        assert!(e.contains("COGFEED_TEST_PROFILE_KEY") && e.contains("not set"), "{e}");
        let anon = DatasetStoreConfig {
            anonymous: true,
            request_payer: true,
            ..Default::default()
        };
        assert!(
            StoreProfile::resolve(&anon, "d")
                .unwrap_err()
                .to_string()
                .contains("request_payer")
        );
    }

    #[test]
    fn one_bucket_one_profile() {
        let payer = Arc::new(
            StoreProfile::resolve(
                &DatasetStoreConfig {
                    request_payer: true,
                    ..Default::default()
                },
                "a",
            )
            .unwrap(),
        );
        let anon = Arc::new(
            StoreProfile::resolve(
                &DatasetStoreConfig {
                    anonymous: true,
                    ..Default::default()
                },
                "b",
            )
            .unwrap(),
        );
        let mut rules = StoreRules::default();
        rules
            .add(
                "a",
                payer.clone(),
                &["s3://landsat/c/items.json".into(), "/local/x.tif".into()],
            )
            .unwrap();
        rules.add("a2", payer.clone(), &["s3://landsat/other/".into()]).unwrap();
        let e = rules
            .add("b", anon.clone(), &["s3://landsat/".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("datasets a and b") && e.contains("s3://landsat"), "{e}");
        rules.add("b", anon, &["s3://sentinel-cogs/".into()]).unwrap();
        let at = |u: &str| rules.profile(&Location::parse(u).unwrap()).map(|p| p.config.anonymous);
        assert_eq!(at("s3://landsat/k.tif"), Some(false));
        assert_eq!(at("s3://sentinel-cogs/k.tif"), Some(true));
        assert_eq!(at("s3://elsewhere/k.tif"), None);
        assert_eq!(at("/local/x.tif"), None);
    }
}
