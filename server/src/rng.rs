//! Deterministic pseudo-random numbers for samplers, augmentation and demo data, and the
//! stable digest that names tiles across processes ([`digest`]).
//!
//! Written here on purpose: a stream's bytes must be a pure function of its request for as
//! long as datasets live, so the generator cannot change with a dependency's version.
//! SplitMix64 (Steele, Lea, Flood 2014) keyed by the inputs, and Lemire's unbiased bounded
//! integers.

/// One SplitMix64 step: a well-mixed 64-bit function of `x`.
pub fn mix(x: u64) -> u64 {
    finish(x.wrapping_add(0x9E37_79B9_7F4A_7C15))
}

/// SplitMix64's finaliser alone: a bijective, well-mixed 64-bit function of `z`.
pub fn finish(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// FNV-1a over `bytes`, then [`finish`]: the same value in every process and build (unlike
/// `std`'s hashers, whose algorithm may change), so replicas agree on tile owners and on
/// the tile ids their plans name.
pub fn digest(bytes: &[u8]) -> u64 {
    digest_parts([bytes])
}

/// [`digest`] of `parts` laid end to end, without copying them together.
pub fn digest_parts<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in parts.into_iter().flatten() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    finish(h)
}

/// A keyed hash of several values (order matters).
pub fn key(parts: &[u64]) -> u64 {
    parts.iter().fold(0x2545_F491_4F6C_DD1D, |h, &p| mix(h ^ mix(p)))
}

/// A small deterministic generator.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded by `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0)
    }

    /// Uniform integer in `0..n` (n > 0), without modulo bias.
    pub fn below(&mut self, n: u64) -> u64 {
        loop {
            let m = (self.next_u64() as u128) * (n as u128);
            let low = m as u64;
            if low >= n.wrapping_neg() % n {
                return (m >> 64) as u64;
            }
        }
    }

    /// Uniform float in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A seeded permutation of `0..n` (Fisher-Yates).
pub fn permutation(n: usize, seed: u64) -> Vec<u32> {
    let mut v: Vec<u32> = (0..n as u32).collect();
    let mut rng = Rng::new(seed);
    for i in (1..n).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        v.swap(i, j);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_values() {
        // Pinned: changing these changes every dataset's batches.
        assert_eq!(mix(0), 0xE220_A839_7B1D_CDAF);
        // Pinned too: replicas of different builds must agree on tile owners and plan ids.
        assert_eq!(digest(b"tile"), 0x7BCE_735B_61BA_4EC5);
        assert_eq!(digest(b""), 0xF52A_15E9_A9B5_E89B);
        assert_eq!(digest_parts([&b"ti"[..], b"", b"le"]), digest(b"tile"));
        assert_eq!(permutation(5, 7), permutation(5, 7));
        let mut p = permutation(1000, 3);
        p.sort_unstable();
        assert_eq!(p, (0..1000).collect::<Vec<u32>>());
    }

    #[test]
    fn below_is_in_range_and_spread() {
        let mut r = Rng::new(1);
        let mut seen = [0u32; 10];
        for _ in 0..10_000 {
            seen[r.below(10) as usize] += 1;
        }
        assert!(seen.iter().all(|&c| (800..1200).contains(&c)), "{seen:?}");
    }
}
