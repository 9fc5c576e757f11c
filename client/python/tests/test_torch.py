"""PyTorch integration; runs when torch is importable (CPU wheels are large: CI may skip)."""

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import requires_torch

ROOT = Path(__file__).resolve().parents[3]


@requires_torch
def test_stream_dataset_with_dataloader(daemon):
    import torch
    from torch.utils.data import DataLoader

    from cogfeed.torch import StreamDataset

    ds = StreamDataset(daemon.address, "demo", sampler="aligned", batch_size=4, labels=True, dtype="float32",
                       normalize=True)
    batches = list(DataLoader(ds, batch_size=None, num_workers=0, pin_memory=False))
    assert len(batches) == len(ds) == 16
    assert batches[0]["image"].dtype == torch.float32 and tuple(batches[0]["image"].shape) == (4, 4, 256, 256)
    assert batches[0]["label"].shape == (4, 256, 256)
    state = ds.state_dict()
    assert state["cursor"] == 64


@requires_torch
def test_workers_split_the_rank_without_duplicates(daemon):
    from torch.utils.data import DataLoader

    from cogfeed.torch import StreamDataset

    ds = StreamDataset(daemon.address, "demo", sampler="aligned", batch_size=2)
    # spawn, not fork: a gRPC channel made in a forked child of a process that used gRPC can
    # hang in grpc's core (seen in CI); the README says so.
    loader = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="spawn")
    seen = [tuple(w) for b in loader for w in b["windows"].tolist()]
    assert len(seen) == len(set(seen)) == 64


@requires_torch
def test_state_dict_resume_and_bfloat16(daemon):
    import torch

    from cogfeed.torch import StreamDataset

    full = list(StreamDataset(daemon.address, "demo", sampler="aligned", batch_size=4, seed=2))
    ds = StreamDataset(daemon.address, "demo", sampler="aligned", batch_size=4, seed=2)
    it = iter(ds)
    for _ in range(3):
        next(it)
    resumed = StreamDataset(daemon.address, "demo", sampler="aligned", batch_size=4, seed=2)
    resumed.load_state_dict(ds.state_dict())
    rest = list(resumed)
    assert all(torch.equal(a["image"], b["image"]) for a, b in zip(rest, full[3:]))
    b = next(iter(StreamDataset(daemon.address, "demo", batch_size=2, dtype="bfloat16")))
    assert b["image"].dtype == torch.bfloat16


def readme_example():
    text = (ROOT / "README.md").read_text()
    m = re.search(r"<!-- training-example -->\s*```python\n(.*?)```", text, re.S)
    assert m, "README lost its training example"
    return m.group(1)


def test_readme_example_is_valid_python():
    compile(readme_example(), "README.md", "exec")


@requires_torch
def test_readme_training_example_runs_with_two_ranks(daemon, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(readme_example())
    env = dict(os.environ, COGFEED_SERVER=daemon.address, COGFEED_EPOCHS="1", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(29500 + os.getpid() % 1000))
    procs = [subprocess.Popen([sys.executable, str(script)], env=dict(env, RANK=str(r), WORLD_SIZE="2"),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(2)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out
        assert "epoch 0 done" in out, out
