"""`cogfeed.lightning.CogfeedDataModule` against the real daemon's `demo-series` (train/val
split), with real Lightning trainers on CPU run as scripts (tests/lightning_job.py): two DDP
ranks (gloo) train on disjoint samples that together are each epoch's samples, and a run
killed (SIGKILL) mid-epoch and resumed from its checkpoint trains on exactly one epoch's
samples, none repeated, none lost. Skipped where lightning is not importable (`.ci/test` runs
this file in the torchgeo venv, which has it)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import cogfeed

pytest.importorskip("lightning")
from cogfeed.lightning import CogfeedDataModule  # noqa: E402

JOB = Path(__file__).with_name("lightning_job.py")
sys.path.insert(0, str(JOB.parent))
from lightning_job import STREAM  # noqa: E402


def _run(address, out, devices, epochs, *extra, check=True):
    # The job imports the cogfeed this test imported (the source tree or the installed one).
    env = dict(os.environ, PYTHONPATH=str(Path(cogfeed.__file__).parents[1]), PYTHONWARNINGS="ignore")
    p = subprocess.run([sys.executable, str(JOB), address, str(out), str(devices), str(epochs), *map(str, extra)],
                       capture_output=True, text=True, timeout=120, env=env)
    if check:
        assert p.returncode == 0, p.stderr[-4000:]
    return p


def _seen(out, rank=0):
    path = Path(out) / f"seen-rank{rank}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _key(s):
    return (s["drawn"], tuple(round(v, 6) for v in s["bounds"]))


def _epoch(address, epoch, split="train"):
    """One epoch's training samples as one process streams them (the reference)."""
    args = dict(STREAM)
    samples = []
    for b in cogfeed.Loader(address, args.pop("dataset"), split=split, epoch=epoch, **args):
        samples += [_key({"drawn": m.drawn, "bounds": m.bounds}) for m in b.meta]
    return samples


def test_ddp_ranks_see_disjoint_shares_of_each_epoch(daemon, tmp_path):
    _run(daemon.address, tmp_path, 2, 2)
    ranks = [_seen(tmp_path, r) for r in (0, 1)]
    assert all(ranks)
    for epoch in (0, 1):
        shares = [[_key(s) for s in seen if s["epoch"] == epoch] for seen in ranks]
        assert set(shares[0]).isdisjoint(shares[1]), epoch
        assert sorted(shares[0] + shares[1]) == sorted(_epoch(daemon.address, epoch)), epoch
        assert len(shares[0]) == len(shares[1]) == STREAM["samples_per_epoch"] // 2
    assert _epoch(daemon.address, 0) != _epoch(daemon.address, 1), "each epoch its own plan"
    # Training samples lie in train cells, validation samples in val cells (the daemon's split).
    assert {s["split"] for seen in ranks for s in seen} == {"train"}
    val = [json.loads(line) for r in (0, 1) for line in (tmp_path / f"val-rank{r}.jsonl").read_text().splitlines()]
    assert {v["split"] for v in val} == {"val"}
    # Validation replays the same samples every epoch: 8 per epoch over the two ranks, 2 epochs.
    assert len(val) == 16


def test_killed_mid_epoch_resumes_from_the_checkpoint_exactly(daemon, tmp_path):
    # 8 batches of 4 in the epoch: checkpoint after 3, SIGKILL as batch 5 (index 4) comes up,
    # so batch 4 was trained on after the checkpoint and batches ahead were prefetched.
    killed = _run(daemon.address, tmp_path, 1, 1, "--ckpt-every", 3, "--kill-at-batch", 4, check=False)
    assert killed.returncode == -9, killed.stderr[-4000:]
    before = _seen(tmp_path)
    assert len(before) == 4 * 4
    ckpt = tmp_path / "ckpt" / "step=3.ckpt"
    assert ckpt.exists(), list((tmp_path / "ckpt").iterdir())
    import torch

    state = torch.load(ckpt, weights_only=False)["CogfeedDataModule"]
    assert state["epoch"] == 0 and state["cursor"] == 3 * 4 and state["dataset_version"]
    # What was trained on after the checkpoint is lost with the process (the checkpoint's
    # model has not seen it): the resumed run trains on it again, from the cursor.
    before = [s for s in before if s["step"] < 3]
    (tmp_path / "seen-rank0.jsonl").unlink()
    _run(daemon.address, tmp_path, 1, 1, "--resume", ckpt)
    after = _seen(tmp_path)
    assert {s["step"] for s in after} == set(range(3, 8)), "steps continue from the checkpoint"
    together = [_key(s) for s in before + after]
    assert len(set(together)) == len(together), "a sample repeated"
    assert together == _epoch(daemon.address, 0), "exactly one epoch, in the stream's order"


def test_module_refuses_what_it_sets_itself():
    for k in ("rank", "world_size", "cursor", "epoch", "split"):
        with pytest.raises(TypeError, match=k):
            CogfeedDataModule("127.0.0.1:1", "demo-series", **{k: 1})
    dm = CogfeedDataModule("127.0.0.1:1", "demo-series", val=None)
    assert dm.val_dataloader() == [] and dm.state_dict() == {}
    dm.load_state_dict({"epoch": 2, "cursor": 8, "dataset_version": "v"})
    assert dm.state_dict() == {"epoch": 2, "cursor": 8, "dataset_version": "v"}
