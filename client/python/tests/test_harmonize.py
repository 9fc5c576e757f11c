"""Sentinel-2 harmonisation (`harmonize = "s2-l2a"`) through the Python client: the
demo-series Items have no processing baseline and dates in 2024 (baseline 04.00 and later),
so every present step is BOA_ADD_OFFSET lower than the same layer without it (valid pixels
`max(v, 1000) - 1000`, nodata kept), and `SampleMeta.harmonized_offset` says so per step.
Nearest resampling: the plain layer is read on its own grid, the harmonised one warped."""

import numpy as np
import pytest

import cogfeed
from conftest import Daemon

LAYER = """
[[datasets.layers]]
name = "s2"
assets = ["B02", "B08"]
resolution = 10
resampling = "nearest"
time_steps = 2
filter = {{ collections = ["sentinel-2-l2a-series"] }}
"""


@pytest.fixture(scope="module")
def harmonize_daemon(demo_dir, daemon, tmp_path_factory):
    # `daemon` (on demo_dir) writes the demo-series archive there.
    cfg = tmp_path_factory.mktemp("harmonize") / "cogfeed.toml"
    datasets = ""
    for name, extra in (("plain", ""), ("harmonized", 'harmonize = "s2-l2a"\n')):
        datasets += f'[[datasets]]\nname = "{name}"\nstac = "{demo_dir}/series/items.json"\ncrs = "native"\n'
        datasets += LAYER.format() + extra
    cfg.write_text(datasets)
    d = Daemon(config=cfg).start()
    yield d
    d.stop()


def samples(address, dataset):
    out = {}
    for b in cogfeed.Loader(address, dataset, patch_size=32, batch_size=4, samples_per_epoch=12, seed=3):
        for i, m in enumerate(b.meta):
            out[(m.drawn, m.bounds)] = (m, b.layers["s2"][i])
    return out


def test_new_baseline_dates_are_on_the_old_scale(harmonize_daemon):
    plain = samples(harmonize_daemon.address, "plain")
    harmonized = samples(harmonize_daemon.address, "harmonized")
    assert len(plain) == 12 and plain.keys() == harmonized.keys()
    checked = 0
    for key, (m, h) in harmonized.items():
        p, raw = plain[key]
        assert p.harmonized_offset == {}
        days = m.datetimes["s2"]
        assert days == p.datetimes["s2"]
        assert m.harmonized_offset == {"s2": tuple(-1000 if d else 0 for d in days)}
        assert h.dtype == np.uint16 and h.shape == raw.shape == (2, 2, 32, 32)
        expected = np.where(raw == 0, 0, np.maximum(raw, 1000) - 1000)
        assert np.array_equal(h, expected), key
        checked += int((raw != 0).sum())
    assert checked > 0
