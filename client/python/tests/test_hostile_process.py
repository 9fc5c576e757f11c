"""The daemon as a process under attack and at its edges: hostile request patterns in
parallel under an address-space limit (it stays up, RSS stays within the documented
bound), SIGTERM with a client that never reads, start-up errors with their cause, the CLI
on a closed pipe, plain logs on a non-terminal, reflection v1alpha, and the client CLI
saying that it is waiting for a daemon that is down."""

import os
import re
import shutil
import signal
import subprocess
import threading
import time

import grpc
import pytest

from cogfeed.v1 import feed_pb2 as pb
from cogfeed.v1 import feed_pb2_grpc

from conftest import binary, free_port

MIB = 1 << 20


def serve(config_text, tmp_path, prefix=()):
    port = free_port()
    cfg = tmp_path / "cogfeed.toml"
    cfg.write_text(config_text)
    proc = subprocess.Popen(
        [*prefix, binary("cogfeed"), "serve", "--config", str(cfg), "--listen", f"127.0.0.1:{port}",
         "--metrics-listen", f"127.0.0.1:{free_port()}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    lines = []
    deadline = time.time() + 120
    for line in proc.stderr:
        lines.append(line)
        if "grpc listening on" in line:
            # Keep draining stderr so the daemon never blocks on a full pipe.
            threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True).start()
            return proc, f"127.0.0.1:{port}", lines
        if time.time() > deadline:
            break
    proc.kill()
    raise RuntimeError("daemon did not start:\n" + "".join(lines))


def rss_peak_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM")


def channel(addr):
    return grpc.insecure_channel(addr, options=[("grpc.max_receive_message_length", 1 << 30)])


@pytest.fixture(scope="module")
def big_scenes(tmp_path_factory):
    """Two 2048 x 2048 four-band uint16 scenes (32 MiB of pixels each)."""
    d = tmp_path_factory.mktemp("big")
    subprocess.run([binary("cogfeed"), "demo-data", str(d), "--scenes", "2", "--size", "2048"],
                   check=True, capture_output=True)
    return d


@pytest.mark.skipif(shutil.which("prlimit") is None, reason="prlimit (util-linux) is not installed")
def test_hostile_patterns_in_parallel_under_a_memory_limit(big_scenes, tmp_path):
    budget, cache = 1024 * MIB, 256 * MIB
    config = f"""
[cache]
capacity_bytes = {cache}
[limits]
memory_budget_bytes = {budget}
memory_per_caller_bytes = {budget}
admission_wait_secs = 1
stall_timeout_secs = 30
[[datasets]]
name = "big"
scenes = ["{big_scenes}/scene_00.tif", "{big_scenes}/scene_01.tif"]
"""
    # 6 GiB of address space: room for thread stacks and the allocator's reservations.
    proc, addr, logs = serve(config, tmp_path, prefix=("prlimit", f"--as={6 << 30}", "--"))
    try:
        stub = feed_pb2_grpc.FeedStub(channel(addr))
        codes = {}
        lock = threading.Lock()

        def note(name, code):
            with lock:
                codes.setdefault(name, []).append(code)

        def window(dup):
            bands = [1] * 40 if dup else [1, 2, 3, 4]
            try:
                r = stub.ReadWindow(pb.ReadWindowRequest(dataset="big", scene=0, width=2048, height=2048,
                                                         bands=bands), timeout=60)
                note("window_dup" if dup else "window", "OK" if len(r.image.data) else "EMPTY")
            except grpc.RpcError as e:
                note("window_dup" if dup else "window", e.code().name)

        held = []

        def huge_stream():
            # The largest batch the default limits allow (256 MiB), never read.
            req = pb.StreamBatchesRequest(dataset="big", sampler=pb.SAMPLER_RANDOM, patch_size=2048,
                                          batch_size=8, samples_per_epoch=64, job="huge")
            call = stub.StreamBatches(req, timeout=60)
            held.append(call)
            try:
                next(call)
                note("huge", "OK")
            except grpc.RpcError as e:
                note("huge", e.code().name)

        def small_streams():
            # 64 streams of 4 MiB batches that never read.
            for i in range(64):
                req = pb.StreamBatchesRequest(dataset="big", sampler=pb.SAMPLER_RANDOM, patch_size=512,
                                              batch_size=2, samples_per_epoch=100000, job=f"idle{i}")
                held.append(stub.StreamBatches(req, timeout=60))

        threads = [threading.Thread(target=window, args=(True,)) for _ in range(4)]
        threads += [threading.Thread(target=window, args=(False,)) for _ in range(4)]
        threads += [threading.Thread(target=huge_stream), threading.Thread(target=small_streams)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
        time.sleep(3)
        assert proc.poll() is None, "the daemon died:\n" + "".join(logs[-20:])
        assert set(codes["window_dup"]) == {"INVALID_ARGUMENT"}, codes
        # Whole-scene windows race the idle streams for the budget: served, or refused by name.
        assert set(codes["window"]) <= {"OK", "RESOURCE_EXHAUSTED"} and len(codes["window"]) == 4, codes
        assert codes["huge"] == ["RESOURCE_EXHAUSTED"], codes
        # Clients that go away return what they held; a well-behaved client is served.
        for call in held:
            call.cancel()
        time.sleep(1)
        r = stub.ReadWindow(pb.ReadWindowRequest(dataset="big", scene=1, width=2048, height=2048), timeout=60)
        assert len(r.image.data) == 2048 * 2048 * 4 * 2
        peak = rss_peak_bytes(proc.pid)
        bound = budget + cache + 512 * MIB
        print(f"peak RSS {peak / MIB:.0f} MiB, bound {bound / MIB:.0f} MiB")
        assert peak < bound, f"peak RSS {peak / MIB:.0f} MiB over the bound {bound / MIB:.0f} MiB"
        assert not any("panicked" in line for line in logs)
    finally:
        proc.kill()
        proc.wait()


def test_sigterm_with_a_client_that_never_reads_exits_within_ten_seconds(demo_dir, tmp_path):
    proc, addr, logs = serve(f'[[datasets]]\nname = "demo"\nscenes = ["{demo_dir}/scene_00.tif"]\n', tmp_path)
    try:
        stub = feed_pb2_grpc.FeedStub(channel(addr))
        call = stub.StreamBatches(pb.StreamBatchesRequest(dataset="demo", patch_size=256, batch_size=16,
                                                          sampler=pb.SAMPLER_RANDOM, samples_per_epoch=100000))
        time.sleep(1.5)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)
        took = time.monotonic() - started
        assert took < 10, f"exit took {took:.1f} s"
        call.cancel()
    finally:
        proc.kill()
        proc.wait()
    # Logs on a pipe carry no colour codes.
    assert not any("\x1b[" in line for line in logs), "ANSI escapes in non-terminal logs"


def test_start_up_errors_keep_their_cause(demo_dir, tmp_path):
    proc, addr, _ = serve(f'[[datasets]]\nname = "demo"\nscenes = ["{demo_dir}/scene_00.tif"]\n', tmp_path)
    try:
        second = subprocess.run(
            [binary("cogfeed"), "serve", "--data-dir", str(demo_dir), "--listen", addr,
             "--metrics-listen", "127.0.0.1:0"],
            capture_output=True, text=True, timeout=60,
        )
        assert second.returncode == 1
        assert re.search(rf"cannot listen on {re.escape(addr)}: .*(in use|os error 98)", second.stderr), second.stderr
    finally:
        proc.kill()
        proc.wait()


def test_inspect_into_a_closed_pipe_does_not_panic(demo_dir):
    child = subprocess.Popen([binary("cogfeed"), "inspect", str(demo_dir / "scene_00.tif")],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    child.stdout.close()  # a reader that went away, as `| head -c 0` does
    _, err = child.communicate(timeout=60)
    assert b"panicked" not in err, err
    assert child.returncode == 0, err


def test_reflection_v1alpha_is_served(daemon):
    ch = grpc.insecure_channel(daemon.address)
    for version in ("v1", "v1alpha"):
        call = ch.stream_stream(f"/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo",
                                request_serializer=lambda b: b, response_deserializer=lambda b: b)
        # ServerReflectionRequest { list_services: "" } (field 7, a string).
        replies = list(call(iter([b"\x3a\x00"]), timeout=10))
        assert replies and b"cogfeed.v1.Feed" in replies[0], (version, replies)


def test_cli_says_it_is_waiting_for_a_daemon_that_went_down(demo_dir, tmp_path):
    proc, addr, _ = serve(f'[[datasets]]\nname = "demo"\nscenes = ["{demo_dir}/scene_00.tif"]\n', tmp_path)
    child = subprocess.Popen(
        [binary("cogfeed-client"), "--server", addr, "stream", "--dataset", "demo", "--patch-size", "64",
         "--batch-size", "1", "--samples-per-epoch", "100000000"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        time.sleep(2)
        proc.kill()
        proc.wait()
        time.sleep(3)
    finally:
        child.kill()
    _, err = child.communicate(timeout=10)
    assert re.search(r"daemon at .* unavailable .*retrying for \d+ s more", err), err
