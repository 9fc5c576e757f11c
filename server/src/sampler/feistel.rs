//! A keyed bijection of `0..n`: how plans permute windows, points, mixture places and the
//! samples of a locality group without materialising anything.
//!
//! Must never change its output for a given (n, key): every stream's order depends on it.

use crate::rng;

/// A keyed bijection of `0..n` (4-round Feistel on the next even bit width, cycle walking).
#[derive(Debug, Clone)]
pub(crate) struct Feistel {
    n: u64,
    half_bits: u32,
    keys: [u64; 4],
}

impl Feistel {
    pub(crate) fn new(n: u64, seed: u64) -> Self {
        let bits = 64 - n.max(2).saturating_sub(1).leading_zeros();
        let half_bits = bits.div_ceil(2).max(1);
        let keys = [0, 1, 2, 3].map(|r| rng::key(&[seed, r]));
        Self { n, half_bits, keys }
    }

    fn round(&self, x: u64) -> u64 {
        let mask = (1u64 << self.half_bits) - 1;
        let (mut l, mut r) = (x >> self.half_bits, x & mask);
        for k in self.keys {
            let f = rng::mix(r ^ k) & mask;
            (l, r) = (r, l ^ f);
        }
        (l << self.half_bits) | r
    }

    pub(crate) fn apply(&self, i: u64) -> u64 {
        let mut x = self.round(i);
        while x >= self.n {
            x = self.round(x);
        }
        x
    }
}
