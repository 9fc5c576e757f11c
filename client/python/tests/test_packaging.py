"""The package as pip builds it: one version (`cogfeed.__version__`, read by setuptools),
the PEP 561 marker and the messages' type stubs inside the wheel."""

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import cogfeed

PKG = Path(__file__).resolve().parents[1]


def can_build_offline():
    """setuptools with its own bdist_wheel (>= 70.1), or the `wheel` package: the wheel is
    built from what is installed, without fetching a build environment."""
    for module in ("setuptools.command.bdist_wheel", "wheel"):
        try:
            __import__(module)
            return True
        except ImportError:
            pass
    return False


def test_the_version_is_written_once():
    pyproject = (PKG / "pyproject.toml").read_text()
    project = pyproject.split("[project]", 1)[1].split("\n[", 1)[0]
    assert not re.search(r"^version\s*=", project, re.M), "pyproject.toml writes the version again"
    assert re.search(r'^dynamic\s*=\s*\[[^]]*"version"', project, re.M)
    assert 'version = { attr = "cogfeed.__version__" }' in pyproject
    assert re.fullmatch(r"\d+\.\d+\.\d+", cogfeed.__version__)


@pytest.mark.skipif(not can_build_offline(), reason="setuptools cannot build a wheel offline here")
def test_the_wheel_has_the_version_the_marker_and_the_stubs(tmp_path):
    # Built from a copy: pip builds in the source tree, which must stay clean.
    src = tmp_path / "src"
    shutil.copytree(PKG, src, ignore=shutil.ignore_patterns("tests", "build", "*.egg-info", "__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path / "dist"), str(src)], check=True, capture_output=True)
    (whl,) = (tmp_path / "dist").glob("cogfeed-*.whl")
    assert whl.name.startswith(f"cogfeed-{cogfeed.__version__}-")
    with zipfile.ZipFile(whl) as z:
        names = set(z.namelist())
        metadata = z.read(f"cogfeed-{cogfeed.__version__}.dist-info/METADATA").decode()
    assert f"\nVersion: {cogfeed.__version__}\n" in metadata
    assert {"cogfeed/py.typed", "cogfeed/v1/feed_pb2.pyi", "cogfeed/v1/feed_pb2.py",
            "cogfeed/v1/feed_pb2_grpc.py", "cogfeed/torch.py", "cogfeed/xarray.py", "cogfeed/torchgeo.py",
            "cogfeed/lightning.py"} <= names
