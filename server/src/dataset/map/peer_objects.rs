//! Which objects of a map-space dataset another replica may ask this one for: the hrefs
//! of the assets its layers read, in every selected Item. A fleet shares map-space tiles
//! as it shares scene tiles (`cluster::FleetTiles` asks a tile's owner); the owner opens
//! the asset by URL only when this index holds it, so a peer can never make a replica
//! read an object outside its catalog.
//!
//! The index keeps a 64-bit digest and an Item per asset (16 bytes, sorted), not the
//! hrefs again: a catalog of millions of assets costs tens of MiB, not their URLs twice.
//! A digest match is confirmed against the Item's own href, so a collision can only cost
//! a lookup. Opens headers through the dataset's shared cache; never fetches a tile.

use std::hash::{Hash, Hasher};

use super::{LayerSpec, MapSpace};
use crate::error::Result;
use crate::tiles::{TileObject, open};
use cogfeed_stac::Item;

/// Asset hrefs of a dataset's layers, by digest.
#[derive(Debug, Default)]
pub struct PeerObjects {
    /// (digest of the href, Item index), sorted.
    entries: Vec<(u64, u32)>,
    /// The asset keys the layers read (a few).
    keys: Vec<String>,
}

fn digest(href: &str) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    href.hash(&mut h);
    h.finish()
}

impl PeerObjects {
    /// The index of every asset `layers` read in `items`.
    pub fn new(items: &[Item], layers: &[LayerSpec]) -> Self {
        let mut keys: Vec<String> = layers.iter().flat_map(|l| l.assets.iter().cloned()).collect();
        keys.sort_unstable();
        keys.dedup();
        Self::of_keys(items, keys)
    }

    fn of_keys(items: &[Item], keys: Vec<String>) -> Self {
        let mut entries = Vec::new();
        for (i, item) in items.iter().enumerate() {
            for key in &keys {
                if let Some(asset) = item.assets.get(key) {
                    entries.push((digest(&asset.href), i as u32));
                }
            }
        }
        entries.sort_unstable();
        entries.dedup();
        Self { entries, keys }
    }

    /// Whether `url` is the href of an asset the layers read in `items` (those the index
    /// was built from).
    pub fn holds(&self, url: &str, items: &[Item]) -> bool {
        let d = digest(url);
        let from = self.entries.partition_point(|&(e, _)| e < d);
        self.entries[from..]
            .iter()
            .take_while(|&&(e, _)| e == d)
            .any(|&(_, i)| {
                items.get(i as usize).is_some_and(|item| {
                    self.keys
                        .iter()
                        .any(|k| item.assets.get(k).is_some_and(|a| a.href == url))
                })
            })
    }

    /// Assets indexed.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no asset is indexed.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl MapSpace {
    /// The asset `url` opened for a peer, when one of this dataset's layers reads it
    /// (None otherwise): through the shared header cache, so a header the samples opened
    /// costs nothing more.
    pub async fn peer_object(&self, url: &str) -> Option<Result<TileObject>> {
        if !self.peer_objects.holds(url, &self.items) {
            return None;
        }
        Some(open(&self.stores, &self.headers, url, &self.options).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(id: &str, assets: &[(&str, &str)]) -> Item {
        let assets: serde_json::Map<String, serde_json::Value> = assets
            .iter()
            .map(|(k, href)| (k.to_string(), serde_json::json!({ "href": href })))
            .collect();
        let doc = serde_json::json!({
            "type": "Feature", "stac_version": "1.0.0", "id": id,
            "geometry": null, "properties": {"datetime": "2024-01-01T00:00:00Z"},
            "links": [], "assets": assets,
        });
        Item::from_json(&doc, "items.json", &|h: &str| h.to_string()).unwrap()
    }

    #[test]
    fn only_the_layers_assets_of_the_selected_items_are_held() {
        let items = vec![
            item("a", &[("B04", "s3://b/a/B04.tif"), ("thumb", "s3://b/a/thumb.tif")]),
            item("b", &[("B04", "s3://b/b/B04.tif")]),
        ];
        let index = PeerObjects::of_keys(&items, vec!["B04".into()]);
        assert_eq!(index.len(), 2);
        assert!(index.holds("s3://b/a/B04.tif", &items));
        assert!(index.holds("s3://b/b/B04.tif", &items));
        // Another asset of a selected Item, another object, a prefix of an href: refused.
        assert!(!index.holds("s3://b/a/thumb.tif", &items));
        assert!(!index.holds("s3://b/c/B04.tif", &items));
        assert!(!index.holds("s3://b/a/B04", &items));
        assert!(!index.holds("", &items));
    }
}
