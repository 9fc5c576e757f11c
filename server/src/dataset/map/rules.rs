//! The rules of a map-space dataset's configuration that the schema alone cannot check:
//! layer names, kernels and types, filters, time rules, CRS, AOI, mosaic and priority
//! keys, sampling, balance and split rules (built here once to be checked). No I/O: a
//! config that passes here may still name documents that cannot be read.

use crate::config::{Config, DatasetConfig};
use crate::error::{Error, Result};

/// Checks every dataset of `config` beyond [`Config::validate`]: the whole configuration
/// as the daemon will use it.
pub fn check_config(config: &Config) -> Result<()> {
    config.validate()?;
    config.datasets.iter().try_for_each(check)
}

/// The keys of STAC datasets, checked once (and refused on other datasets).
pub fn check(d: &DatasetConfig) -> Result<()> {
    let bad = |m: String| Err(Error::InvalidArgument(format!("dataset {}: {m}", d.name)));
    if let Some(sm) = &d.sampling
        && let Err(m) = crate::sampler::OrderChoice::configured(sm.order.as_deref(), sm.open_blocks, sm.visits)
    {
        return bad(format!("sampling: {m}"));
    }
    if d.stac.is_none() {
        let stray = [
            ("layers", !d.layers.is_empty()),
            ("crs", d.crs.is_some()),
            ("href_rewrite", !d.href_rewrite.is_empty()),
            ("filter", d.filter.is_some()),
            ("priority", d.priority.is_some()),
            ("mosaic", d.mosaic.is_some()),
            ("aoi", d.aoi.is_some()),
            // The order keys apply to every dataset.
            ("sampling", d.sampling.as_ref().is_some_and(|s| s.has_rules())),
            ("points", d.points.is_some()),
            ("split", d.split.is_some()),
            ("balance", d.balance.is_some()),
        ];
        if let Some((k, _)) = stray.iter().find(|(_, set)| *set) {
            return bad(format!("{k} applies to stac datasets only"));
        }
        return Ok(());
    }
    if d.layers.is_empty() {
        return bad("a stac dataset needs at least one [[datasets.layers]]".into());
    }
    if d.labels.is_some() || d.bands.is_some() || d.mean.is_some() || d.std.is_some() {
        return bad("labels, bands, mean and std apply to scene datasets; stac datasets use layers".into());
    }
    let mut names = std::collections::HashSet::new();
    for l in &d.layers {
        if l.name.is_empty() || !l.name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
            return bad(format!("layer name {:?}: use letters, digits, - _ .", l.name));
        }
        if !names.insert(&l.name) {
            return bad(format!("layer {} defined twice", l.name));
        }
        if l.assets.is_empty() {
            return bad(format!("layer {}: assets is empty", l.name));
        }
        if let Some(r) = l.resolution
            && !(r.is_finite() && r > 0.0)
        {
            return bad(format!("layer {}: resolution {r} is not a positive number", l.name));
        }
        if let Some(k) = &l.resampling
            && cogfeed_geo::warp::Resampling::parse(k).is_none()
        {
            return bad(format!(
                "layer {}: resampling {k:?} (nearest, bilinear, cubic, average, mode)",
                l.name
            ));
        }
        if let Some(t) = &l.dtype
            && cogfeed_tiff::DType::from_name(t).is_none_or(|d| d.size() > 8 || matches!(d, cogfeed_tiff::DType::C64))
        {
            return bad(format!("layer {}: dtype {t:?} is not a sample type", l.name));
        }
        if let Some(f) = &l.filter {
            cogfeed_stac::ItemFilter::from_table(f)
                .map_err(|e| Error::InvalidArgument(format!("dataset {}: layer {}: filter: {e}", d.name, l.name)))?;
        }
        if let Some(h) = &l.harmonize
            && super::harmonize::Harmonize::parse(h).is_none()
        {
            return bad(format!(
                "layer {}: harmonize {h:?} ({})",
                l.name,
                super::harmonize::Harmonize::NAMES
            ));
        }
        super::time::TimeSpec::from_layer(l)
            .map_err(|e| Error::InvalidArgument(format!("dataset {}: layer {}: {e}", d.name, l.name)))?;
    }
    if let Some(c) = &d.crs
        && !c.eq_ignore_ascii_case("native")
    {
        cogfeed_geo::Crs::parse(c).map_err(|e| Error::InvalidArgument(format!("dataset {}: crs: {e}", d.name)))?;
    }
    if let Some(a) = d.aoi
        && !(a.iter().all(|v| v.is_finite()) && a[0] < a[2] && a[1] < a[3] && a[1] >= -90.0 && a[3] <= 90.0)
    {
        return bad(format!("aoi {a:?}: expected [minlon, minlat, maxlon, maxlat]"));
    }
    if let Some(m) = &d.mosaic
        && m != "same_day"
        && m != "all"
    {
        return bad(format!("mosaic {m:?} (same_day or all)"));
    }
    if let Some(p) = &d.priority {
        for k in p {
            if !["datetime", "-datetime", "id", "-id"].contains(&k.as_str()) {
                return bad(format!("priority key {k:?} (datetime, -datetime, id, -id)"));
            }
        }
    }
    if let Some(f) = &d.filter {
        cogfeed_stac::ItemFilter::from_table(f)
            .map_err(|e| Error::InvalidArgument(format!("dataset {}: filter: {e}", d.name)))?;
    }
    if let Some(b) = &d.balance {
        let names: Vec<(String, bool)> = d
            .layers
            .iter()
            .map(|l| (l.name.clone(), l.time_steps.unwrap_or(0) > 0))
            .collect();
        super::balance::BalanceRule::new(b, &names)
            .map_err(|m| Error::InvalidArgument(format!("dataset {}: {m}", d.name)))?;
    }
    if let Some(sm) = &d.sampling {
        if let Some(f) = sm.min_valid_fraction
            && !(0.0..=1.0).contains(&f)
        {
            return bad(format!("sampling.min_valid_fraction {f} is not in [0, 1]"));
        }
        match &sm.mask_layer {
            Some(m) if !d.layers.iter().any(|l| &l.name == m) => {
                return bad(format!("sampling.mask_layer {m:?} is not one of the layers"));
            }
            Some(m) if d.layers.iter().any(|l| &l.name == m && l.time_steps.unwrap_or(0) > 1) => {
                return bad(format!(
                    "sampling.mask_layer {m:?} is a time series; a mask has one date"
                ));
            }
            None if !sm.invalid_classes.is_empty() => {
                return bad("sampling.invalid_classes needs sampling.mask_layer".into());
            }
            _ => {}
        }
        if sm.max_attempts.is_some_and(|a| a == 0 || a > 4096) {
            return bad("sampling.max_attempts must be in 1..=4096".into());
        }
    }
    if let Some(sp) = &d.split {
        super::split::SplitRule::new(sp)
            .map_err(|e| Error::InvalidArgument(format!("dataset {}: split: {e}", d.name)))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The sampling rules hash as they did before the order keys existed.
    #[test]
    fn sampling_versions_stay_for_configs_without_an_order() {
        let mut sm = crate::config::SamplingConfig {
            min_valid_fraction: Some(0.5),
            mask_layer: Some("scl".into()),
            invalid_classes: vec![0, 1, 3],
            ..Default::default()
        };
        assert_eq!(
            sm.version_text(),
            "SamplingConfig { min_valid_fraction: Some(0.5), mask_layer: Some(\"scl\"), invalid_classes: [0, 1, 3], max_attempts: None, require_full_series: false }"
        );
        assert!(sm.has_rules() && !sm.has_order());
        sm.order = Some("local".into());
        assert!(sm.version_text().ends_with("\torder\tSome(\"local\")\tNone\tNone"));
    }

    fn stac(layer: &str) -> Config {
        Config::parse(&format!(
            "[[datasets]]\nname = \"s\"\nstac = \"items.json\"\n[[datasets.layers]]\nname = \"image\"\nassets = [\"b1\"]\n{layer}"
        ))
        .unwrap()
    }

    #[test]
    fn the_schema_parses_what_the_rules_then_refuse() {
        assert!(check_config(&stac("")).is_ok());
        let e = check_config(&stac("resampling = \"lanczos9\"\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("resampling \"lanczos9\""), "{e}");
        let e = check_config(&stac("dtype = \"complex128\"\n")).unwrap_err().to_string();
        assert!(e.contains("not a sample type"), "{e}");
    }

    #[test]
    fn map_space_keys_are_refused_on_scene_datasets() {
        let c = Config::parse("[[datasets]]\nname = \"x\"\nscenes = [\"a.tif\"]\ncrs = \"EPSG:4326\"\n").unwrap();
        let e = check_config(&c).unwrap_err().to_string();
        assert!(e.contains("crs applies to stac datasets only"), "{e}");
    }
}
