//! What `cogfeed stac` prints: Items with time and bbox and, per asset, the resolved href,
//! CRS, shape and transform, as JSON or as text.

use serde_json::{Value, json};

use super::Item;

/// The Items as a JSON array.
pub fn describe(items: &[Item]) -> Value {
    Value::Array(
        items
            .iter()
            .map(|it| {
                let assets: serde_json::Map<String, Value> = it
                    .assets
                    .iter()
                    .map(|(k, a)| {
                        (
                            k.clone(),
                            json!({
                                "href": a.href,
                                "crs": a.epsg.map(|c| format!("EPSG:{c}")),
                                "shape": a.shape.map(|(r, c)| [r, c]),
                                "transform": a.transform.map(|t| t.to_stac()),
                                "data_type": a.bands.first().and_then(|b| b.data_type.clone()),
                                "nodata": a.bands.first().and_then(|b| b.nodata).map(|v| if v.is_nan() { json!("nan") } else { json!(v) }),
                                "bands": a.bands.len(),
                                "roles": a.roles,
                            }),
                        )
                    })
                    .collect();
                json!({
                    "id": it.id,
                    "collection": it.collection,
                    "datetime": it.datetime.map(|t| t.to_rfc3339()),
                    "bbox": it.bbox,
                    "assets": assets,
                })
            })
            .collect(),
    )
}

/// The Items as text, one block per Item.
pub fn describe_text(items: &[Item]) -> String {
    let mut out = format!("{} items\n", items.len());
    for it in items {
        out.push_str(&format!(
            "{}  {}  bbox {}\n",
            it.id,
            it.datetime.map(|t| t.to_rfc3339()).unwrap_or_else(|| "-".into()),
            it.bbox.map(|b| format!("{:?}", b)).unwrap_or_else(|| "-".into())
        ));
        for (k, a) in &it.assets {
            out.push_str(&format!(
                "  {k}: {}  {}  shape {}  transform {}\n",
                a.href,
                a.epsg.map(|c| format!("EPSG:{c}")).unwrap_or_else(|| "-".into()),
                a.shape.map(|(r, c)| format!("{r}x{c}")).unwrap_or_else(|| "-".into()),
                a.transform
                    .map(|t| format!("{:?}", t.to_stac()))
                    .unwrap_or_else(|| "-".into()),
            ));
        }
    }
    out
}
