"""The gRPC client and the numpy Loader.

A `Loader` iterates the batches of one rank of one epoch. If the stream breaks with
UNAVAILABLE (daemon restart, network blip) it reconnects with exponential backoff and resumes
from the cursor of the last batch it delivered, so nothing is lost or repeated. Other errors
raise `CogfeedError` with the gRPC status and message.
"""

import os
import socket
import time
from dataclasses import dataclass
from typing import Iterator, Optional, Sequence

import grpc
import numpy as np

from ._alloc import keep_large_allocations
from ._errors import CogfeedError, from_rpc_error
from ._tensor import to_numpy
from ._wire import decode_batch
from .v1 import feed_pb2 as pb
from .v1 import feed_pb2_grpc as pb_grpc

#: Channel options for multi-megabyte batches: large messages, 1 MiB HTTP/2 frames and a
#: deep read-ahead (the biggest throughput levers measured for this kind of stream).
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", 1 << 30),
    ("grpc.max_send_message_length", 1 << 20),
    ("grpc.http2.max_frame_size", 1 << 20),
    ("grpc.http2.lookahead_bytes", 32 << 20),
    # A restarted daemon is reached as soon as it listens: gRPC's default reconnect backoff
    # starts at 1 s, and channels share subchannels (and their backoff) unless told not to.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.use_local_subchannel_pool", 1),
]

_SAMPLERS = {"aligned": pb.SAMPLER_ALIGNED, "random": pb.SAMPLER_RANDOM, "grid": pb.SAMPLER_GRID}


@dataclass
class Batch:
    """One batch: numpy views over the received bytes."""

    image: np.ndarray  # [B, C, H, W]
    label: Optional[np.ndarray]  # [B, H, W] or None
    windows: np.ndarray  # [B, 6] int64: scene, col, row, width, height, level
    epoch: int
    index: int  # batch index within this rank's share of the epoch
    cursor: int  # global sample offset after this batch: resume from here


def _read(path_or_bytes):
    if path_or_bytes is None or isinstance(path_or_bytes, bytes):
        return path_or_bytes
    with open(path_or_bytes, "rb") as f:
        return f.read()


class Client:
    """A connection to one cogfeed daemon.

    `tls` may be a CA file path (or PEM bytes), or a dict with `ca`, `cert`, `key` for mTLS.
    `token` is sent as a bearer token on every call (default: `$COGFEED_TOKEN`).
    """

    def __init__(self, address: str, token: Optional[str] = None, tls=None, options=None):
        self.address = address
        self._token = token if token is not None else (os.environ.get("COGFEED_TOKEN") or None)
        self._tls = tls
        self._options = list(CHANNEL_OPTIONS) + list(options or [])
        self._connect()

    def _connect(self):
        target = self.address.split("://", 1)[-1]
        if self._tls:
            tls = self._tls if isinstance(self._tls, dict) else {"ca": self._tls}
            creds = grpc.ssl_channel_credentials(
                root_certificates=_read(tls.get("ca")),
                private_key=_read(tls.get("key")),
                certificate_chain=_read(tls.get("cert")),
            )
            self._channel = grpc.secure_channel(target, creds, options=self._options)
        else:
            self._channel = grpc.insecure_channel(target, options=self._options)
        self._stub = pb_grpc.FeedStub(self._channel)
        # StreamBatches with the raw message bytes: payloads are wrapped, not copied.
        self._raw_stream = self._channel.unary_stream(
            "/cogfeed.v1.Feed/StreamBatches",
            request_serializer=pb.StreamBatchesRequest.SerializeToString,
            response_deserializer=lambda raw: raw,
        )

    def reconnect(self):
        """Drops the channel and opens a new one."""
        self.close()
        self._connect()

    def metadata(self, extra=()):
        md = list(extra)
        if self._token:
            md.append(("authorization", f"Bearer {self._token}"))
        return md

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, method, request):
        try:
            return method(request, metadata=self.metadata())
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    def datasets(self):
        """The datasets served: list of `DatasetSummary` messages."""
        return list(self._call(self._stub.ListDatasets, pb.ListDatasetsRequest()).datasets)

    def describe(self, name: str):
        """One dataset: a `DatasetInfo` message (scenes, bands, dtype, levels, version)."""
        return self._call(self._stub.DescribeDataset, pb.DescribeDatasetRequest(dataset=name))

    def count(self, request) -> "pb.CountBatchesResponse":
        """How many batches a stream request would send (validated, no data read)."""
        return self._call(self._stub.CountBatches, request)

    def read_window(self, dataset, scene, col, row, width, height, level=0, bands=None, labels=False):
        """One window of one scene: (image [C, H, W], label [H, W] or None)."""
        r = pb.ReadWindowRequest(
            dataset=dataset, scene=scene, level=level, col=col, row=row, width=width, height=height,
            bands=list(bands or []), labels=labels,
        )
        resp = self._call(self._stub.ReadWindow, r)
        label = to_numpy(resp.label) if resp.HasField("label") else None
        return to_numpy(resp.image), label

    def stream(self, request, metadata=()):
        """`Batch` messages of a stream request (grpc errors propagate as RpcError)."""
        return self._stub.StreamBatches(request, metadata=self.metadata(metadata))

    def stream_raw(self, request, metadata=()):
        """Serialized `Batch` messages of a stream request, as received."""
        return self._raw_stream(request, metadata=self.metadata(metadata))


def replicas(address) -> list:
    """The daemons named by `address`: a list, a comma-separated string, or one DNS name
    whose addresses are the replicas (a Kubernetes headless Service)."""
    if isinstance(address, (list, tuple)):
        found = [str(a) for a in address]
    else:
        found = [a.strip() for a in str(address).split(",") if a.strip()]
    if len(found) == 1 and "://" not in found[0]:
        host, _, port = found[0].rpartition(":")
        if host and port.isdigit() and not host.replace(".", "").isdigit():
            try:
                infos = socket.getaddrinfo(host, int(port), socket.AF_INET, socket.SOCK_STREAM)
                ips = sorted({f"{i[4][0]}:{i[4][1]}" for i in infos})
                if len(ips) > 1:
                    return ips
            except OSError:
                pass
    if not found:
        raise ValueError("no server address given")
    return found


class Loader:
    """Iterates the batches of one rank of one epoch as numpy arrays.

    Parameters mirror `StreamBatchesRequest`. `len()` is the number of batches this loader
    yields (asked from the server). `state_dict()` / `load_state_dict()` hold epoch and
    cursor; a loader built with `cursor=` resumes there, also with another world size.
    """

    def __init__(
        self,
        address,
        dataset: str,
        sampler: str = "random",
        patch_size: int = 256,
        batch_size: int = 16,
        seed: int = 0,
        epoch: int = 0,
        labels: bool = False,
        dtype: str = "native",
        level: int = 0,
        bands: Optional[Sequence[int]] = None,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        cursor: int = 0,
        stride: int = 0,
        max_batches: int = 0,
        normalize: bool = False,
        augment: bool = False,
        samples_per_epoch: int = 0,
        prefetch: int = 0,
        job: str = "python",
        token: Optional[str] = None,
        tls=None,
        reconnect_timeout: float = 120.0,
    ):
        if sampler not in _SAMPLERS:
            raise ValueError(f"unknown sampler {sampler!r} (aligned, random, grid)")
        keep_large_allocations()
        self.rank = 0 if rank is None else int(rank)
        if isinstance(address, Client):
            self.replicas = [address.address]
            self.client = address
        else:
            # A fleet: rank r starts on replica r mod n and moves on when its replica fails.
            self.replicas = replicas(address)
            self._replica = self.rank % len(self.replicas)
            self.client = Client(self.replicas[self._replica], token=token, tls=tls)
        self.dataset = dataset
        self.sampler = sampler
        self.patch_size = patch_size
        self.batch_size = batch_size
        self.seed = seed
        self.epoch = epoch
        self.labels = labels
        self.dtype = dtype
        self.level = level
        self.bands = list(bands or [])
        self.world_size = 1 if world_size is None else int(world_size)
        self.cursor = cursor
        # Where the current pass started from (len() counts from here).
        self._origin = cursor
        self._finished = False
        self.stride = stride
        self.max_batches = max_batches
        self.normalize = normalize
        self.augment = augment
        self.samples_per_epoch = samples_per_epoch
        self.prefetch = prefetch
        self.job = job
        self.reconnect_timeout = reconnect_timeout
        #: Seconds `next()` spent waiting for data (the training loop was starved).
        self.data_wait_seconds = 0.0
        #: Reconnections made after UNAVAILABLE.
        self.reconnects = 0

    def request(self, cursor=None, max_batches=None):
        """The `StreamBatchesRequest` for this loader."""
        return pb.StreamBatchesRequest(
            dataset=self.dataset, job=self.job, sampler=_SAMPLERS[self.sampler], patch_size=self.patch_size,
            stride=self.stride, level=self.level, batch_size=self.batch_size, seed=self.seed, epoch=self.epoch,
            rank=self.rank, world_size=self.world_size,
            cursor=self.cursor if cursor is None else cursor,
            max_batches=self.max_batches if max_batches is None else max_batches,
            bands=self.bands, labels=self.labels, dtype=self.dtype, normalize=self.normalize,
            augment=self.augment, samples_per_epoch=self.samples_per_epoch, prefetch=self.prefetch,
        )

    def __len__(self):
        # Each replica at most once: a dead one is skipped, as streams do.
        for attempt in range(len(self.replicas)):
            try:
                return int(self.client.count(self.request(cursor=self._origin)).batches)
            except CogfeedError as e:
                if e.code != grpc.StatusCode.UNAVAILABLE or attempt == len(self.replicas) - 1:
                    raise
                self._next_replica()
        raise AssertionError("unreachable")

    def _next_replica(self):
        """Moves this loader to the next replica of its list."""
        if len(self.replicas) > 1:
            self._replica = (self._replica + 1) % len(self.replicas)
            self.client.address = self.replicas[self._replica]
        self.client.reconnect()

    def state_dict(self):
        return {"epoch": self.epoch, "cursor": self.cursor}

    def load_state_dict(self, state):
        self.epoch = int(state["epoch"])
        self.cursor = self._origin = int(state["cursor"])
        self._finished = False

    def set_epoch(self, epoch: int):
        """Starts `epoch` from its beginning."""
        self.epoch = epoch
        self.cursor = self._origin = 0
        self._finished = False

    def __iter__(self) -> Iterator[Batch]:
        if self._finished:
            # A new pass over the same epoch starts where the previous one started.
            self.cursor, self._finished = self._origin, False
        cursor = self.cursor
        delivered = 0
        backoff = 0.1
        failing_since = None
        while True:
            remaining = 0 if self.max_batches == 0 else self.max_batches - delivered
            if self.max_batches and remaining <= 0:
                break
            extra = [("cogfeed-data-wait-seconds", f"{self.data_wait_seconds:.3f}")] if self.reconnects else []
            base = delivered
            try:
                waiting = time.perf_counter()
                for raw in self.client.stream_raw(self.request(cursor=cursor, max_batches=remaining), extra):
                    self.data_wait_seconds += time.perf_counter() - waiting
                    failing_since = None
                    backoff = 0.1
                    meta, image, label, windows = decode_batch(raw)
                    batch = Batch(
                        image=image, label=label, windows=windows, epoch=meta["epoch"],
                        index=base + meta["index"], cursor=meta["cursor"],
                    )
                    cursor = meta["cursor"]
                    self.cursor = cursor
                    delivered += 1
                    yield batch
                    waiting = time.perf_counter()
                break
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.UNAVAILABLE:
                    raise from_rpc_error(e) from None
                now = time.monotonic()
                failing_since = failing_since or now
                if now - failing_since > self.reconnect_timeout:
                    raise from_rpc_error(e) from None
                time.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
                self._next_replica()
                self.reconnects += 1
        # The cursor stays at the end (state_dict says the epoch is done); iterating again
        # replays the pass.
        self._finished = True
