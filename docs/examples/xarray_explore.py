"""Explore a map-space dataset with xarray: the demo time series (`demo-series`) around its
latest Item, read at a footprint of our choosing and as streamed samples.

    python docs/examples/xarray_explore.py [ADDRESS]   # or COGFEED_SERVER; default 127.0.0.1:50051

Needs `pip install 'cogfeed[xarray]'` and a daemon serving the demos (`cogfeed serve`).
Runs in a second or two.
"""

import os
import sys

import numpy as np

import cogfeed
import cogfeed.xarray

ADDRESS = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("COGFEED_SERVER", "127.0.0.1:50051")


def main() -> None:
    with cogfeed.Client(ADDRESS) as client:
        info = client.describe("demo-series")
        print(f"demo-series: {len(info.scenes)} Items, layers {[l.name for l in info.layers]}")
        # A 1280 m square at the centre of the latest Sentinel-2 Item's grid, in its own CRS
        # (the s2 layer's three dates are the latest up to that Item's).
        scene = max((s for s in info.scenes if s.name.startswith("S2")), key=lambda s: s.datetime)
        x0, dx, _, y0, _, dy = scene.geotransform
        cx = x0 + dx * scene.levels[0].width / 2
        cy = y0 + dy * scene.levels[0].height / 2
        ds = cogfeed.xarray.read(client, "demo-series", bounds=(cx - 640, cy - 640, cx + 640, cy + 640),
                                 crs=scene.crs, datetime=scene.datetime)
        print(ds)
        s2 = ds["s2"]
        # Mean reflectance per date and band over the valid pixels (nodata is _FillValue).
        valid = s2.where(s2 != s2.attrs.get("nodata", 0))
        means = valid.mean(dim=("y", "x"))
        print("s2 mean per date and band:\n", means.to_pandas().round(1))
        values, counts = np.unique(ds["label"].values, return_counts=True)
        print("label classes:", dict(zip(values.tolist(), counts.tolist())))

        # Streamed samples convert the same way: a few samples of the train split.
        (batch,) = list(cogfeed.Loader(client, "demo-series", patch_size=64, batch_size=4, max_batches=1,
                                       split="train", seed=0))
        for i in range(len(batch.meta)):
            sample = cogfeed.xarray.to_dataset(batch, info, sample=i)
            print(f"sample {i}: {sample.attrs.get('drawn')} split={sample.attrs.get('split')} "
                  f"s2 {dict(sample['s2'].sizes)}")


if __name__ == "__main__":
    main()
