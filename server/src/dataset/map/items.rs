//! Reading what a STAC dataset is made of: its documents (JSON, stac-geoparquet, a
//! prefix of Items), the order of its Items, and its points file, placed on the drawable
//! grids. Reads through the store layer; never opens a COG.

use super::*;

pub(super) fn doc_error(doc: &str, reason: String) -> Error {
    Error::Stac(StacError::NotStac {
        doc: doc.to_string(),
        reason,
    })
}

/// Reads every Item of `url`: a JSON document, a stac-geoparquet file, or a prefix (ending
/// in `/`) of `.json` Items, keeping the properties `keep` names.
pub async fn read_items(
    stores: &Stores,
    url: &str,
    rewrite: &HrefRewrite,
    keep: KeepProperties<'_>,
) -> Result<Vec<Item>> {
    async fn read_doc(
        stores: &Stores,
        url: String,
        rewrite: &HrefRewrite,
        keep: KeepProperties<'_>,
    ) -> Result<Vec<Item>> {
        let reader = stores.reader(&url)?;
        let prefix = reader
            .read_prefix(MAX_PARQUET_BYTES)
            .await
            .map_err(|e| Error::tiff(url.as_str(), e.into()))?;
        if prefix.object_size > prefix.bytes.len() as u64 {
            return Err(doc_error(
                &url,
                format!("{} bytes (at most {MAX_PARQUET_BYTES})", prefix.object_size),
            ));
        }
        if cogfeed_stac::is_parquet(&prefix.bytes) {
            let limit = decoded_limit();
            let mut items = cogfeed_stac::parse_geoparquet_bounded(&url, prefix.bytes, rewrite, limit)?;
            if let KeepProperties::Named(keys) = keep {
                for it in &mut items {
                    it.properties.retain(|k, _| keys.contains(k));
                }
            }
            return checked_ids(&url, items);
        }
        let limit = max_document_bytes();
        if prefix.object_size > limit {
            return Err(doc_error(
                &url,
                format!(
                    "{} bytes of JSON (at most {limit}: a quarter of the memory budget, at most 512 MiB; use stac-geoparquet for large catalogs)",
                    prefix.object_size
                ),
            ));
        }
        checked_ids(&url, parse_document_keeping(&url, &prefix.bytes, rewrite, keep)?)
    }
    if url.ends_with('/') {
        let urls = stores.list_suffixed(url, &[".json", ".geojson"]).await?;
        if urls.is_empty() {
            return Err(doc_error(url, "no .json Items under this prefix".into()));
        }
        let docs: Vec<Result<Vec<Item>>> = futures::stream::iter(urls)
            .map(|u| read_doc(stores, u, rewrite, keep))
            .buffered(LIST_CONCURRENCY)
            .collect()
            .await;
        let mut items = Vec::new();
        for d in docs {
            items.extend(d?);
        }
        return Ok(items);
    }
    read_doc(stores, url.to_string(), rewrite, keep).await
}

/// Longest Item id served: every sample lists the ids of the Items it was made from, so an
/// id is per-sample metadata (STAC ids are names like `S2B_33UUP_20240518_0_L2A`).
pub const MAX_ITEM_ID_BYTES: usize = 1024;
/// Most numeric point attributes served: each is a float64 `[B]` tensor of every batch and
/// an entry of every sample's metadata.
pub const MAX_POINT_ATTRIBUTES: usize = 256;
/// Longest point id or attribute name served.
pub const MAX_POINT_NAME_BYTES: usize = 256;

/// What one decoded stac-geoparquet or points file may take: what the daemon can afford
/// (its default memory budget, a quarter of the machine's or the cgroup's memory), at least
/// the crate's default.
fn decoded_limit() -> u64 {
    crate::memory::default_budget_bytes().max(cogfeed_stac::DEFAULT_MAX_DECODED_BYTES)
}

/// Largest JSON document read: a quarter of what the daemon can afford (its default
/// memory budget), between 16 and 512 MiB. A document is held while it is parsed, and its
/// Items cost at most about its size again (see `cogfeed_stac::parse_document_keeping`).
fn max_document_bytes() -> u64 {
    (crate::memory::default_budget_bytes() / 4).clamp(MIN_DOCUMENT_BYTES, MAX_DOCUMENT_BYTES)
}

/// `items`, or an error naming the first whose id is longer than [`MAX_ITEM_ID_BYTES`].
fn checked_ids(doc: &str, items: Vec<Item>) -> Result<Vec<Item>> {
    if let Some((k, item)) = items.iter().enumerate().find(|(_, i)| i.id.len() > MAX_ITEM_ID_BYTES) {
        return Err(doc_error(
            doc,
            format!(
                "Item {k} has an id of {} bytes (at most {MAX_ITEM_ID_BYTES}: ids travel with every sample)",
                item.id.len()
            ),
        ));
    }
    Ok(items)
}

pub(super) fn day(item: &Item) -> Option<NaiveDate> {
    item.datetime.map(|t| t.date_naive())
}

pub(super) fn sort_items(items: &mut [Item], keys: &[String]) {
    items.sort_by(|a, b| {
        for k in keys {
            let o = match k.as_str() {
                "datetime" => a.datetime.cmp(&b.datetime),
                "-datetime" => b.datetime.cmp(&a.datetime),
                "id" => a.id.cmp(&b.id),
                _ => b.id.cmp(&a.id),
            };
            if o != std::cmp::Ordering::Equal {
                return o;
            }
        }
        a.id.cmp(&b.id)
    });
}

/// Reads and parses the points file at `url`.
pub(super) async fn read_points(stores: &Stores, url: &str) -> Result<points::PointSet> {
    let reader = stores.reader(url)?;
    let prefix = reader
        .read_prefix(points::MAX_POINTS_BYTES)
        .await
        .map_err(|e| Error::tiff(url, e.into()))?;
    if prefix.object_size > prefix.bytes.len() as u64 {
        return Err(Error::InvalidArgument(format!(
            "points {url}: {} bytes (at most {})",
            prefix.object_size,
            points::MAX_POINTS_BYTES
        )));
    }
    let set = points::parse_bounded(url, &prefix.bytes, decoded_limit())
        .map_err(|m| Error::InvalidArgument(format!("points {url}: {m}")))?;
    let refuse = |m: String| Err(Error::InvalidArgument(format!("points {url}: {m}")));
    if set.names.len() > MAX_POINT_ATTRIBUTES {
        return refuse(format!(
            "{} numeric attributes (at most {MAX_POINT_ATTRIBUTES}: each travels with every sample; keep the targets in the file and the rest elsewhere)",
            set.names.len()
        ));
    }
    if let Some(n) = set.names.iter().find(|n| n.len() > MAX_POINT_NAME_BYTES) {
        return refuse(format!(
            "an attribute name of {} bytes (at most {MAX_POINT_NAME_BYTES})",
            n.len()
        ));
    }
    if let Some((k, id)) = set.ids.iter().enumerate().find(|(_, i)| i.len() > MAX_POINT_NAME_BYTES) {
        return refuse(format!(
            "point {k} has an id of {} bytes (at most {MAX_POINT_NAME_BYTES})",
            id.len()
        ));
    }
    Ok(set)
}

/// The centre pixel of each point in every drawable grid that holds it, priority order.
pub(super) fn place_points(
    set: &points::PointSet,
    crs: &Crs,
    items: &[Item],
    bboxes: &[[f64; 4]],
    index: &cogfeed_stac::BboxIndex,
    drawn: &[usize],
    grids: &[RefGrid],
) -> Vec<(usize, Vec<crate::sampler::PointCentre>)> {
    let mut scene_of = vec![None; items.len()];
    for (scene, &item) in drawn.iter().enumerate() {
        scene_of[item] = Some(scene);
    }
    let wgs = Crs::from_epsg(4326).ok();
    let to_lonlat = wgs.as_ref().map(|w| Transformer::new(crs, w));
    let mut out = Vec::new();
    for (p, &(x, y)) in set.coords.iter().enumerate() {
        let Some((lon, lat)) = to_lonlat.as_ref().and_then(|t| t.point(x, y)) else {
            continue;
        };
        let mut near = index.query([lon, lat, lon, lat]);
        near.sort_unstable();
        let mut inside = Vec::new();
        for i in near {
            let b = bboxes[i];
            let Some(scene) = scene_of[i] else { continue };
            if lon < b[0] || lon > b[2] || lat < b[1] || lat > b[3] {
                continue;
            }
            let g = &grids[scene];
            let Some((gx, gy)) = Transformer::new(crs, &g.crs).point(x, y) else {
                continue;
            };
            let Ok(inv) = g.transform.inverse() else { continue };
            let (col, row) = inv.apply(gx, gy);
            if col >= 0.0 && row >= 0.0 && col < g.width as f64 && row < g.height as f64 {
                inside.push([scene as u64, col.floor() as u64, row.floor() as u64]);
            }
        }
        if !inside.is_empty() {
            out.push((p, inside));
        }
    }
    out
}

/// Reads the Items of the document at `url` (a local path or any store URL; JSON, or
/// stac-geoparquet), as the daemon does.
pub async fn load_items(url: &str, rewrite: &HrefRewrite, store: &StoreOptions) -> Result<Vec<Item>> {
    read_items(&Stores::new(store.clone()), url, rewrite, KeepProperties::Scalars).await
}
