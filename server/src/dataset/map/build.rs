//! Building a map-space dataset once at start-up (or on refresh): Items read, filtered
//! and ordered, layers specified from their assets, reference grids opened (or read
//! back from the plan index), points placed, balance counted. The only start-up path.

use super::*;

impl MapSpace {
    /// Builds the dataset `c` (a `stac` one) and returns it with its version. Its plan
    /// (Items, reference grids, version) is read back from `index_dir` when this document
    /// (same ETag) and configuration were planned before (unless `replan`: a refresh after
    /// a change), else planned from the document (`plan`) and written there.
    pub async fn build(
        c: &DatasetConfig,
        stores: Arc<Stores>,
        headers: HeaderCache,
        options: OpenOptions,
        index_dir: Option<&std::path::Path>,
        replan: bool,
    ) -> Result<(Self, String)> {
        let started = std::time::Instant::now();
        let key = plan_index::key(&stores, c).await;
        let path = index_dir
            .zip(key.as_ref())
            .map(|(d, k)| plan_index::path(d, &c.name, k));
        let kept = path
            .as_ref()
            .zip(key.as_ref())
            .filter(|_| !replan)
            .and_then(|(p, k)| plan_index::load(p, k));
        let plan = match kept {
            Some(plan) => {
                tracing::info!(
                    dataset = %c.name,
                    items = plan.items.len(),
                    seconds = started.elapsed().as_secs_f64(),
                    "plan index read back"
                );
                plan
            }
            None => {
                let mut plan = Self::plan(c, &stores, &headers, &options).await?;
                if let (Some(p), Some(k)) = (&path, &key) {
                    plan.key = k.clone();
                    if let Err(e) = plan_index::save(p, &plan) {
                        tracing::warn!(dataset = %c.name, path = %p.display(), error = %e, "plan index not written");
                    }
                }
                plan
            }
        };
        Self::from_plan(c, plan, stores, headers, options, index_dir).await
    }

    /// Plans dataset `c` from its document: reads, filters and orders the Items, opens
    /// every drawable Item's reference asset (checks, tile grid, ETag for the version) and
    /// derives its grid.
    async fn plan(
        c: &DatasetConfig,
        stores: &Arc<Stores>,
        headers: &HeaderCache,
        options: &OpenOptions,
    ) -> Result<plan_index::Plan> {
        let url = c.stac.as_deref().unwrap_or_default();
        let rewrite = HrefRewrite::new(c.href_rewrite.clone());
        let bad = |m: String| Error::InvalidArgument(format!("dataset {}: {m}", c.name));
        let started = std::time::Instant::now();
        // Items keep only the properties some filter compares.
        let mut filter_keys: Vec<String> = Vec::new();
        for table in c.filter.iter().chain(c.layers.iter().filter_map(|l| l.filter.as_ref())) {
            if let Ok(f) = ItemFilter::from_table(table) {
                filter_keys.extend(f.property_keys().map(str::to_string));
            }
        }
        // Harmonised layers read the baseline and the provider's flag.
        if c.layers.iter().any(|l| l.harmonize.is_some()) {
            filter_keys.extend(super::harmonize::PROPERTY_KEYS.map(str::to_string));
        }
        let mut items = read_items(stores, url, &rewrite, KeepProperties::Named(&filter_keys)).await?;
        let found = items.len();
        tracing::info!(dataset = %c.name, items = found, seconds = started.elapsed().as_secs_f64(), "items read");
        if let Some(f) = &c.filter {
            let f = ItemFilter::from_table(f).map_err(|e| bad(format!("filter: {e}")))?;
            items.retain(|it| f.accepts(it));
        }
        let mut seen = std::collections::HashSet::new();
        if let Some(dup) = items.iter().find(|it| !seen.insert(it.id.clone())) {
            return Err(bad(format!("item {} appears twice in {url}", dup.id)));
        }
        let keys = c
            .priority
            .clone()
            .unwrap_or_else(|| vec!["datetime".into(), "id".into()]);
        sort_items(&mut items, &keys);
        // Assets must live under the allowed prefixes (the catalog cannot point anywhere).
        let confined = super::confine::Confinement::for_dataset(c);
        let outside = |it: &Item| {
            c.layers
                .iter()
                .flat_map(|l| &l.assets)
                .filter_map(|a| it.assets.get(a))
                .find(|a| !confined.allows(&a.href))
                .map(|a| a.key.clone())
        };
        let escaped: Vec<String> = items
            .iter()
            .filter_map(|it| outside(it).map(|a| format!("Item {}, asset {a}", it.id)))
            .collect();
        if !escaped.is_empty() {
            let allowed = confined.prefixes().join(", ");
            match c.on_bad_object {
                crate::config::OnBadObject::Fail => {
                    return Err(bad(format!(
                        "{} Item(s) with an asset outside the allowed prefixes ({allowed}; set allowed_prefixes): {}",
                        escaped.len(),
                        escaped[..escaped.len().min(20)].join("; ")
                    )));
                }
                crate::config::OnBadObject::Skip => {
                    for e in &escaped {
                        tracing::error!(dataset = %c.name, problem = %e, allowed = %allowed, "asset outside the allowed prefixes");
                    }
                    items.retain(|it| outside(it).is_none());
                }
            }
        }
        let reference = &c.layers[0];
        let ref_asset = &reference.assets[0];
        let layer_filter = |l: &crate::config::LayerConfig| {
            l.filter
                .as_ref()
                .map(ItemFilter::from_table)
                .transpose()
                .map_err(|e| bad(format!("layer {}: filter: {e}", l.name)))
        };
        let reads = |l: &crate::config::LayerConfig, f: &Option<ItemFilter>, it: &Item| {
            l.assets.iter().all(|a| it.assets.contains_key(a)) && f.as_ref().is_none_or(|f| f.accepts(it))
        };
        let ref_filter = layer_filter(reference)?;
        let drawn: Vec<usize> = (0..items.len())
            .filter(|&i| reads(reference, &ref_filter, &items[i]))
            .collect();
        if drawn.is_empty() {
            return Err(bad(format!(
                "none of the {} items ({found} before the filter) has the reference layer's assets {:?}",
                items.len(),
                reference.assets
            )));
        }
        // Every layer's assets must exist on some Item.
        for l in &c.layers {
            for a in &l.assets {
                if !items.iter().any(|it| it.assets.contains_key(a)) {
                    return Err(bad(format!("layer {}: no item has an asset {a:?}", l.name)));
                }
            }
        }
        // Reference assets: opened now (checks, tile grid, ETag for the version), each
        // within OPEN_TIMEOUT; every failure is reported in one pass.
        let opened: Vec<Result<AssetSource>> = futures::stream::iter(drawn.clone())
            .map(|i| {
                let (stores, headers, options) = (stores.clone(), headers.clone(), options.clone());
                let item = items[i].clone();
                let key = ref_asset.clone();
                async move {
                    let asset = item.asset(&key)?;
                    let object = tokio::time::timeout(OPEN_TIMEOUT, open(&stores, &headers, &asset.href, &options))
                        .await
                        .map_err(|_| {
                            Error::tiff(
                                asset.href.as_str(),
                                cogfeed_tiff::TiffError::Read(cogfeed_tiff::ReadError::Unavailable(format!(
                                    "no answer within {} s",
                                    OPEN_TIMEOUT.as_secs()
                                ))),
                            )
                        })??;
                    AssetSource::new(&item.id, asset, object)
                }
            })
            .buffered(64)
            .collect()
            .await;
        let (mut refs, mut kept, mut failed) = (Vec::new(), Vec::new(), Vec::new());
        let mut bad_items = std::collections::HashSet::new();
        for (i, r) in drawn.iter().zip(opened) {
            match r {
                Ok(s) => {
                    refs.push(s);
                    kept.push(*i);
                }
                Err(e) => {
                    bad_items.insert(*i);
                    failed.push(format!("Item {}: {e}", items[*i].id));
                }
            }
        }
        if !failed.is_empty() {
            match c.on_bad_object {
                crate::config::OnBadObject::Fail => {
                    const SHOWN: usize = 20;
                    let more = failed.len().saturating_sub(SHOWN);
                    return Err(bad(format!(
                        "{} of {} Items have a reference asset that cannot be opened (on_bad_object = \"skip\" serves the rest): {}{}",
                        failed.len(),
                        drawn.len(),
                        failed[..failed.len().min(SHOWN)].join("; "),
                        if more > 0 {
                            format!("; and {more} more")
                        } else {
                            String::new()
                        }
                    )));
                }
                crate::config::OnBadObject::Skip => {
                    for f in &failed {
                        tracing::error!(dataset = %c.name, problem = %f, "bad object");
                    }
                    if refs.is_empty() {
                        return Err(bad(format!(
                            "no Item's reference asset can be opened ({} tried)",
                            drawn.len()
                        )));
                    }
                }
            }
        }
        let drawn = kept;
        tracing::info!(
            dataset = %c.name,
            assets = refs.len(),
            seconds = started.elapsed().as_secs_f64(),
            "reference assets opened"
        );
        // What each layer's assets hold, from the first Item that has them all.
        let mut facts = Vec::with_capacity(c.layers.len());
        for l in &c.layers {
            let filter = layer_filter(l)?;
            let holder = items
                .iter()
                .enumerate()
                .find(|(i, it)| !bad_items.contains(i) && reads(l, &filter, it))
                .map(|(_, it)| it)
                .ok_or_else(|| {
                    bad(format!(
                        "layer {}: no single item (passing its filter) has all of {:?}",
                        l.name, l.assets
                    ))
                })?;
            let mut f = plan_index::LayerFacts {
                dtype: String::new(),
                bands: 0,
                asset_bands: Vec::with_capacity(l.assets.len()),
                finest: f64::INFINITY,
            };
            let mut dtype: Option<DType> = None;
            for a in &l.assets {
                let asset = holder.asset(a)?;
                let (src_dtype, nb, res) = if holder.id == refs[0].item && a == ref_asset {
                    (refs[0].dtype, refs[0].bands, refs[0].transform.pixel_size().0)
                } else {
                    let object = open(stores, headers, &asset.href, options).await?;
                    let s = AssetSource::new(&holder.id, asset, object)?;
                    (s.dtype, s.bands, s.transform.pixel_size().0)
                };
                if let Some(d) = dtype
                    && d != src_dtype
                {
                    return Err(bad(format!(
                        "layer {}: asset {a} holds {} where the layer's other assets hold {}: mixed data types are refused (set the layer's dtype after splitting it)",
                        l.name,
                        src_dtype.name(),
                        d.name()
                    )));
                }
                dtype = Some(src_dtype);
                f.bands += nb;
                f.asset_bands.push(nb);
                f.finest = f.finest.min(res);
            }
            f.dtype = dtype.unwrap_or(DType::U8).name().to_string();
            facts.push(f);
        }
        let layers = layer_specs(c, &facts)?;
        let fixed = fixed_crs(c)?;
        let res = layers[0].resolution;
        let mut grids = Vec::with_capacity(refs.len());
        for s in &refs {
            grids.push(ref_grid(s, res, fixed.as_ref()).map_err(|m| bad(format!("item {}: {m}", s.item)))?);
        }
        // An area of interest keeps the part of each grid that meets it, whole pixels.
        let (mut drawn, mut refs) = (drawn, refs);
        if let Some(aoi) = c.aoi {
            let clipped: Vec<Option<RefGrid>> = grids.iter().map(|g| clip_to_aoi(g, aoi)).collect();
            let mut kept = (Vec::new(), Vec::new(), Vec::new());
            for ((d, r), g) in drawn.into_iter().zip(refs).zip(clipped) {
                if let Some(g) = g {
                    kept.0.push(d);
                    kept.1.push(r);
                    kept.2.push(g);
                }
            }
            (drawn, refs, grids) = kept;
            if grids.is_empty() {
                return Err(bad(format!("no item's reference grid meets the aoi {aoi:?}")));
            }
        }
        let mut hasher = Sha256::new();
        if let Some(url) = &c.points {
            let p = read_points(stores, url).await?;
            hasher.update(format!("points\t{:?}\t{:?}\t{:?}\n", p.ids, p.coords, p.names));
        }
        for it in &items {
            hasher.update(format!("item\t{}\t{:?}\n", it.id, it.datetime));
            for l in &layers {
                for a in &l.assets {
                    if let Some(asset) = it.assets.get(a) {
                        hasher.update(format!("{a}\t{}\n", asset.href));
                    }
                }
            }
        }
        for s in &refs {
            hasher.update(format!(
                "ref\t{}\t{}\t{}\n",
                s.object.url,
                s.object.version,
                s.object.cog.header().object_size
            ));
        }
        for l in &layers {
            hasher.update(format!(
                "layer\t{}\t{:?}\t{}\t{}\t{}\t{}\n",
                l.name,
                l.assets,
                l.resolution,
                l.resampling.name(),
                l.dtype.name(),
                l.nodata
            ));
            // Keys added later enter the hash only when set: older versions stay.
            if l.filter.is_some() || l.time.is_some() {
                hasher.update(format!("layer-more\t{:?}\t{:?}\n", l.filter, l.time));
            }
            if let Some(h) = l.harmonize {
                hasher.update(format!("layer-harmonize\t{h:?}\n"));
            }
        }
        if c.sampling.is_some() || c.split.is_some() {
            let sampling = c.sampling.as_ref().map(|s| s.version_text());
            let sampling = sampling.as_ref().map_or("None".to_string(), |t| format!("Some({t})"));
            hasher.update(format!("sampling\t{sampling}\t{:?}\n", c.split));
        }
        if let Some(b) = &c.balance {
            hasher.update(format!("balance\t{b:?}\n"));
        }
        hasher.update(format!(
            "crs\t{:?}\tmosaic\t{:?}\tpriority\t{keys:?}\n",
            fixed, c.mosaic
        ));
        let version = hex::encode(hasher.finalize())[..16].to_string();
        // Only the assets some layer reads are kept (memory, and the index's size).
        let used: std::collections::BTreeSet<&String> = c.layers.iter().flat_map(|l| l.assets.iter()).collect();
        for it in &mut items {
            it.assets.retain(|k, _| used.contains(k));
        }
        Ok(plan_index::Plan {
            key: String::new(),
            items,
            drawn,
            grids: grids.iter().map(plan_index::GridEntry::of).collect(),
            facts,
            version,
        })
    }

    /// The dataset from its plan: layers, sampling rules, grids, bboxes, points and the
    /// class balance.
    async fn from_plan(
        c: &DatasetConfig,
        plan: plan_index::Plan,
        stores: Arc<Stores>,
        headers: HeaderCache,
        options: OpenOptions,
        index_dir: Option<&std::path::Path>,
    ) -> Result<(Self, String)> {
        let bad = |m: String| Error::InvalidArgument(format!("dataset {}: {m}", c.name));
        let plan_index::Plan {
            items,
            drawn,
            grids,
            facts,
            version,
            ..
        } = plan;
        let layers = layer_specs(c, &facts)?;
        let valid = c
            .sampling
            .as_ref()
            .filter(|sm| sm.has_rules())
            .map(|sm| {
                let mask_layer = match &sm.mask_layer {
                    Some(m) => Some(
                        layers
                            .iter()
                            .position(|l| &l.name == m)
                            .ok_or_else(|| bad(format!("sampling.mask_layer {m} is not a layer")))?,
                    ),
                    None => None,
                };
                Ok::<_, Error>(valid::ValidRule {
                    min: sm.min_valid_fraction,
                    mask_layer,
                    invalid_classes: sm.invalid_classes.iter().map(|&v| v as f64).collect(),
                    max_attempts: sm.max_attempts.unwrap_or(DEFAULT_ATTEMPTS),
                    require_full_series: sm.require_full_series,
                })
            })
            .transpose()?;
        let split = c
            .split
            .as_ref()
            .map(crate::dataset::map::split::SplitRule::new)
            .transpose()
            .map_err(|e| bad(format!("split: {e}")))?;
        let fixed = fixed_crs(c)?;
        // Grids share a few CRSs: each is parsed once.
        let mut crss: std::collections::HashMap<String, Crs> = std::collections::HashMap::new();
        let mut ref_grids = Vec::with_capacity(grids.len());
        for g in grids {
            let crs = match crss.get(&g.crs) {
                Some(crs) => crs.clone(),
                None => {
                    let crs = Crs::parse(&g.crs)?;
                    crss.insert(g.crs.clone(), crs.clone());
                    crs
                }
            };
            ref_grids.push(RefGrid {
                crs,
                transform: g.transform,
                width: g.width,
                height: g.height,
                block: g.block,
            });
        }
        let grids = ref_grids;
        if drawn.len() != grids.len() || drawn.iter().any(|&i| i >= items.len()) {
            return Err(bad("the plan's grids and Items disagree".into()));
        }
        let wgs = Crs::from_epsg(4326)?;
        let mut bad_bboxes = Vec::new();
        let bboxes: Vec<[f64; 4]> = items
            .iter()
            .map(|it| {
                // The lon/lat box of the first asset's grid.
                let grid = it.assets.values().find_map(|a| {
                    let (t, (r, cc), e) = (a.transform?, a.shape?, a.epsg?);
                    let crs = Crs::from_epsg(e).ok()?;
                    let (mut xs, mut ys) = edge_points(&t, cc as f64, r as f64, 20);
                    Transformer::new(&crs, &wgs).transform(&mut xs, &mut ys);
                    bbox_of(&xs, &ys)
                });
                match (it.bbox, grid) {
                    (Some(b), Some(g)) if !bbox_meets_grid(b, g) => {
                        // A bbox in projected units, or of another place: the Item's own
                        // footprints would assemble without it (all-nodata samples).
                        bad_bboxes.push(format!(
                            "Item {}: bbox {b:?} does not meet its assets' grid (lon/lat {g:?}; a bbox in projected units?)",
                            it.id
                        ));
                        g
                    }
                    (Some(b), _) => b,
                    (None, Some(g)) => g,
                    (None, None) => [-180.0, -90.0, 180.0, 90.0],
                }
            })
            .collect();
        if !bad_bboxes.is_empty() {
            match c.on_bad_object {
                crate::config::OnBadObject::Fail => {
                    return Err(bad(format!(
                        "{} Item(s) with a bbox their assets' grids contradict (on_bad_object = \"skip\" places them by their grids): {}",
                        bad_bboxes.len(),
                        bad_bboxes.join("; ")
                    )));
                }
                crate::config::OnBadObject::Skip => {
                    for b in &bad_bboxes {
                        tracing::warn!(dataset = %c.name, problem = %b, "bbox replaced by the assets' grid");
                    }
                }
            }
        }
        let (points, point_centres) = match &c.points {
            Some(url) => {
                let set = read_points(&stores, url).await?;
                let crs = Crs::parse(c.points_crs.as_deref().unwrap_or("EPSG:4326"))?;
                let index = cogfeed_stac::BboxIndex::new(&bboxes, 1.0);
                let centres = place_points(&set, &crs, &items, &bboxes, &index, &drawn, &grids);
                if centres.len() < set.coords.len() {
                    tracing::warn!(
                        dataset = %c.name,
                        points = set.coords.len(),
                        outside = set.coords.len() - centres.len(),
                        "points outside every drawable item's grid are left out"
                    );
                }
                (Some(set), centres)
            }
            None => (None, Vec::new()),
        };
        let rule = c
            .balance
            .as_ref()
            .map(|b| {
                let names: Vec<(String, bool)> = layers.iter().map(|l| (l.name.clone(), l.time.is_some())).collect();
                balance::BalanceRule::new(b, &names)
            })
            .transpose()
            .map_err(bad)?;
        // Flags that contradict the baseline: logged once per Item, counted on first use.
        let mut disagreements = 0u64;
        if layers.iter().any(|l| l.harmonize.is_some()) {
            for it in items.iter().filter(|it| super::harmonize::item_scale(it).disagrees) {
                tracing::warn!(
                    dataset = %c.name,
                    item = %it.id,
                    "earthsearch:boa_offset_applied is true on a processing baseline before 04.00: the baseline wins (no offset)"
                );
                disagreements += 1;
            }
        }
        let peer_objects = peer_objects::PeerObjects::new(&items, &layers);
        let mut asset_keys = std::collections::HashMap::new();
        for key in layers.iter().flat_map(|l| &l.assets) {
            // Past 65,536 distinct keys (no real dataset) the rest go uncached.
            if let (false, Ok(next)) = (asset_keys.contains_key(key.as_str()), u16::try_from(asset_keys.len())) {
                asset_keys.insert(Box::<str>::from(key.as_str()), next);
            }
        }
        let mut map = Self {
            layers,
            index: cogfeed_stac::BboxIndex::new(&bboxes, 1.0),
            sources: moka::future::Cache::new(SOURCE_CACHE_ENTRIES),
            asset_keys,
            peer_objects,
            items,
            bboxes,
            drawn,
            grid_ids: Arc::new(super::grid_ids_of(&grids)),
            grids,
            mosaic_all: c.mosaic.as_deref() == Some("all"),
            fixed,
            stores,
            headers,
            options,
            valid,
            split,
            points,
            point_centres: Arc::new(point_centres),
            balance: None,
            disagreements: std::sync::atomic::AtomicU64::new(disagreements),
        };
        if let Some(rule) = rule {
            let index = map.class_index(&rule, &c.name, &version, index_dir).await?;
            for (class, share) in balance::absent_classes(&index, &rule.targets) {
                tracing::warn!(
                    dataset = %c.name,
                    class,
                    target = share,
                    "balance target for a class no drawable cell holds: its share goes to the other classes"
                );
            }
            let fitted = balance::Balance {
                layer: rule.layer,
                ..balance::fit(&index, &rule.targets).map_err(bad)?
            };
            for s in &fitted.shares {
                tracing::info!(
                    dataset = %c.name,
                    class = s.class,
                    natural = s.natural,
                    target = s.target,
                    expected = s.expected,
                    "class balance"
                );
            }
            map.balance = Some(fitted);
        }
        Ok((map, version))
    }

    /// The class histograms of `rule`, read back from `index_dir` when this dataset
    /// version's are there, else counted from the class layer (at `rule.samples` pixels
    /// across a cell, nearest, so the warp reads overviews) and written there.
    async fn class_index(
        &self,
        rule: &balance::BalanceRule,
        name: &str,
        version: &str,
        index_dir: Option<&std::path::Path>,
    ) -> Result<balance::ClassIndex> {
        let key = format!(
            "{version}\tcell {}\tsamples {}\tignore {:?}",
            rule.cell, rule.samples, rule.ignore
        );
        let tag = hex::encode(Sha256::digest(key.as_bytes()))[..16].to_string();
        let safe = plan_index::file_stem(name);
        let path = index_dir.map(|d| d.join(format!("{safe}-{tag}.classes.json")));
        if let Some(p) = &path
            && let Some(index) = balance::load(p, &key)
        {
            tracing::info!(dataset = %name, path = %p.display(), cells = index.cells.len(), "class index read back");
            return Ok(index);
        }
        let started = std::time::Instant::now();
        // A private cache: this pass reads each label tile about once.
        let tiles = crate::tiles::TileCache::with_metrics(64 << 20, None);
        let layer = LayerSpec {
            resampling: Resampling::Nearest,
            time: None,
            ..self.layers[rule.layer].clone()
        };
        let res0 = self.layers[0].resolution;
        let (cell, s) = (u64::from(rule.cell), u64::from(rule.samples));
        let mut values = Vec::with_capacity(self.grids.len());
        for (scene, g) in self.grids.iter().enumerate() {
            let (cols, rows) = (g.width.div_ceil(cell), g.height.div_ceil(cell));
            let (x0, y1) = g.transform.apply(0.0, 0.0);
            let bounds = [
                x0,
                y1 - (rows * cell) as f64 * res0,
                x0 + (cols * cell) as f64 * res0,
                y1,
            ];
            let fp = Footprint::new(g.crs.clone(), bounds, res0 * cell as f64 / s as f64)?;
            let (bytes, ..) = self.layer_bytes(&tiles, self.drawn_of(scene), &layer, &fp).await?;
            let plane = (fp.width() * fp.height()) as usize * layer.dtype.size();
            values.push(cogfeed_geo::warp::samples_to_f64(
                layer.dtype,
                &bytes[..plane.min(bytes.len())],
            ));
        }
        let scenes: Vec<balance::SceneClasses<'_>> = values
            .iter()
            .enumerate()
            .map(|(scene, v)| balance::SceneClasses {
                scene: scene as u64,
                values: v,
                width: self.grids[scene].width,
                height: self.grids[scene].height,
            })
            .collect();
        let index = balance::count(rule, layer.nodata, key, &scenes)
            .map_err(|m| Error::InvalidArgument(format!("dataset {name}: balance: {m}")))?;
        tracing::info!(
            dataset = %name,
            cells = index.cells.len(),
            classes = index.classes.len(),
            seconds = started.elapsed().as_secs_f64(),
            "class index counted"
        );
        if let Some(p) = &path
            && let Err(e) = balance::save(p, &index)
        {
            tracing::warn!(dataset = %name, path = %p.display(), error = %e, "class index not written");
        }
        Ok(index)
    }
}

/// The layer specs of `c` from what its assets hold.
pub(super) fn layer_specs(c: &DatasetConfig, facts: &[plan_index::LayerFacts]) -> Result<Vec<LayerSpec>> {
    let bad = |m: String| Error::InvalidArgument(format!("dataset {}: {m}", c.name));
    if facts.len() != c.layers.len() {
        return Err(bad("the plan's layers and the configuration disagree".into()));
    }
    c.layers
        .iter()
        .zip(facts)
        .map(|(l, f)| {
            let filter = l
                .filter
                .as_ref()
                .map(ItemFilter::from_table)
                .transpose()
                .map_err(|e| bad(format!("layer {}: filter: {e}", l.name)))?;
            let time = time::TimeSpec::from_layer(l).map_err(|e| bad(format!("layer {}: {e}", l.name)))?;
            let src = DType::from_name(&f.dtype).ok_or_else(|| bad(format!("layer {}: dtype {}", l.name, f.dtype)))?;
            let dtype = match &l.dtype {
                Some(t) => DType::from_name(t).ok_or_else(|| bad(format!("layer {}: dtype {t}", l.name)))?,
                None => src,
            };
            Ok(LayerSpec {
                name: l.name.clone(),
                assets: l.assets.clone(),
                resolution: l.resolution.unwrap_or(f.finest),
                resampling: l
                    .resampling
                    .as_deref()
                    .map(|k| Resampling::parse(k).unwrap_or(Resampling::Nearest))
                    .unwrap_or(Resampling::Nearest),
                dtype,
                bands: f.bands,
                asset_bands: f.asset_bands.clone(),
                nodata: l.nodata.unwrap_or(0.0),
                filter,
                time,
                harmonize: l.harmonize.as_deref().and_then(super::harmonize::Harmonize::parse),
            })
        })
        .collect()
}

/// The dataset's fixed sample CRS (None: native).
pub(super) fn fixed_crs(c: &DatasetConfig) -> Result<Option<Crs>> {
    Ok(match c.crs.as_deref() {
        None => None,
        Some(s) if s.eq_ignore_ascii_case("native") => None,
        Some(s) => Some(Crs::parse(s)?),
    })
}
