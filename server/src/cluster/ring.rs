//! Rendezvous (highest-random-weight) hashing: the owner of a key is the member with the
//! highest score for it. Every replica computes the same owner from the same member list,
//! and when a member leaves only the keys it owned move (each to its next-best member).

use crate::rng::{digest as hash, finish as mix};

/// The score of `member` (its address hash) for a key hash.
fn score(member: u64, key: u64) -> u64 {
    mix(member.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ key)
}

/// The owner of `key` among `members` (ties broken by address so every replica agrees).
pub fn owner<'a>(key: u64, members: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    members.into_iter().max_by_key(|m| (score(hash(m.as_bytes()), key), *m))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_are_balanced_and_move_only_when_their_member_leaves() {
        let all = ["10.0.0.1:50051", "10.0.0.2:50051", "10.0.0.3:50051"];
        let mut counts = [0usize; 3];
        let mut moved = 0;
        for k in 0..30_000u64 {
            let key = hash(&k.to_le_bytes());
            let o = owner(key, all).unwrap();
            counts[all.iter().position(|m| *m == o).unwrap()] += 1;
            // Remove the third member: only its keys move.
            let after = owner(key, all[..2].iter().copied()).unwrap();
            if after != o {
                assert_eq!(o, all[2]);
                moved += 1;
            }
        }
        for c in counts {
            assert!((9_000..11_000).contains(&c), "{counts:?}");
        }
        assert_eq!(moved, counts[2]);
        assert_eq!(owner(1, std::iter::empty::<&str>()), None);
        // Order of the list does not matter.
        let key = hash(b"tile");
        assert_eq!(owner(key, all), owner(key, [all[2], all[0], all[1]]));
    }
}
