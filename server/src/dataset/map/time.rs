//! Time series of a layer: which dates a sample stacks. Items of one UTC day are one date
//! (mosaicked by priority); a rule picks `T` of the dates that meet the footprint:
//! - `latest`: the `T` latest up to the drawn Item's day (missing steps first, so the
//!   drawn date is always the last step);
//! - `even`: `T` instants evenly spaced over a range (its first and last day for `T > 1`,
//!   its middle for `T = 1`), each taking the date nearest to it within half a spacing
//!   (earlier on a tie; the half-open reaches never overlap, so no date repeats);
//! - `season`: every date in a month-day window of the drawn Item's year (a window that
//!   wraps the new year starts the year before), oldest first, the first `T` (missing
//!   steps last).

use chrono::{Datelike, NaiveDate};

use crate::config::LayerConfig;

/// Most dates one layer may stack.
pub const MAX_TIME_STEPS: u32 = 64;

/// How a layer chooses its dates.
#[derive(Debug, Clone, PartialEq)]
pub enum TimeRule {
    Latest,
    Even { start: NaiveDate, end: NaiveDate },
    Season { start: (u32, u32), end: (u32, u32) },
}

/// A layer's time series.
#[derive(Debug, Clone, PartialEq)]
pub struct TimeSpec {
    pub steps: usize,
    pub rule: TimeRule,
}

fn month_day(s: &str) -> Result<(u32, u32), String> {
    let bad = || format!("season day {s:?} is not MM-DD");
    let (m, d) = s.trim().split_once('-').ok_or_else(bad)?;
    let (m, d): (u32, u32) = (m.parse().map_err(|_| bad())?, d.parse().map_err(|_| bad())?);
    // 2024 is a leap year: 02-29 is a valid season bound.
    NaiveDate::from_ymd_opt(2024, m, d).ok_or_else(bad)?;
    Ok((m, d))
}

fn day(s: &str) -> Result<NaiveDate, String> {
    NaiveDate::parse_from_str(s.trim(), "%Y-%m-%d").map_err(|_| format!("time_range day {s:?} is not YYYY-MM-DD"))
}

/// A month-day in `year` (02-29 becomes 02-28 in other years).
fn in_year(year: i32, (m, d): (u32, u32)) -> NaiveDate {
    NaiveDate::from_ymd_opt(year, m, d)
        .or_else(|| NaiveDate::from_ymd_opt(year, m, d - 1))
        .unwrap_or(NaiveDate::MIN)
}

impl TimeSpec {
    /// The layer's time series, checked (None: the layer has one date).
    pub fn from_layer(l: &LayerConfig) -> Result<Option<Self>, String> {
        let steps = l.time_steps.unwrap_or(0);
        if steps == 0 {
            if l.time_rule.is_some() || l.time_range.is_some() || l.season.is_some() {
                return Err("time_rule, time_range and season need time_steps".into());
            }
            return Ok(None);
        }
        if steps > MAX_TIME_STEPS {
            return Err(format!("time_steps {steps} (at most {MAX_TIME_STEPS})"));
        }
        let rule = match l.time_rule.as_deref().unwrap_or("latest") {
            "latest" => TimeRule::Latest,
            "even" => {
                let [a, b] = l.time_range.as_ref().ok_or("time_rule even needs time_range")?;
                let (start, end) = (day(a)?, day(b)?);
                if end < start {
                    return Err(format!("time_range {a}..{b} ends before it starts"));
                }
                TimeRule::Even { start, end }
            }
            "season" => {
                let [a, b] = l.season.as_ref().ok_or("time_rule season needs season")?;
                TimeRule::Season {
                    start: month_day(a)?,
                    end: month_day(b)?,
                }
            }
            other => return Err(format!("time_rule {other:?} (latest, even, season)")),
        };
        if l.time_range.is_some() && !matches!(rule, TimeRule::Even { .. }) {
            return Err("time_range applies to time_rule even".into());
        }
        if l.season.is_some() && !matches!(rule, TimeRule::Season { .. }) {
            return Err("season applies to time_rule season".into());
        }
        Ok(Some(Self {
            steps: steps as usize,
            rule,
        }))
    }

    /// The dates of one sample, oldest first (None: a missing step), from the dates that
    /// meet its footprint (`dates`: ascending, distinct) and the drawn Item's day.
    pub fn select(&self, dates: &[NaiveDate], reference: Option<NaiveDate>) -> Vec<Option<NaiveDate>> {
        let t = self.steps;
        match &self.rule {
            TimeRule::Latest => {
                let upto = match reference {
                    Some(r) => dates.partition_point(|d| *d <= r),
                    None => dates.len(),
                };
                let picked = &dates[upto.saturating_sub(t)..upto];
                let mut out = vec![None; t - picked.len()];
                out.extend(picked.iter().copied().map(Some));
                out
            }
            TimeRule::Even { start, end } => {
                let span = (*end - *start).num_seconds() as f64;
                let spacing = if t > 1 { span / (t - 1) as f64 } else { span.max(1.0) };
                (0..t)
                    .map(|k| {
                        let target = if t > 1 { spacing * k as f64 } else { span / 2.0 };
                        // Reach [target − s/2, target + s/2), inside the range.
                        let lo = target - spacing / 2.0;
                        let hi = target + spacing / 2.0;
                        dates
                            .iter()
                            .copied()
                            .filter(|d| *d >= *start && *d <= *end)
                            .map(|d| (d, (d - *start).num_seconds() as f64))
                            .filter(|&(_, s)| s >= lo && s < hi)
                            .min_by(|a, b| {
                                (a.1 - target)
                                    .abs()
                                    .total_cmp(&(b.1 - target).abs())
                                    .then(a.0.cmp(&b.0))
                            })
                            .map(|(d, _)| d)
                    })
                    .collect()
            }
            TimeRule::Season { start, end } => {
                let year = reference.or(dates.last().copied()).map_or(1970, |d| d.year());
                let wraps = start > end;
                let from = in_year(if wraps { year - 1 } else { year }, *start);
                let to = in_year(year, *end);
                let mut out: Vec<Option<NaiveDate>> = dates
                    .iter()
                    .copied()
                    .filter(|d| *d >= from && *d <= to)
                    .take(t)
                    .map(Some)
                    .collect();
                out.resize(t, None);
                out
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> NaiveDate {
        NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap()
    }

    fn layer(steps: u32, rule: &str, range: Option<[&str; 2]>, season: Option<[&str; 2]>) -> LayerConfig {
        LayerConfig {
            name: "s2".into(),
            assets: vec!["B02".into()],
            time_steps: Some(steps),
            time_rule: Some(rule.into()),
            time_range: range.map(|r| r.map(String::from)),
            season: season.map(|r| r.map(String::from)),
            ..Default::default()
        }
    }

    fn dates() -> Vec<NaiveDate> {
        [
            "2024-01-10",
            "2024-03-05",
            "2024-04-20",
            "2024-06-01",
            "2024-07-15",
            "2024-10-01",
            "2025-02-01",
        ]
        .iter()
        .map(|s| d(s))
        .collect()
    }

    #[test]
    fn latest_takes_the_last_dates_up_to_the_drawn_one() {
        let s = TimeSpec::from_layer(&layer(3, "latest", None, None)).unwrap().unwrap();
        let got = s.select(&dates(), Some(d("2024-06-01")));
        assert_eq!(
            got,
            vec![Some(d("2024-03-05")), Some(d("2024-04-20")), Some(d("2024-06-01"))]
        );
        let got = s.select(&dates(), Some(d("2024-02-01")));
        assert_eq!(got, vec![None, None, Some(d("2024-01-10"))]);
        assert_eq!(s.select(&dates(), None).last(), Some(&Some(d("2025-02-01"))));
    }

    #[test]
    fn even_takes_the_nearest_date_to_each_instant() {
        let s = TimeSpec::from_layer(&layer(4, "even", Some(["2024-01-01", "2024-10-01"]), None))
            .unwrap()
            .unwrap();
        // Instants: Jan 1, Apr 1, Jul 1, Oct 1 (spacing ~91.3 days).
        let got = s.select(&dates(), Some(d("2024-06-01")));
        assert_eq!(
            got,
            vec![
                Some(d("2024-01-10")),
                Some(d("2024-04-20")),
                Some(d("2024-07-15")),
                Some(d("2024-10-01"))
            ]
        );
        // Nothing within half a spacing of an instant: a missing step, never a repeat.
        let sparse = [d("2024-01-02")];
        assert_eq!(s.select(&sparse, None), vec![Some(d("2024-01-02")), None, None, None]);
    }

    #[test]
    fn season_takes_dates_of_the_drawn_year_in_order() {
        let s = TimeSpec::from_layer(&layer(3, "season", None, Some(["04-01", "09-30"])))
            .unwrap()
            .unwrap();
        assert_eq!(
            s.select(&dates(), Some(d("2024-05-01"))),
            vec![Some(d("2024-04-20")), Some(d("2024-06-01")), Some(d("2024-07-15"))]
        );
        let wrap = TimeSpec::from_layer(&layer(3, "season", None, Some(["11-01", "02-28"])))
            .unwrap()
            .unwrap();
        assert_eq!(
            wrap.select(&dates(), Some(d("2025-02-01"))),
            vec![Some(d("2025-02-01")), None, None]
        );
    }

    #[test]
    fn bad_keys_are_refused() {
        assert!(TimeSpec::from_layer(&layer(3, "median", None, None)).is_err());
        assert!(TimeSpec::from_layer(&layer(3, "even", None, None)).is_err());
        assert!(TimeSpec::from_layer(&layer(3, "season", None, Some(["13-01", "02-01"]))).is_err());
        assert!(TimeSpec::from_layer(&layer(3, "latest", Some(["2024-01-01", "2024-02-01"]), None)).is_err());
        assert!(TimeSpec::from_layer(&layer(100, "latest", None, None)).is_err());
        assert!(TimeSpec::from_layer(&layer(3, "even", Some(["2024-05-01", "2024-02-01"]), None)).is_err());
    }
}
