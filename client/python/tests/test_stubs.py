"""The committed gRPC stubs and the messages' type stubs (.pyi) must be what grpcio-tools
generates from proto/ today."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PKG = Path(__file__).resolve().parents[1]


# Lines that name the generator's own release, not the proto: a newer grpcio-tools (CI pins
# the one the stubs were made with) must not read as a stale proto.
STAMPS = ("GRPC_GENERATED_VERSION = ", "# Protobuf Python Version: ")


def stamped(text):
    return "\n".join(line for line in text.splitlines() if not line.startswith(STAMPS))


def test_stubs_match_the_proto(tmp_path):
    pytest.importorskip("grpc_tools")
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", "-I", str(ROOT / "proto"), f"--python_out={tmp_path}",
         f"--pyi_out={tmp_path}", f"--grpc_python_out={tmp_path}",
         str(ROOT / "proto" / "cogfeed" / "v1" / "feed.proto")],
        check=True,
    )
    for name in ("feed_pb2.py", "feed_pb2.pyi", "feed_pb2_grpc.py"):
        fresh = stamped((tmp_path / "cogfeed" / "v1" / name).read_text())
        committed = stamped((PKG / "cogfeed" / "v1" / name).read_text())
        assert fresh == committed, (
            f"cogfeed/v1/{name} is stale: regenerate with "
            "python -m grpc_tools.protoc -I proto --python_out=client/python --pyi_out=client/python "
            "--grpc_python_out=client/python proto/cogfeed/v1/feed.proto"
        )
