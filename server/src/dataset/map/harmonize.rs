//! Sentinel-2 L2A harmonisation, a layer option (`harmonize`): processing baseline 04.00
//! (from 2022-01-25) adds `BOA_ADD_OFFSET` = 1000 to L2A digital numbers, so a series
//! mixing older and newer scenes shifts by 0.1 reflectance. Per Item this module decides
//! whether its pixels carry the offset (from `s2:processing_baseline` /
//! `processing:baseline`, else its datetime, and Earth Search's
//! `earthsearch:boa_offset_applied`), and shifts warped values onto one scale.
//!
//! The rule (docs/src/guide/time-series.md):
//! - baseline ≥ 04.00 (or, without one, a datetime on or after 2022-01-25): the pixels carry
//!   the offset, unless `earthsearch:boa_offset_applied` is `true` (the provider removed
//!   it already);
//! - baseline < 04.00: no offset; a `true` flag there disagrees with the baseline (there
//!   was no offset to remove): the baseline wins, and the Item is logged once and counted
//!   in `cogfeed_harmonize_disagreements_total`.
//!
//! `s2-l2a` puts every Item on the pre-04.00 scale: `v → max(v, 1000) − 1000` where the
//! pixels carry the offset; `s2-l2a-new` on the 04.00 scale: `v → v + 1000` where they do
//! not. Nodata pixels stay nodata.

use chrono::{DateTime, TimeZone, Utc};
use cogfeed_stac::Item;
use serde_json::Value;

/// `BOA_ADD_OFFSET` of processing baseline 04.00 and later, in digital numbers.
pub const BOA_ADD_OFFSET: i32 = 1000;

/// The Item properties the rule reads (Items must keep them: see `KeepProperties`).
pub const PROPERTY_KEYS: [&str; 3] = [
    "s2:processing_baseline",
    "processing:baseline",
    "earthsearch:boa_offset_applied",
];

/// What `harmonize` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Harmonize {
    /// `s2-l2a`: every date on the pre-04.00 scale (the offset subtracted where present).
    ToOld,
    /// `s2-l2a-new`: every date on the 04.00 scale (the offset added where absent).
    ToNew,
}

impl Harmonize {
    /// The names `harmonize` accepts.
    pub const NAMES: &'static str = "s2-l2a, s2-l2a-new";

    /// `s2-l2a` or `s2-l2a-new`.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "s2-l2a" => Some(Self::ToOld),
            "s2-l2a-new" => Some(Self::ToNew),
            _ => None,
        }
    }

    /// What is added to an Item's valid pixels: `-1000`, `0` or `+1000`.
    pub fn shift(self, scale: ItemScale) -> i32 {
        match (self, scale.carries_offset) {
            (Self::ToOld, true) => -BOA_ADD_OFFSET,
            (Self::ToNew, false) => BOA_ADD_OFFSET,
            _ => 0,
        }
    }
}

/// Whether one Item's pixels carry the offset, and whether its flags disagree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ItemScale {
    pub carries_offset: bool,
    /// `earthsearch:boa_offset_applied = true` on a baseline before 04.00.
    pub disagrees: bool,
}

/// The first day of processing baseline 04.00.
fn new_baseline_start() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2022, 1, 25, 0, 0, 0).single().unwrap_or_default()
}

/// A baseline property as a number: `"05.10"` → 5.1 (a number is taken as it is).
fn baseline(v: &Value) -> Option<f64> {
    match v {
        Value::String(s) => s.trim().parse::<f64>().ok(),
        Value::Number(n) => n.as_f64(),
        _ => None,
    }
    .filter(|b| b.is_finite())
}

/// The rule of the module comment, for `item`.
pub fn item_scale(item: &Item) -> ItemScale {
    let p = &item.properties;
    let base = ["s2:processing_baseline", "processing:baseline"]
        .iter()
        .find_map(|k| p.get(*k).and_then(baseline));
    let new = match base {
        Some(b) => b >= 4.0,
        None => item.datetime.is_some_and(|t| t >= new_baseline_start()),
    };
    let applied = match p.get("earthsearch:boa_offset_applied") {
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => s.eq_ignore_ascii_case("true"),
        _ => false,
    };
    ItemScale {
        carries_offset: new && !applied,
        disagrees: applied && !new,
    }
}

/// Adds `shift` to band-major `values` (`bands` planes) where `valid` holds and the band's
/// value is not its `nodata`; a negative shift clamps at 0 (`max(v, −shift) + shift`).
pub fn apply(values: &mut [f64], valid: &[bool], nodata: &[Option<f64>], shift: i32) {
    if shift == 0 || valid.is_empty() {
        return;
    }
    let s = f64::from(shift);
    for (b, plane) in values.chunks_mut(valid.len()).enumerate() {
        let nd = nodata.get(b).copied().flatten();
        for (v, &ok) in plane.iter_mut().zip(valid) {
            if !ok || nd.is_some_and(|n| *v == n || (n.is_nan() && v.is_nan())) {
                continue;
            }
            *v = if shift < 0 { v.max(-s) + s } else { *v + s };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(props: &[(&str, Value)], datetime: &str) -> Item {
        let mut properties = serde_json::Map::new();
        for (k, v) in props {
            properties.insert((*k).to_string(), v.clone());
        }
        Item {
            id: "x".into(),
            collection: None,
            datetime: DateTime::parse_from_rfc3339(datetime)
                .ok()
                .map(|t| t.with_timezone(&Utc)),
            start: None,
            end: None,
            bbox: None,
            properties,
            assets: Default::default(),
        }
    }

    #[test]
    fn baseline_decides_then_datetime() {
        let s = |p: &[(&str, Value)], t| item_scale(&item(p, t));
        let old = s(&[("s2:processing_baseline", "03.01".into())], "2024-01-01T00:00:00Z");
        assert!(!old.carries_offset && !old.disagrees);
        assert!(s(&[("s2:processing_baseline", "04.00".into())], "2021-01-01T00:00:00Z").carries_offset);
        assert!(s(&[("processing:baseline", "05.10".into())], "2021-01-01T00:00:00Z").carries_offset);
        assert!(s(&[], "2022-01-25T00:00:00Z").carries_offset);
        assert!(!s(&[], "2022-01-24T23:59:59Z").carries_offset);
        // The provider removed it already.
        let done = s(
            &[
                ("s2:processing_baseline", "05.10".into()),
                ("earthsearch:boa_offset_applied", true.into()),
            ],
            "2024-01-01T00:00:00Z",
        );
        assert!(!done.carries_offset && !done.disagrees);
        // A flag on an old baseline: the baseline wins, the disagreement is reported.
        let wrong = s(
            &[
                ("s2:processing_baseline", "02.12".into()),
                ("earthsearch:boa_offset_applied", true.into()),
            ],
            "2019-01-01T00:00:00Z",
        );
        assert!(!wrong.carries_offset && wrong.disagrees);
    }

    #[test]
    fn shifts_clamp_and_keep_nodata() {
        let mut v = vec![0.0, 500.0, 1000.0, 1500.0];
        apply(&mut v, &[true, true, true, false], &[Some(0.0)], -1000);
        assert_eq!(v, vec![0.0, 0.0, 0.0, 1500.0]);
        let mut v = vec![0.0, 500.0];
        apply(&mut v, &[true, true], &[Some(0.0)], 1000);
        assert_eq!(v, vec![0.0, 1500.0]);
        let on = ItemScale {
            carries_offset: true,
            disagrees: false,
        };
        let off = ItemScale {
            carries_offset: false,
            disagrees: false,
        };
        assert_eq!(Harmonize::ToOld.shift(on), -1000);
        assert_eq!(Harmonize::ToOld.shift(off), 0);
        assert_eq!(Harmonize::ToNew.shift(on), 0);
        assert_eq!(Harmonize::ToNew.shift(off), 1000);
        assert_eq!(Harmonize::parse("s2-l2a"), Some(Harmonize::ToOld));
        assert_eq!(Harmonize::parse("S2"), None);
    }
}
