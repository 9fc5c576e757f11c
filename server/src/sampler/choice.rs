//! Which order an epoch is served in, as a dataset's `[datasets.sampling]` configures it
//! and a request overrides it: parsed and checked here, resolved into an [`Order`] once the
//! stream's default dial is known.
//!
//! Owns the precedence (request over dataset, the dial only with `order = "local"`). Must
//! never size the dial itself: the caller passes the default `open_blocks`.

use super::local::{LocalSpec, MAX_OPEN_BLOCKS, MAX_VISITS, Order};

/// An order as given by one source (a dataset's config or a request): each part unset
/// where that source leaves it to the next.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OrderChoice {
    /// `Some(true)`: `"local"`; `Some(false)`: `"random"`; None: not given.
    pub local: Option<bool>,
    pub open_blocks: Option<u32>,
    pub visits: Option<u32>,
}

impl OrderChoice {
    /// Parses `order` (`""` not given, `"random"`, `"local"`) and checks the dial's ranges.
    pub fn parse(order: &str, open_blocks: Option<u32>, visits: Option<u32>) -> Result<Self, String> {
        let local = match order {
            "" => None,
            "random" => Some(false),
            "local" => Some(true),
            other => {
                return Err(format!(
                    "order {:?} is not one of random, local",
                    other.chars().take(64).collect::<String>()
                ));
            }
        };
        if let Some(n) = open_blocks
            && !(1..=MAX_OPEN_BLOCKS).contains(&n)
        {
            return Err(format!("open_blocks {n} is not in 1..={MAX_OPEN_BLOCKS}"));
        }
        if let Some(n) = visits
            && !(1..=MAX_VISITS).contains(&n)
        {
            return Err(format!("visits {n} is not in 1..={MAX_VISITS}"));
        }
        if local == Some(false) && (open_blocks.is_some() || visits.is_some()) {
            return Err("open_blocks and visits apply to order = \"local\", not \"random\"".into());
        }
        Ok(Self {
            local,
            open_blocks,
            visits,
        })
    }

    /// A dataset's configured order: like [`parse`](Self::parse), and a dial needs `order =
    /// "local"` beside it.
    pub fn configured(order: Option<&str>, open_blocks: Option<u32>, visits: Option<u32>) -> Result<Self, String> {
        let c = Self::parse(order.unwrap_or(""), open_blocks, visits)?;
        if c.local != Some(true) && (open_blocks.is_some() || visits.is_some()) {
            return Err("open_blocks and visits need order = \"local\"".into());
        }
        Ok(c)
    }

    /// The order of a stream whose request gave `self` over a dataset configured with
    /// `dataset`; `default_open` sizes `open_blocks` when neither gives it. A request's dial
    /// on an order that resolves to random is refused.
    pub fn resolve(self, dataset: Self, default_open: impl FnOnce() -> u32) -> Result<Order, String> {
        let local = self.local.or(dataset.local).unwrap_or(false);
        if !local {
            if self.open_blocks.is_some() || self.visits.is_some() {
                return Err("open_blocks and visits apply to order = \"local\" (this stream's order is random)".into());
            }
            return Ok(Order::Random);
        }
        let open_blocks = self
            .open_blocks
            .or(dataset.open_blocks)
            .unwrap_or_else(|| default_open().clamp(1, MAX_OPEN_BLOCKS));
        let visits = self.visits.or(dataset.visits).unwrap_or(1);
        Ok(Order::Local(LocalSpec { open_blocks, visits }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local(open_blocks: u32, visits: u32) -> Order {
        Order::Local(LocalSpec { open_blocks, visits })
    }

    #[test]
    fn the_request_overrides_the_dataset_and_the_default_dial_fills_in() {
        let ds = OrderChoice::configured(Some("local"), None, Some(3)).unwrap();
        let none = OrderChoice::default();
        assert_eq!(none.resolve(ds, || 9), Ok(local(9, 3)));
        let req = OrderChoice::parse("", Some(2), None).unwrap();
        assert_eq!(req.resolve(ds, || 9), Ok(local(2, 3)));
        let random = OrderChoice::parse("random", None, None).unwrap();
        assert_eq!(random.resolve(ds, || 9), Ok(Order::Random));
        assert_eq!(none.resolve(none, || 9), Ok(Order::Random));
        let req = OrderChoice::parse("local", None, None).unwrap();
        assert_eq!(req.resolve(none, || 0), Ok(local(1, 1)));
        assert_eq!(req.resolve(none, || 100_000), Ok(local(MAX_OPEN_BLOCKS, 1)));
    }

    #[test]
    fn bad_orders_and_dials_are_refused() {
        assert!(
            OrderChoice::parse("blocked", None, None)
                .unwrap_err()
                .contains("random, local")
        );
        assert!(OrderChoice::parse("local", Some(0), None).is_err());
        assert!(OrderChoice::parse("local", Some(MAX_OPEN_BLOCKS + 1), None).is_err());
        assert!(OrderChoice::parse("local", None, Some(MAX_VISITS + 1)).is_err());
        assert!(OrderChoice::parse("random", Some(4), None).is_err());
        assert!(OrderChoice::configured(None, Some(4), None).is_err());
        // A request's dial on a dataset whose order is random.
        let req = OrderChoice::parse("", Some(4), None).unwrap();
        assert!(req.resolve(OrderChoice::default(), || 1).is_err());
    }
}
