//! Binomial and multinomial counts for locality-ordered `random` epochs: how many of an
//! epoch's uniform draws fall in each block, drawn with the law `random` gives them.
//!
//! Written here for the reason `rng` is: a stream's order is a pure function of its request
//! for as long as datasets live, so the sampler cannot change with a dependency's version.
//! Must never materialise the draws: cost grows with the square root of the counts.

use crate::rng::Rng;

/// A Binomial(n, p) count by inversion, walking outward from the mode: the outcomes are
/// enumerated in a fixed order (mode, mode-1, mode+1, ...) and one uniform picks the one
/// whose cumulative mass covers it, so the law is exact up to the f64 rounding of the
/// probabilities (about 1e-7 relative at the mode for n near 1e8, 1e-13 for n below 1e4).
/// Expected steps: about the standard deviation.
pub fn binomial(r: &mut Rng, n: u64, p: f64) -> u64 {
    if n == 0 || p.is_nan() || p <= 0.0 {
        return 0;
    }
    if p >= 1.0 {
        return n;
    }
    if p > 0.5 {
        return n - binomial(r, n, 1.0 - p);
    }
    let q = 1.0 - p;
    let ratio = p / q;
    let nf = n as f64;
    let mode = (((n + 1) as f64) * p).floor().min(nf) as u64;
    let ln_at_mode = ln_gamma(nf + 1.0) - ln_gamma(mode as f64 + 1.0) - ln_gamma((n - mode) as f64 + 1.0)
        + mode as f64 * p.ln()
        + (n - mode) as f64 * q.ln();
    let at_mode = ln_at_mode.exp();
    let mut u = r.unit() - at_mode;
    if u < 0.0 {
        return mode;
    }
    let (mut lo, mut hi) = (mode, mode);
    let (mut f_lo, mut f_hi) = (at_mode, at_mode);
    while lo > 0 || hi < n {
        if lo > 0 {
            // pmf(k-1) = pmf(k) * k / (n-k+1) * q/p
            f_lo *= lo as f64 / (n - lo + 1) as f64 / ratio;
            lo -= 1;
            u -= f_lo;
            if u < 0.0 {
                return lo;
            }
        }
        if hi < n {
            // pmf(k+1) = pmf(k) * (n-k) / (k+1) * p/q
            f_hi *= (n - hi) as f64 / (hi + 1) as f64 * ratio;
            hi += 1;
            u -= f_hi;
            if u < 0.0 {
                return hi;
            }
        }
        if f_lo < 1e-300 && f_hi < 1e-300 {
            break;
        }
    }
    // What f64 rounding left over (mass below 1e-7): the mode.
    mode
}

/// How many of `n` uniform draws over every unit of `sizes` land in each part: a
/// multinomial count with probabilities `sizes[i] / Σ sizes`, split by halves (one binomial
/// per inner node), so `len` parts cost `len - 1` binomials. Parts of size 0 get 0.
pub fn multinomial(r: &mut Rng, n: u64, sizes: &[u64]) -> Vec<u64> {
    let mut counts = vec![0u64; sizes.len()];
    let mut prefix = Vec::with_capacity(sizes.len() + 1);
    prefix.push(0u128);
    for &s in sizes {
        prefix.push(prefix.last().copied().unwrap_or(0) + s as u128);
    }
    let mass = |a: usize, b: usize| prefix[b] - prefix[a];
    let mut stack = vec![(0usize, sizes.len(), n)];
    while let Some((a, b, k)) = stack.pop() {
        if k == 0 || a >= b {
            continue;
        }
        if b - a == 1 {
            counts[a] = k;
            continue;
        }
        let mid = a + (b - a) / 2;
        let total = mass(a, b);
        let left = if total == 0 {
            0
        } else {
            binomial(r, k, mass(a, mid) as f64 / total as f64)
        };
        stack.push((mid, b, k - left));
        stack.push((a, mid, left));
    }
    counts
}

/// ln Γ(x) for x > 0: the Stirling series past 20 (truncation below 1e-15), shifted down by
/// the recurrence below it.
fn ln_gamma(x: f64) -> f64 {
    let mut shift = 0.0;
    let mut x = x;
    while x < 20.0 {
        shift -= x.ln();
        x += 1.0;
    }
    let inv = 1.0 / x;
    let inv2 = inv * inv;
    let series = inv * (1.0 / 12.0 - inv2 * (1.0 / 360.0 - inv2 * (1.0 / 1260.0 - inv2 / 1680.0)));
    shift + (x - 0.5) * x.ln() - x + 0.5 * (2.0 * std::f64::consts::PI).ln() + series
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ln_gamma_matches_factorials() {
        let mut f = 1.0f64;
        for k in 1..30u32 {
            f *= k as f64;
            let want = f.ln();
            assert!((ln_gamma(k as f64 + 1.0) - want).abs() < 1e-12 * want.max(1.0), "{k}");
        }
        assert!((ln_gamma(0.5) - std::f64::consts::PI.sqrt().ln()).abs() < 1e-13);
    }

    /// Mean and variance of many draws against n·p and n·p·q, for small, medium and huge n.
    #[test]
    fn binomial_moments_match_the_law() {
        for &(n, p) in &[
            (7u64, 0.3),
            (40, 0.5),
            (1000, 0.01),
            (1000, 0.93),
            (100_000, 0.37),
            (50_000_000, 0.2),
        ] {
            let mut r = Rng::new(n ^ 0xABCD);
            let trials = 4000;
            let xs: Vec<f64> = (0..trials).map(|_| binomial(&mut r, n, p) as f64).collect();
            assert!(xs.iter().all(|&x| x <= n as f64));
            let mean = xs.iter().sum::<f64>() / trials as f64;
            let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (trials - 1) as f64;
            let (m, v) = (n as f64 * p, n as f64 * p * (1.0 - p));
            // 5 standard errors of the mean; the variance within 15 %.
            assert!(
                (mean - m).abs() < 5.0 * (v / trials as f64).sqrt(),
                "n {n} p {p}: mean {mean} vs {m}"
            );
            assert!((var / v - 1.0).abs() < 0.15, "n {n} p {p}: var {var} vs {v}");
        }
    }

    /// Small n: every outcome's frequency against its probability (chi-square, 10 cells).
    #[test]
    fn binomial_frequencies_pass_chi_square() {
        let (n, p) = (9u64, 0.35);
        let mut r = Rng::new(3);
        let trials = 40_000;
        let mut seen = [0f64; 10];
        for _ in 0..trials {
            seen[binomial(&mut r, n, p) as usize] += 1.0;
        }
        let mut pmf = (1.0 - p).powi(9);
        let mut chi = 0.0;
        for (k, &s) in seen.iter().enumerate() {
            let e = pmf * trials as f64;
            chi += (s - e).powi(2) / e;
            pmf *= (n - k as u64) as f64 / (k + 1) as f64 * p / (1.0 - p);
        }
        // 9 degrees of freedom: p = 0.001 at 27.9.
        assert!(chi < 27.9, "chi-square {chi}");
    }

    #[test]
    fn multinomial_counts_add_up_and_skip_empty_parts() {
        let mut r = Rng::new(11);
        let sizes = [5u64, 0, 100, 1, 0, 37, 1000];
        for n in [0u64, 1, 17, 1_000_000] {
            let c = multinomial(&mut r, n, &sizes);
            assert_eq!(c.iter().sum::<u64>(), n);
            assert_eq!((c[1], c[4]), (0, 0));
        }
    }
}
