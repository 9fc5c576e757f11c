//! The configurations of the embedded demo archives (`cogfeed serve` without a config):
//! `demo` (scenes), `demo-stac` (map space) and `demo-series` (time series). They live
//! beside the archives they describe so that the config schema imports nothing.

use std::path::{Path, PathBuf};

use crate::config::{
    BalanceConfig, Config, DatasetConfig, LayerConfig, OnBadObject, OnCorrupt, SamplingConfig, SplitConfig,
};

impl Config {
    /// The embedded default: the demo dataset in `dir`, local addresses.
    pub fn demo(dir: &Path) -> Self {
        let url = |p: PathBuf| p.to_string_lossy().into_owned();
        let scenes = (0..super::SCENES)
            .map(|s| url(dir.join(format!("scene_{s:02}.tif"))))
            .collect();
        Config {
            datasets: vec![DatasetConfig {
                name: "demo".into(),
                scenes,
                prefix: None,
                manifest: None,
                labels: Some(url(dir.join("labels").join("{stem}.tif"))),
                bands: None,
                fill: 0.0,
                mean: Some(vec![30000.0; 4]),
                std: Some(vec![12000.0; 4]),
                on_corrupt: OnCorrupt::Fail,
                on_bad_object: OnBadObject::Fail,
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    /// What `cogfeed serve` runs without a config: [`Config::demo`] plus `demo-stac`, the
    /// map-space demo (`demo_stac`) written under `dir/stac`.
    pub fn demo_default(dir: &Path) -> Self {
        let url = |p: PathBuf| p.to_string_lossy().into_owned();
        let mut c = Self::demo(dir);
        c.datasets.push(DatasetConfig {
            // Map space: per-band assets at 10 and 20 m in two UTM zones, labels in
            // EPSG:4326 (`demo_stac`), each sample in its Item's own CRS.
            name: "demo-stac".into(),
            stac: Some(url(dir.join("stac").join("items.json"))),
            crs: Some("native".into()),
            layers: vec![
                LayerConfig {
                    name: "image".into(),
                    assets: vec!["B02".into(), "B03".into(), "B04".into(), "B08".into()],
                    resolution: Some(10.0),
                    resampling: Some("bilinear".into()),
                    dtype: None,
                    nodata: None,
                    ..Default::default()
                },
                LayerConfig {
                    name: "swir".into(),
                    assets: vec!["B11".into()],
                    resolution: Some(20.0),
                    resampling: Some("bilinear".into()),
                    dtype: None,
                    nodata: None,
                    ..Default::default()
                },
                LayerConfig {
                    name: "label".into(),
                    assets: vec!["classes".into()],
                    resolution: Some(10.0),
                    resampling: Some("mode".into()),
                    dtype: None,
                    nodata: Some(255.0),
                    ..Default::default()
                },
            ],
            ..Default::default()
        });
        c.datasets
            .push(Self::demo_series(&dir.join("series").join("items.json")));
        c
    }

    /// `demo-series`: the time-series demo (`demo_series`) at `items`: Sentinel-2 dates
    /// (3 latest per sample) with their scene classification as the cloud mask,
    /// Sentinel-1 ascending and descending passes (2 each), labels in EPSG:4326, samples
    /// at least half valid, and a train/val split over 1 km cells.
    pub fn demo_series(items: &Path) -> DatasetConfig {
        let layer = |name: &str, assets: &[&str], res: f64, resampling: &str| LayerConfig {
            name: name.into(),
            assets: assets.iter().map(|a| a.to_string()).collect(),
            resolution: Some(res),
            resampling: Some(resampling.into()),
            ..Default::default()
        };
        let s1 = |name: &str, orbit: &str| {
            let mut filter = toml::Table::new();
            filter.insert(
                "collections".into(),
                toml::Value::Array(vec![toml::Value::String("sentinel-1-rtc-series".into())]),
            );
            filter.insert("sat:orbit_state".into(), toml::Value::String(orbit.into()));
            LayerConfig {
                filter: Some(filter),
                time_steps: Some(2),
                ..layer(name, &["vv", "vh"], 20.0, "bilinear")
            }
        };
        let mut s2_filter = toml::Table::new();
        s2_filter.insert(
            "collections".into(),
            toml::Value::Array(vec![toml::Value::String("sentinel-2-l2a-series".into())]),
        );
        DatasetConfig {
            name: "demo-series".into(),
            stac: Some(items.to_string_lossy().into_owned()),
            crs: Some("native".into()),
            layers: vec![
                LayerConfig {
                    filter: Some(s2_filter.clone()),
                    time_steps: Some(3),
                    time_rule: Some("latest".into()),
                    ..layer("s2", &["B02", "B03", "B04", "B08"], 10.0, "bilinear")
                },
                LayerConfig {
                    filter: Some(s2_filter),
                    ..layer("scl", &["SCL"], 20.0, "nearest")
                },
                s1("s1_asc", "ascending"),
                s1("s1_desc", "descending"),
                LayerConfig {
                    nodata: Some(255.0),
                    ..layer("label", &["classes"], 10.0, "mode")
                },
            ],
            sampling: Some(SamplingConfig {
                min_valid_fraction: Some(0.5),
                mask_layer: Some("scl".into()),
                invalid_classes: vec![0, 1, 3, 8, 9, 10],
                max_attempts: None,
                require_full_series: false,
                ..Default::default()
            }),
            split: Some(SplitConfig {
                cell_size: 1000.0,
                fractions: [("train".to_string(), 0.8), ("val".to_string(), 0.2)]
                    .into_iter()
                    .collect(),
                seed: 0,
            }),
            points: items
                .parent()
                .map(|d| d.join("points.geojson").to_string_lossy().into_owned()),
            // The river (class 6) is about 1 % of the labelled pixels: the balanced
            // sampler makes it 20 % of the drawn ones.
            balance: Some(BalanceConfig {
                layer: "label".into(),
                proportions: [("6".to_string(), 0.2)].into_iter().collect(),
                cell_size: Some(32),
                ..Default::default()
            }),
            ..Default::default()
        }
    }
}
