"""The numpy Loader against the real daemon."""

import hashlib
import json
import subprocess
import threading
import time

import grpc
import numpy as np
import pytest

import cogfeed
from conftest import free_port

LABEL_DIV = 8192  # demo labels are band1 // 8192


def rust_jsonl(rust_client, address, *args):
    out = subprocess.run(
        [rust_client, "--server", address, "stream", "--jsonl", *args], check=True, capture_output=True, text=True
    ).stdout
    return [json.loads(line) for line in out.splitlines()]


def test_batches_equal_the_rust_clients(daemon, rust_client):
    args = ["--dataset", "demo", "--sampler", "random", "--patch-size", "128", "--batch-size", "4",
            "--seed", "9", "--samples-per-epoch", "40", "--labels", "--dtype", "float32", "--normalize", "--augment"]
    rust = rust_jsonl(rust_client, daemon.address, *args)
    loader = cogfeed.Loader(daemon.address, "demo", sampler="random", patch_size=128, batch_size=4, seed=9,
                            samples_per_epoch=40, labels=True, dtype="float32", normalize=True, augment=True)
    py = list(loader)
    assert len(py) == len(rust) == 10 == len(loader)
    for p, r in zip(py, rust):
        assert hashlib.sha256(p.image.tobytes()).hexdigest() == r["sha256"]
        assert hashlib.sha256(p.label.tobytes()).hexdigest() == r["label_sha256"]
        assert (p.epoch, p.index, p.cursor) == (r["epoch"], r["index"], r["cursor"])
        # The Rust client prints 6 columns; the 7th here is `padded`.
        assert p.windows[:, :6].tolist() == r["windows"]


def test_shapes_dtypes_and_zero_copy(daemon):
    b = next(iter(cogfeed.Loader(daemon.address, "demo", sampler="aligned", batch_size=3, labels=True)))
    assert b.image.shape == (3, 4, 256, 256) and b.image.dtype == np.uint16
    assert b.label.shape == (3, 256, 256) and b.label.dtype == np.uint8
    assert not b.image.flags.owndata, "the image must wrap the received bytes"
    for dtype, np_dtype in [("float32", np.float32), ("float16", np.float16), ("uint8", np.uint8),
                            ("bfloat16", np.uint16)]:
        b = next(iter(cogfeed.Loader(daemon.address, "demo", batch_size=2, dtype=dtype, max_batches=1)))
        assert b.image.dtype == np_dtype and b.image.shape == (2, 4, 256, 256)


def test_labels_match_images(daemon):
    loader = cogfeed.Loader(daemon.address, "demo", sampler="grid", patch_size=300, batch_size=2, labels=True,
                            augment=True)
    for b in loader:
        assert np.array_equal(b.label, (b.image[:, 0] // LABEL_DIV).astype(np.uint8))


def test_grid_windows_keep_padded(daemon):
    with cogfeed.Client(daemon.address) as c:
        sizes = {s.index: (s.levels[0].width, s.levels[0].height) for s in c.describe("demo").scenes}
    loader = cogfeed.Loader(daemon.address, "demo", sampler="grid", patch_size=300, batch_size=4)
    windows = np.concatenate([b.windows for b in loader])
    assert windows.shape[1] == len(cogfeed.WINDOW_COLUMNS) == 7
    leaves = [int(col + w > sizes[s][0] or row + h > sizes[s][1]) for s, col, row, w, h, _, _ in windows.tolist()]
    assert windows[:, 6].tolist() == leaves
    assert 0 < sum(leaves) < len(leaves), "the grid should have padded and whole windows"


def test_two_ranks_make_one_epoch(daemon):
    def windows(rank, world):
        loader = cogfeed.Loader(daemon.address, "demo", sampler="aligned", batch_size=4, seed=3, rank=rank,
                                world_size=world)
        return [tuple(w) for b in loader for w in b.windows.tolist()]

    whole = windows(0, 1)
    r0, r1 = windows(0, 2), windows(1, 2)
    assert len(r0) == len(r1)
    assert len(set(r0) | set(r1)) == len(r0) + len(r1) == len(whole) == 64
    assert set(r0) | set(r1) == set(whole)


def test_state_dict_resume_is_the_suffix(daemon):
    full = list(cogfeed.Loader(daemon.address, "demo", sampler="aligned", batch_size=4, seed=1))
    loader = cogfeed.Loader(daemon.address, "demo", sampler="aligned", batch_size=4, seed=1)
    it = iter(loader)
    for _ in range(5):
        next(it)
    state = loader.state_dict()
    assert state == {"epoch": 0, "cursor": 20, "dataset_version": full[0].dataset_version}
    assert len(state["dataset_version"]) == 16
    resumed = cogfeed.Loader(daemon.address, "demo", sampler="aligned", batch_size=4, seed=1)
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert [b.image.tobytes() for b in rest] == [b.image.tobytes() for b in full[5:]]
    # Another world size from the same cursor covers the rest exactly once.
    ranks = [cogfeed.Loader(daemon.address, "demo", sampler="aligned", batch_size=2, seed=1, rank=r, world_size=2,
                            cursor=state["cursor"]) for r in range(2)]
    seen = [tuple(w) for l in ranks for b in l for w in b.windows.tolist()]
    expected = [tuple(w) for b in full[5:] for w in b.windows.tolist()]
    assert sorted(seen) == sorted(expected)


def test_a_local_order_matches_the_rust_client_and_resumes(daemon, rust_client):
    args = ["--dataset", "demo", "--sampler", "grid", "--patch-size", "64", "--batch-size", "16", "--seed", "4",
            "--order", "local", "--open-blocks", "2", "--visits", "2"]
    rust = rust_jsonl(rust_client, daemon.address, *args)
    kwargs = dict(sampler="grid", patch_size=64, batch_size=16, seed=4, order="local", open_blocks=2, visits=2)
    full = list(cogfeed.Loader(daemon.address, "demo", **kwargs))
    assert len(full) == len(rust) == 64
    assert [b.windows[:, :6].tolist() for b in full] == [r["windows"] for r in rust]
    plain = list(cogfeed.Loader(daemon.address, "demo", sampler="grid", patch_size=64, batch_size=16, seed=4))
    local = [tuple(w) for b in full for w in b.windows.tolist()]
    own = [tuple(w) for b in plain for w in b.windows.tolist()]
    assert local != own and sorted(local) == sorted(own), "the same samples in another order"
    loader = cogfeed.Loader(daemon.address, "demo", **kwargs)
    it = iter(loader)
    for _ in range(7):
        next(it)
    resumed = cogfeed.Loader(daemon.address, "demo", **kwargs)
    resumed.load_state_dict(loader.state_dict())
    assert [b.image.tobytes() for b in resumed] == [b.image.tobytes() for b in full[7:]]
    with pytest.raises(cogfeed.InvalidRequest) as e:
        list(cogfeed.Loader(daemon.address, "demo", order="blocked"))
    assert "random, local" in e.value.details
    with pytest.raises(cogfeed.CogfeedError) as e:
        list(cogfeed.Loader(daemon.address, "demo", open_blocks=3))
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and "order" in e.value.details


def test_unknown_dataset_raises_naming_it(daemon):
    with pytest.raises(cogfeed.CogfeedError) as e:
        list(cogfeed.Loader(daemon.address, "nope"))
    assert e.value.code == grpc.StatusCode.NOT_FOUND
    assert "nope" in str(e.value)
    with pytest.raises(cogfeed.CogfeedError) as e:
        list(cogfeed.Loader(daemon.address, "demo", batch_size=0))
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and "batch_size" in e.value.details


def test_client_calls(daemon):
    with cogfeed.Client(daemon.address) as c:
        names = [d.name for d in c.datasets()]
        assert names == ["demo", "demo-series", "demo-stac"]
        (d,) = [d for d in c.datasets() if d.name == "demo"]
        assert (d.name, d.scenes, d.labels) == ("demo", 4, True)
        info = c.describe("demo")
        assert list(info.bands) == [1, 2, 3, 4] and info.dtype == "uint16"
        image, label = c.read_window("demo", 1, 10, 20, 64, 32, bands=[1], labels=True)
        assert image.shape == (1, 32, 64) and label.shape == (32, 64)
        assert np.array_equal(label, (image[0] // LABEL_DIV).astype(np.uint8))


def test_restart_mid_epoch_loses_and_repeats_nothing(fresh_daemon):
    loader = cogfeed.Loader(fresh_daemon.address, "demo", sampler="aligned", batch_size=2, seed=5, prefetch=1)
    expected = [tuple(w) for b in cogfeed.Loader(fresh_daemon.address, "demo", sampler="aligned", batch_size=2,
                                                  seed=5) for w in b.windows.tolist()]
    seen, images = [], []
    for i, b in enumerate(loader):
        seen.extend(tuple(w) for w in b.windows.tolist())
        images.append(b.index)
        if i == 7:
            fresh_daemon.kill()
            threading.Timer(0.5, fresh_daemon.start).start()
    assert loader.reconnects >= 1
    assert seen == expected, "a restart lost or repeated samples"
    assert images == list(range(len(images)))
    assert loader.data_wait_seconds > 0


def test_data_wait_counts_blocked_time(daemon):
    loader = cogfeed.Loader(daemon.address, "demo", batch_size=8, samples_per_epoch=64)
    t = time.perf_counter()
    n = sum(1 for _ in loader)
    assert n == 8
    assert 0 < loader.data_wait_seconds <= time.perf_counter() - t


def test_a_replica_list_spreads_ranks_and_fails_over(daemon):
    dead = f"127.0.0.1:{free_port()}"
    assert cogfeed.replicas(f"{dead}, {daemon.address}") == [dead, daemon.address]
    # Rank 1 of 2 starts on the second replica; rank 0 on the dead one, then moves on.
    for rank in (0, 1):
        loader = cogfeed.Loader([dead, daemon.address], "demo", batch_size=4, samples_per_epoch=16, rank=rank,
                                world_size=2)
        assert len(list(loader)) == 2
        assert loader.client.address == daemon.address
