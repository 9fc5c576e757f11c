"""Train a tiny segmentation model with torchgeo on the map-space demo (`demo-stac`): first by
random access (`CogfeedDataset` + torchgeo's `RandomGeoSampler`, batches read in one
`ReadFootprint` call each), then from the stream (`CogfeedStreamDataset`, the daemon's
seeded sampler), both batched with torchgeo's `stack_samples`.

    python docs/examples/torchgeo_train.py [ADDRESS]   # or COGFEED_SERVER; default 127.0.0.1:50051

Needs `pip install 'cogfeed[torchgeo]'` (Python >= 3.12) and a daemon serving the demos
(`cogfeed serve`). A few steps each: runs in seconds on a CPU.
"""

import os
import sys

import torch
from torch.utils.data import DataLoader
from torchgeo.datasets import stack_samples
from torchgeo.samplers import RandomGeoSampler

from cogfeed.torchgeo import CogfeedDataset, CogfeedStreamDataset

ADDRESS = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("COGFEED_SERVER", "127.0.0.1:50051")
STEPS, BATCH, SIZE = 4, 8, 64
NODATA = 255  # the label layer's nodata: not a class


def train(model: torch.nn.Module, loader: DataLoader, what: str) -> None:
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step, batch in zip(range(STEPS), loader):
        image = batch["image"] / 10000.0  # reflectance-ish scale
        mask = batch["mask"]
        loss = torch.nn.functional.cross_entropy(model(image), mask, ignore_index=NODATA)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"{what} step {step}: image {tuple(image.shape)} loss {loss.item():.3f}")


def main() -> None:
    torch.manual_seed(0)
    # 4 bands in, a score per class (0..9) out.
    model = torch.nn.Sequential(torch.nn.Conv2d(4, 16, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Conv2d(16, 10, 1))

    ds = CogfeedDataset(ADDRESS, "demo-stac", layers=["image"], mask="label")
    print(f"demo-stac: {len(ds)} Items in {ds.crs.name}, {ds.res[0]:g} m pixels")
    sampler = RandomGeoSampler(ds, size=SIZE, length=STEPS * BATCH, generator=torch.Generator().manual_seed(0))
    train(model, DataLoader(ds, sampler=sampler, batch_size=BATCH, collate_fn=stack_samples), "random access")

    stream = CogfeedStreamDataset(ADDRESS, "demo-stac", layers=["image"], mask="label", patch_size=SIZE,
                                  batch_size=BATCH, max_batches=STEPS, seed=0)
    train(model, DataLoader(stream, batch_size=BATCH, collate_fn=stack_samples), "stream")


if __name__ == "__main__":
    main()
