//! Range coalescing: turns the byte ranges of the blocks a window needs into few requests.
//!
//! Ranges closer than `max_gap` bytes are merged (the gap is fetched and thrown away, which
//! is cheaper than another round trip), but a merged request never grows past `max_len`, so
//! large reads still go out as independent, parallel requests. Pure; no I/O.

use std::ops::Range;

/// How aggressively to merge neighbouring ranges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoalescePolicy {
    /// Largest gap between two ranges that is still fetched in one request.
    pub max_gap: u64,
    /// Largest merged request; a single range longer than this is kept as it is.
    pub max_len: u64,
}

impl Default for CoalescePolicy {
    fn default() -> Self {
        Self {
            max_gap: 64 * 1024,
            max_len: 8 * 1024 * 1024,
        }
    }
}

/// Merges `ranges` (any order, may overlap or repeat) into sorted, disjoint requests.
/// Empty ranges are dropped. Every input range lies inside exactly one output range.
pub fn coalesce(ranges: &[Range<u64>], policy: CoalescePolicy) -> Vec<Range<u64>> {
    let mut sorted: Vec<Range<u64>> = ranges.iter().filter(|r| r.start < r.end).cloned().collect();
    sorted.sort_by_key(|r| (r.start, r.end));
    let mut out: Vec<Range<u64>> = Vec::with_capacity(sorted.len());
    for r in sorted {
        if let Some(last) = out.last_mut() {
            let overlaps = r.start <= last.end;
            let close = r.start - last.end.min(r.start) <= policy.max_gap;
            let merged_len = r.end.max(last.end) - last.start;
            if overlaps || (close && merged_len <= policy.max_len) {
                last.end = last.end.max(r.end);
                continue;
            }
        }
        out.push(r);
    }
    out
}

/// Index of the merged request that contains `range` (merged must come from [`coalesce`]).
pub fn containing(merged: &[Range<u64>], range: &Range<u64>) -> Option<usize> {
    let idx = merged.partition_point(|m| m.end <= range.start);
    merged
        .get(idx)
        .filter(|m| m.start <= range.start && range.end <= m.end)
        .map(|_| idx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const P: CoalescePolicy = CoalescePolicy {
        max_gap: 10,
        max_len: 100,
    };

    #[test]
    fn merges_small_gaps_only() {
        let got = coalesce(&[0..10, 15..20, 40..50], P);
        assert_eq!(got, vec![0..20, 40..50]);
    }

    #[test]
    fn respects_max_len() {
        let got = coalesce(&[0..60, 61..120], P);
        assert_eq!(got, vec![0..60, 61..120]);
    }

    #[test]
    fn overlapping_always_merge_and_empty_dropped() {
        let got = coalesce(&[50..60, 0..80, 5..5, 70..200], P);
        assert_eq!(got, vec![0..200]);
    }

    #[test]
    fn unsorted_and_duplicates() {
        let got = coalesce(&[30..40, 0..10, 30..40, 12..14], P);
        assert_eq!(got, vec![0..14, 30..40]);
        assert_eq!(containing(&got, &(12..14)), Some(0));
        assert_eq!(containing(&got, &(30..40)), Some(1));
        assert_eq!(containing(&got, &(20..25)), None);
    }

    proptest! {
        #[test]
        fn every_range_is_covered(raw in prop::collection::vec((0u64..10_000, 1u64..500), 0..60),
                                  gap in 0u64..2000, max_len in 1u64..5000) {
            let ranges: Vec<Range<u64>> = raw.iter().map(|&(s, l)| s..s + l).collect();
            let policy = CoalescePolicy { max_gap: gap, max_len };
            let merged = coalesce(&ranges, policy);
            for w in merged.windows(2) {
                prop_assert!(w[0].end < w[1].start);
            }
            for r in &ranges {
                prop_assert!(containing(&merged, r).is_some());
            }
            prop_assert!(merged.len() <= ranges.len());
        }
    }
}
