//! Which Items a dataset uses: a `datetime` range, a `bbox` in EPSG:4326, `collections`,
//! and predicates on properties (`"eo:cloud_cover" = "<= 20"`, `"platform" = "sentinel-2a"`).

use chrono::{DateTime, NaiveDate, Utc};
use serde_json::Value;

use super::Item;

/// A comparison on one property.
#[derive(Debug, Clone, PartialEq)]
pub struct Predicate {
    /// Property name (`eo:cloud_cover`, `platform`, ...).
    pub key: String,
    /// How the property compares with `value`.
    pub op: Op,
    /// The value compared with: numbers compare numerically, other values only for `=` and `!=`.
    pub value: Value,
}

/// Comparison operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `<`: less than.
    Lt,
    /// `<=`: less than or equal.
    Le,
    /// `>`: greater than.
    Gt,
    /// `>=`: greater than or equal.
    Ge,
    /// `=` or `==` (or no operator): equal.
    Eq,
    /// `!=`: not equal.
    Ne,
}

/// The filter of a dataset.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ItemFilter {
    /// Start of the `datetime` range, inclusive (a bare date from its first instant); None = open.
    pub start: Option<DateTime<Utc>>,
    /// End of the `datetime` range, inclusive (a bare date to its last millisecond); None = open.
    pub end: Option<DateTime<Utc>>,
    /// `[minlon, minlat, maxlon, maxlat]` in EPSG:4326 that an Item's bbox must intersect.
    pub bbox: Option<[f64; 4]>,
    /// Collection ids an Item must belong to; None = any.
    pub collections: Option<Vec<String>>,
    /// Property comparisons every accepted Item passes.
    pub predicates: Vec<Predicate>,
}

fn parse_instant(s: &str, end: bool) -> Result<Option<DateTime<Utc>>, String> {
    let s = s.trim();
    if s.is_empty() || s == ".." {
        return Ok(None);
    }
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(Some(t.with_timezone(&Utc)));
    }
    let d = NaiveDate::parse_from_str(s, "%Y-%m-%d").map_err(|_| format!("{s:?} is not a date or RFC 3339 time"))?;
    // A bare date covers its whole day.
    let t = if end {
        d.and_hms_milli_opt(23, 59, 59, 999)
    } else {
        d.and_hms_opt(0, 0, 0)
    };
    Ok(t.map(|t| t.and_utc()))
}

fn parse_predicate(key: &str, v: &toml::Value) -> Result<Predicate, String> {
    let text = match v {
        toml::Value::String(s) => s.trim().to_string(),
        toml::Value::Integer(i) => {
            return Ok(Predicate {
                key: key.into(),
                op: Op::Eq,
                value: Value::from(*i),
            });
        }
        toml::Value::Float(f) => {
            return Ok(Predicate {
                key: key.into(),
                op: Op::Eq,
                value: Value::from(*f),
            });
        }
        toml::Value::Boolean(b) => {
            return Ok(Predicate {
                key: key.into(),
                op: Op::Eq,
                value: Value::from(*b),
            });
        }
        other => return Err(format!("{key}: {other} is not a predicate")),
    };
    let ops = [
        ("<=", Op::Le),
        (">=", Op::Ge),
        ("!=", Op::Ne),
        ("==", Op::Eq),
        ("<", Op::Lt),
        (">", Op::Gt),
        ("=", Op::Eq),
    ];
    let (op, rest) = ops
        .iter()
        .find_map(|(sym, op)| text.strip_prefix(sym).map(|r| (*op, r.trim())))
        .unwrap_or((Op::Eq, text.as_str()));
    let value = match rest.parse::<f64>() {
        Ok(n) => Value::from(n),
        Err(_) if matches!(op, Op::Eq | Op::Ne) => Value::from(rest.trim_matches('"')),
        Err(_) => return Err(format!("{key}: {text:?} compares with {rest:?}, which is not a number")),
    };
    Ok(Predicate {
        key: key.into(),
        op,
        value,
    })
}

impl ItemFilter {
    /// The property names the predicates compare (what a parse must keep for
    /// [`ItemFilter::accepts`]: see `KeepProperties::Named`).
    pub fn property_keys(&self) -> impl Iterator<Item = &str> {
        self.predicates.iter().map(|p| p.key.as_str())
    }

    /// From the dataset's `filter` table.
    pub fn from_table(t: &toml::Table) -> Result<Self, String> {
        let mut f = ItemFilter::default();
        for (k, v) in t {
            match k.as_str() {
                "datetime" => {
                    let s = v
                        .as_str()
                        .ok_or("datetime: expected \"START/END\" (either may be ..)")?;
                    let (a, b) = s.split_once('/').unwrap_or((s, s));
                    f.start = parse_instant(a, false).map_err(|e| format!("datetime: {e}"))?;
                    f.end = parse_instant(b, true).map_err(|e| format!("datetime: {e}"))?;
                }
                "bbox" => {
                    let a = v.as_array().ok_or("bbox: expected [minlon, minlat, maxlon, maxlat]")?;
                    let n: Vec<f64> = a
                        .iter()
                        .map(|x| x.as_float().or_else(|| x.as_integer().map(|i| i as f64)))
                        .collect::<Option<_>>()
                        .ok_or("bbox: numbers expected")?;
                    match n.as_slice() {
                        [a, b, c, d] if a <= c && b <= d => f.bbox = Some([*a, *b, *c, *d]),
                        _ => return Err("bbox: expected [minlon, minlat, maxlon, maxlat]".into()),
                    }
                }
                "collections" => {
                    let a = v.as_array().ok_or("collections: expected a list of ids")?;
                    f.collections = Some(
                        a.iter()
                            .map(|x| x.as_str().map(str::to_string))
                            .collect::<Option<_>>()
                            .ok_or("collections: strings expected")?,
                    );
                }
                key => f.predicates.push(parse_predicate(key, v)?),
            }
        }
        Ok(f)
    }

    /// Whether `item` passes.
    pub fn accepts(&self, item: &Item) -> bool {
        if self.start.is_some() || self.end.is_some() {
            // An Item's time span: [start, end], or its datetime.
            let lo = item.start.or(item.datetime);
            let hi = item.end.or(item.datetime);
            let (Some(lo), Some(hi)) = (lo, hi) else {
                return false;
            };
            if self.start.is_some_and(|s| hi < s) || self.end.is_some_and(|e| lo > e) {
                return false;
            }
        }
        if let Some(b) = self.bbox {
            let Some(ib) = item.bbox else {
                return false;
            };
            if ib[0] > b[2] || ib[2] < b[0] || ib[1] > b[3] || ib[3] < b[1] {
                return false;
            }
        }
        if let Some(c) = &self.collections
            && !item.collection.as_ref().is_some_and(|ic| c.contains(ic))
        {
            return false;
        }
        self.predicates.iter().all(|p| p.accepts(item.properties.get(&p.key)))
    }
}

impl Predicate {
    fn accepts(&self, v: Option<&Value>) -> bool {
        let Some(v) = v else {
            return false;
        };
        match (v.as_f64(), self.value.as_f64()) {
            (Some(a), Some(b)) => match self.op {
                Op::Lt => a < b,
                Op::Le => a <= b,
                Op::Gt => a > b,
                Op::Ge => a >= b,
                Op::Eq => a == b,
                Op::Ne => a != b,
            },
            _ => match self.op {
                Op::Eq => v == &self.value,
                Op::Ne => v != &self.value,
                _ => false,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(cc: f64, date: &str, coll: &str) -> Item {
        let v = serde_json::json!({"type": "Feature", "id": "x", "collection": coll, "bbox": [11.0, 46.0, 12.0, 47.0],
            "properties": {"datetime": date, "eo:cloud_cover": cc, "platform": "sentinel-2a"}, "assets": {}});
        Item::from_json(&v, "d", &|h| h.to_string()).unwrap()
    }

    #[test]
    fn filters_by_time_space_collection_and_properties() {
        let t: toml::Table = toml::from_str(
            r#"datetime = "2024-06-01/2024-08-31"
bbox = [11.5, 45.0, 13.0, 46.5]
collections = ["s2"]
"eo:cloud_cover" = "<= 20"
platform = "sentinel-2a""#,
        )
        .unwrap();
        let f = ItemFilter::from_table(&t).unwrap();
        assert!(f.accepts(&item(10.0, "2024-08-31T12:00:00Z", "s2")));
        assert!(!f.accepts(&item(30.0, "2024-07-01T00:00:00Z", "s2")));
        assert!(!f.accepts(&item(10.0, "2024-09-01T00:00:00Z", "s2")));
        assert!(!f.accepts(&item(10.0, "2024-07-01T00:00:00Z", "l8")));
        let open: toml::Table = toml::from_str(r#"datetime = "../2024-01-01""#).unwrap();
        assert!(
            !ItemFilter::from_table(&open)
                .unwrap()
                .accepts(&item(0.0, "2024-07-01T00:00:00Z", "s2"))
        );
        for bad in [
            r#"datetime = "yesterday/..""#,
            "bbox = [1, 2, 3]",
            r#"x = "< many""#,
            "collections = [1]",
        ] {
            let t: toml::Table = toml::from_str(bad).unwrap();
            assert!(ItemFilter::from_table(&t).is_err(), "{bad}");
        }
    }
}
