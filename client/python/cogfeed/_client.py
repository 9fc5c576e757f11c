"""The gRPC client and the numpy Loader.

A `Loader` iterates the batches of one rank of one epoch. If the stream breaks with
UNAVAILABLE (daemon restart, network blip) it reconnects with exponential backoff and resumes
from the cursor of the last batch it delivered, so nothing is lost or repeated. Other errors
raise the `CogfeedError` subclass of their gRPC status (`cogfeed._errors`).

The Loader's request parameters are the fields of `StreamBatchesRequest`, one keyword each
(typed, with its default); `request()` builds the message from the descriptor, and
`tests/test_loader_offline.py` checks that the keywords are exactly the proto's fields, so a
field added to the proto is a keyword to add here.
"""

import datetime as _dt
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import grpc
import numpy as np

from ._alloc import keep_large_allocations
from ._errors import CogfeedError, InvalidRequest, Stream, Unavailable, call
from ._state import EpochCursor
from ._tensor import to_numpy
from ._wire import SampleMeta, SkippedSample, decode_batch
from .v1 import feed_pb2 as pb
from .v1 import feed_pb2_grpc as pb_grpc

#: Channel options for multi-megabyte batches: large messages, 1 MiB HTTP/2 frames and a
#: deep read-ahead (the biggest throughput levers measured for this kind of stream).
CHANNEL_OPTIONS: List[Tuple[str, Any]] = [
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

#: Metadata sent on every stream open: seconds the training loop waited for data since the
#: loader's previous stream open (the server adds them up per job).
DATA_WAIT_HEADER = "cogfeed-data-wait-seconds"

#: A PEM file: its path, or its bytes.
PEM = Union[str, bytes, "os.PathLike[str]"]
#: `tls=`: a CA (path or PEM bytes), or {"ca": ..., "cert": ..., "key": ...} for mTLS.
TLS = Union[PEM, Mapping[str, Optional[PEM]], None]
#: `mixture=`: {dataset: weight}, or `MixturePart` messages.
Mixture = Union[Mapping[str, float], Sequence[pb.MixturePart]]


@dataclass
class Batch:
    """One batch: numpy views over the received bytes.

    B is batch_size, or fewer when the server skipped unreadable samples (`skipped`).
    User-named things (layers, time masks, point attributes) are each in a dict of their own,
    beside the fixed fields: `batch.layers["meta"]` is a layer, `batch.meta` the samples.
    `batch[name]` is a layer by name.
    """

    image: np.ndarray  # [B, C, H, W]
    label: Optional[np.ndarray]  # [B, H, W] or None
    windows: np.ndarray  # [B, 7] int64: scene, col, row, width, height, level, padded (0/1)
    epoch: int
    index: int  # batch index within this rank's share of the epoch
    cursor: int  # global sample offset after this batch: resume from here
    skipped: List[SkippedSample] = field(default_factory=list)  # samples left out of this batch
    #: Map-space (STAC) datasets: one array per layer, [B, C, H_l, W_l] (time layers
    #: [B, T, C, H_l, W_l], oldest step first), by name.
    layers: Dict[str, np.ndarray] = field(default_factory=dict)
    #: Map-space datasets: a `SampleMeta` per sample (items, datetime, crs, bounds, ...).
    meta: List[SampleMeta] = field(default_factory=list)
    #: The dataset's `DatasetInfo` (layer assets and nodata, scene names; what
    #: `cogfeed.preview` draws with), or None when the daemon did not say.
    info: Optional[pb.DatasetInfo] = None
    #: Time layers: uint8 [B, T], 1 where the step holds a date (0: filled with nodata).
    time_masks: Dict[str, np.ndarray] = field(default_factory=dict)
    #: The points sampler: each numeric attribute of the points, float64 [B], by name.
    targets: Dict[str, np.ndarray] = field(default_factory=dict)
    #: The version of the dataset the batch was drawn from (kept in `state_dict()` with
    #: the cursor; a resume on a changed dataset is refused).
    dataset_version: str = ""

    def __getitem__(self, name: str) -> np.ndarray:
        """A layer by name (`batch["swir"]`, `batch.layers[name]`); "image" and "label" also
        name the scene dataset's arrays."""
        if name in self.layers:
            return self.layers[name]
        if name == "image" or (name == "label" and self.label is not None):
            return getattr(self, name)
        raise KeyError(f"no layer {name!r} in this batch (layers: {', '.join(self.layers) or 'none'})")


def _read(path_or_bytes: Optional[PEM]) -> Optional[bytes]:
    if path_or_bytes is None or isinstance(path_or_bytes, bytes):
        return path_or_bytes
    with open(path_or_bytes, "rb") as f:
        return f.read()


class Client:
    """A connection to one cogfeed daemon.

    `tls` may be a CA file path (or PEM bytes), or a dict with `ca`, `cert`, `key` for mTLS.
    `token` is sent as a bearer token on every call (default: `$COGFEED_TOKEN`). `options`
    are gRPC channel options added to `CHANNEL_OPTIONS`. Every call raises a `CogfeedError`
    subclass on failure, never a `grpc.RpcError`.
    """

    def __init__(self, address: str, token: Optional[str] = None, tls: TLS = None,
                 options: Optional[Sequence[Tuple[str, Any]]] = None) -> None:
        self.address = address
        self._token = token if token is not None else (os.environ.get("COGFEED_TOKEN") or None)
        self._tls = tls
        self._options = list(CHANNEL_OPTIONS) + list(options or [])
        self._connect()

    def _connect(self) -> None:
        target = self.address.split("://", 1)[-1]
        if self._tls:
            tls = self._tls if isinstance(self._tls, Mapping) else {"ca": self._tls}
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
        # ReadFootprint likewise: one Batch message, decoded without copying its payloads.
        self._raw_read_footprint = self._channel.unary_unary(
            "/cogfeed.v1.Feed/ReadFootprint",
            request_serializer=pb.ReadFootprintRequest.SerializeToString,
            response_deserializer=lambda raw: raw,
        )

    def reconnect(self) -> None:
        """Drops the channel and opens a new one."""
        self.close()
        self._connect()

    def metadata(self, extra: Sequence[Tuple[str, str]] = ()) -> List[Tuple[str, str]]:
        """The call metadata: `extra` and the bearer token."""
        md = list(extra)
        if self._token:
            md.append(("authorization", f"Bearer {self._token}"))
        return md

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _call(self, method: Any, request: Any) -> Any:
        return call(method, request, metadata=self.metadata())

    def datasets(self) -> List[pb.DatasetSummary]:
        """The datasets served: list of `DatasetSummary` messages."""
        return list(self._call(self._stub.ListDatasets, pb.ListDatasetsRequest()).datasets)

    def describe(self, name: str) -> pb.DatasetInfo:
        """One dataset: a `DatasetInfo` message (scenes, bands, dtype, levels, version)."""
        return self._call(self._stub.DescribeDataset, pb.DescribeDatasetRequest(dataset=name))

    def count(self, request: pb.StreamBatchesRequest) -> pb.CountBatchesResponse:
        """How many batches a stream request would send (validated, no data read)."""
        return self._call(self._stub.CountBatches, request)

    def read_window(self, dataset: str, scene: int, col: int, row: int, width: int, height: int, level: int = 0,
                    bands: Optional[Sequence[int]] = None,
                    labels: bool = False) -> Tuple[np.ndarray, Optional[np.ndarray]]:
        """One window of one scene: (image [C, H, W], label [H, W] or None)."""
        r = pb.ReadWindowRequest(
            dataset=dataset, scene=scene, level=level, col=col, row=row, width=width, height=height,
            bands=list(bands or []), labels=labels,
        )
        resp = self._call(self._stub.ReadWindow, r)
        label = to_numpy(resp.label) if resp.HasField("label") else None
        return to_numpy(resp.image), label

    def read(self, dataset: str, bounds: Sequence[float], crs: str,
             datetime: Union[str, _dt.datetime, None] = None,
             layers: Optional[Sequence[str]] = None, resolution: Optional[float] = None,
             item: Optional[str] = None) -> Batch:
        """One footprint of a map-space dataset, as a `Batch` of one sample: `b["image"]` is
        [1, C, H, W] (time layers [1, T, C, H, W]), `b.meta[0]` its `SampleMeta`, exactly what a
        stream of that footprint carries. `bounds` = (minx, miny, maxx, maxy) in `crs`
        ("EPSG:32633"); in a reference grid's CRS they are snapped to its pixel edges.
        `resolution`: the reference layer's pixel size in CRS units (None: the dataset's).
        `datetime` (RFC 3339, or a `datetime.datetime`: naive = UTC) and `item` (a streamed
        sample's `meta.datetime` and `meta.drawn`) choose the Item the footprint is planned
        on; layers None = every layer. Bad input raises `InvalidRequest` naming what is wrong,
        before anything is sent or from the daemon."""
        return self.read_many(dataset, [{"bounds": bounds, "crs": crs, "datetime": datetime,
                                          "resolution": resolution, "item": item}], layers=layers)

    def read_many(self, dataset: str, footprints: Sequence[Any],
                  layers: Optional[Sequence[str]] = None) -> Batch:
        """Many footprints in one call: a `Batch` of one sample per footprint, in order (at most
        the daemon's `limits.max_batch_size`; every footprint's layers of one shape). Each
        footprint is a dict with `bounds`, `crs` and optionally `datetime`, `resolution`,
        `item` (as for `read`), a `SampleMeta` (read back a streamed sample exactly), or a
        `pb.Footprint`."""
        request = pb.ReadFootprintRequest(dataset=dataset, layers=list(layers or []),
                                          footprints=[_footprint(k, f) for k, f in enumerate(footprints)])
        raw = self._call(self._raw_read_footprint, request)
        meta, image, label, windows, skipped = decode_batch(raw)
        return Batch(
            image=image, label=label, windows=windows, epoch=meta["epoch"], index=meta["index"],
            cursor=meta["cursor"], skipped=skipped, layers=meta["layers"], meta=meta["samples"],
            time_masks=meta["time_masks"], targets=meta["targets"], dataset_version=meta["dataset_version"],
        )

    def stream(self, request: pb.StreamBatchesRequest,
               metadata: Sequence[Tuple[str, str]] = ()) -> "Stream[pb.Batch]":
        """`Batch` messages of a stream request. A failure, at the open or in the middle of
        the stream, raises its `CogfeedError` while iterating; `cancel()` ends the stream."""
        return Stream(call(self._stub.StreamBatches, request, metadata=self.metadata(metadata)))

    def stream_raw(self, request: pb.StreamBatchesRequest,
                   metadata: Sequence[Tuple[str, str]] = ()) -> "Stream[bytes]":
        """Serialized `Batch` messages of a stream request, as received (errors as `stream`)."""
        return Stream(call(self._raw_stream, request, metadata=self.metadata(metadata)))


#: The keys of a footprint given as a dict.
FOOTPRINT_KEYS = ("bounds", "crs", "datetime", "resolution", "item")


def _footprint(k: int, f: Any) -> pb.Footprint:
    """Footprint `k` of a call as a `Footprint` message, from a dict, a `SampleMeta` or a
    message; what cannot be one raises `InvalidRequest` naming it, before anything is sent."""
    if isinstance(f, pb.Footprint):
        return f
    if isinstance(f, SampleMeta):
        return pb.Footprint(crs=f.crs, bounds=list(f.bounds), datetime=f.datetime or "", item=f.drawn)
    if not isinstance(f, Mapping):
        raise InvalidRequest(f"footprint {k}: a dict, a SampleMeta or a cogfeed.v1.Footprint, "
                             f"not {type(f).__name__}")
    unknown = sorted(str(key) for key in f if key not in FOOTPRINT_KEYS)
    if unknown:
        raise InvalidRequest(f"footprint {k}: unknown keys {unknown} (known: {', '.join(FOOTPRINT_KEYS)})")
    if f.get("bounds") is None or not f.get("crs"):
        raise InvalidRequest(f"footprint {k}: needs bounds and crs")
    try:
        bounds = [float(v) for v in f["bounds"]]
        resolution = float(f.get("resolution") or 0.0)
    except (TypeError, ValueError):
        raise InvalidRequest(f"footprint {k}: bounds and resolution are numbers") from None
    if len(bounds) != 4:
        raise InvalidRequest(f"footprint {k}: {len(bounds)} bounds (give minx, miny, maxx, maxy)")
    when = f.get("datetime")
    if isinstance(when, _dt.datetime):
        # A naive datetime is taken as UTC.
        when = (when if when.tzinfo else when.replace(tzinfo=_dt.timezone.utc)).isoformat()
    for name, value in (("crs", f["crs"]), ("datetime", when), ("item", f.get("item"))):
        if value is not None and not isinstance(value, str):
            raise InvalidRequest(f"footprint {k}: {name} is a string, not {type(value).__name__}")
    return pb.Footprint(crs=f["crs"], bounds=bounds, datetime=when or "", resolution=resolution,
                        item=f.get("item") or "")


def replicas(address: Union[str, Sequence[str]]) -> List[str]:
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
                ips = sorted({f"{i[4][0]}:{i[4][1]}" for i in infos})  # type: ignore[str-bytes-safe]
                if len(ips) > 1:
                    return ips
            except OSError:
                pass
    if not found:
        raise InvalidRequest("no server address given")
    return found


def _choices(enum: Any) -> Dict[str, int]:
    """An enum's values by short name: {"aligned": SAMPLER_ALIGNED, ...} (UNSPECIFIED left out)."""
    prefix = enum.values_by_number[0].name[:-len("UNSPECIFIED")]
    return {v.name[len(prefix):].lower(): v.number for v in enum.values if v.number}


#: The request fields, in proto order.
_FIELDS = pb.StreamBatchesRequest.DESCRIPTOR.fields
#: Loader defaults that are not the proto's zero value (rank None = 0, world_size None = 1).
_DEFAULTS = {"job": "python", "sampler": "random", "patch_size": 256, "batch_size": 16, "world_size": 1,
             "dtype": "native"}


def _default(f: Any) -> Any:
    if f.name in _DEFAULTS:
        return _DEFAULTS[f.name]
    return [] if f.is_repeated else f.default_value


class Loader(EpochCursor):
    """Iterates the batches of one rank of one epoch as numpy `Batch`es.

    `address` is one daemon ("host:port"), a list or comma-separated string of replicas (rank
    r starts on replica r mod n and moves on when its replica fails), a DNS name whose
    addresses are the replicas, or a `Client`. `token` and `tls` are as for `Client`;
    `reconnect_timeout` is how many seconds of UNAVAILABLE the loader rides out (reconnecting
    with backoff and resuming at the last delivered cursor) before it raises `Unavailable`.

    The other keywords are the fields of `StreamBatchesRequest` (feed.proto), kept as
    attributes of the same name; None means the default:

    - `dataset`: the dataset's name (or `mixture` instead).
    - `job` ("python"): job name, shared by the ranks of one job (metrics).
    - `sampler` ("random"): "aligned" (tile-grid windows), "random" (any pixel offset),
      "grid" (a stride cover for inference, edges padded), "points" (a window centred on
      each point), "balanced" (classes drawn at their target shares).
    - `patch_size` (256), `stride` (0: patch_size, grid sampler), `level` (0: full
      resolution; overviews 1, 2, ...).
    - `batch_size` (16), `seed` (0), `epoch` (0).
    - `rank` (0) and `world_size` (1): this loader's share of the epoch.
    - `cursor` (0): the global sample offset to start from (resume); `max_batches` (0: the
      end of the epoch).
    - `bands` (all): 1-based bands; `labels` (False): also stream the label raster.
    - `dtype` ("native"): "native", "float32", "float16", "bfloat16", "uint8", "uint16";
      `normalize` (False): (x - mean) / std with the dataset's statistics (float outputs);
      `augment` (False): seeded flips and 90-degree rotations of image and label alike.
    - `samples_per_epoch` (0: as many as aligned windows): random draws per epoch.
    - `prefetch` (0: automatic): windows the daemon decodes ahead.
    - `on_corrupt` (""): "" (the dataset's setting), "fail" or "skip" (unreadable samples
      are left out of their batch and listed in `Batch.skipped`).
    - `layers` (all): map-space datasets, the layers to stream by name.
    - `split` (""): map-space datasets with splits, "train", "val", ...
    - `mixture`: `{"a": 3, "b": 1}` instead of `dataset` mixes map-space datasets in one
      stream (each sample's `meta[i].dataset` says which).
    - `order` (""): "" (the dataset's `sampling.order`), "random" (the sampler's own order)
      or "local": samples sharing source tiles served close together (the same samples for
      aligned, grid and points, the same law for random); `open_blocks` (0: the dataset's,
      else sized from the daemon's tile cache) groups side by side, each opened `visits`
      (0: the dataset's, else 1) times per epoch. A resume must pass the same three.

    An unknown keyword is a TypeError, an unknown sampler an `InvalidRequest` (a ValueError);
    what the daemon refuses raises its `CogfeedError` subclass when iterating.

    `len()` is the number of batches this loader yields (asked from the server).
    `state_dict()` / `load_state_dict()` hold epoch, cursor and the dataset version the cursor
    was taken on; a loader built with `cursor=` (and `dataset_version=`) resumes there, also
    with another world size. A resume on a dataset that has changed since raises
    `FailedPrecondition` (the cursor no longer counts the same samples): restart the epoch.
    """

    dataset: str
    job: str
    sampler: Union[str, int]
    patch_size: int
    stride: int
    level: int
    batch_size: int
    seed: int
    rank: int
    world_size: int
    max_batches: int
    bands: List[int]
    labels: bool
    dtype: str
    normalize: bool
    augment: bool
    samples_per_epoch: int
    prefetch: int
    on_corrupt: str
    layers: List[str]
    split: str
    mixture: List[pb.MixturePart]
    order: str
    open_blocks: int
    visits: int
    client: Client
    replicas: List[str]

    def __init__(
        self,
        address: Union[str, Sequence[str], Client],
        dataset: Optional[str] = None,
        *,
        job: str = "python",
        sampler: str = "random",
        patch_size: int = 256,
        stride: int = 0,
        level: int = 0,
        batch_size: int = 16,
        seed: int = 0,
        epoch: int = 0,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        cursor: int = 0,
        max_batches: int = 0,
        bands: Optional[Sequence[int]] = None,
        labels: bool = False,
        dtype: str = "native",
        normalize: bool = False,
        augment: bool = False,
        samples_per_epoch: int = 0,
        prefetch: int = 0,
        on_corrupt: str = "",
        layers: Optional[Sequence[str]] = None,
        split: str = "",
        mixture: Optional[Mixture] = None,
        dataset_version: str = "",
        order: str = "",
        open_blocks: int = 0,
        visits: int = 0,
        token: Optional[str] = None,
        tls: TLS = None,
        reconnect_timeout: float = 120.0,
    ) -> None:
        fields: Dict[str, Any] = {
            "dataset": dataset, "job": job, "sampler": sampler, "patch_size": patch_size, "stride": stride,
            "level": level, "batch_size": batch_size, "seed": seed, "epoch": epoch, "rank": rank,
            "world_size": world_size, "cursor": cursor, "max_batches": max_batches, "bands": bands,
            "labels": labels, "dtype": dtype, "normalize": normalize, "augment": augment,
            "samples_per_epoch": samples_per_epoch, "prefetch": prefetch, "on_corrupt": on_corrupt,
            "layers": layers, "split": split, "mixture": mixture, "dataset_version": dataset_version,
            "order": order, "open_blocks": open_blocks, "visits": visits,
        }
        if isinstance(mixture, Mapping):
            # {"name": weight, ...}: one stream over several map-space datasets.
            fields["mixture"] = [pb.MixturePart(dataset=k, weight=float(w)) for k, w in mixture.items()]
        if (dataset is None) == (not fields["mixture"]):
            raise TypeError("Loader() needs a dataset or a mixture={name: weight, ...}")
        fields["dataset"] = dataset or ""
        for f in _FIELDS:
            value = fields.get(f.name)
            value = _default(f) if value is None else value
            if f.enum_type is not None and isinstance(value, str) and value not in _choices(f.enum_type):
                names = ", ".join(_choices(f.enum_type))
                raise InvalidRequest(f"unknown {f.name} {value!r} ({names})")
            setattr(self, f.name, list(value) if f.is_repeated else value)
        super().__init__(self.epoch, self.cursor, self.dataset_version)
        keep_large_allocations()
        self.rank, self.world_size = int(self.rank), int(self.world_size)
        if isinstance(address, Client):
            self.replicas = [address.address]
            self.client = address
        else:
            # A fleet: rank r starts on replica r mod n and moves on when its replica fails.
            self.replicas = replicas(address)
            self._replica = self.rank % len(self.replicas)
            self.client = Client(self.replicas[self._replica], token=token, tls=tls)
        self.reconnect_timeout = reconnect_timeout
        #: Seconds `next()` spent waiting for data (the training loop was starved).
        self.data_wait_seconds = 0.0
        # The part of it already sent (rounded as sent, so the deltas add up to the total).
        self._data_wait_sent = 0.0
        #: Reconnections made after UNAVAILABLE.
        self.reconnects = 0
        self._info: Optional[pb.DatasetInfo] = None

    def request(self, cursor: Optional[int] = None, max_batches: Optional[int] = None) -> pb.StreamBatchesRequest:
        """The `StreamBatchesRequest` for this loader: every field from its attribute."""
        values = {}
        for f in _FIELDS:
            value = getattr(self, f.name)
            if f.enum_type is not None and isinstance(value, str):
                value = _choices(f.enum_type)[value]
            values[f.name] = value
        if cursor is not None:
            values["cursor"] = cursor
        if max_batches is not None:
            values["max_batches"] = max_batches
        return pb.StreamBatchesRequest(**values)

    def stream_metadata(self) -> List[Tuple[str, str]]:
        """Metadata for a stream open: the data wait since the previous stream open."""
        total = round(self.data_wait_seconds, 3)
        delta, self._data_wait_sent = total - self._data_wait_sent, total
        return [(DATA_WAIT_HEADER, f"{delta:.3f}")]

    def _count(self, cursor: int) -> int:
        # Each replica at most once: a dead one is skipped, as streams do.
        for attempt in range(len(self.replicas)):
            try:
                return int(self.client.count(self.request(cursor=cursor)).batches)
            except Unavailable:
                if attempt == len(self.replicas) - 1:
                    raise
                self._next_replica()
        raise AssertionError("unreachable")

    def _next_replica(self) -> None:
        """Moves this loader to the next replica of its list."""
        if len(self.replicas) > 1:
            self._replica = (self._replica + 1) % len(self.replicas)
            self.client.address = self.replicas[self._replica]
        self.client.reconnect()

    def _dataset_info(self) -> Optional[pb.DatasetInfo]:
        """The dataset's `DatasetInfo`, asked once per loader (set on every Batch as `info`);
        None when the daemon could not say (asked again at the next iteration)."""
        if self._info is None:
            try:
                # A mixture's batches are described by its first part (the parts' layers agree).
                self._info = self.client.describe(self.dataset or self.mixture[0].dataset)
            except CogfeedError:
                self._info = None
        return self._info

    def __iter__(self) -> Iterator[Batch]:
        cursor = self._begin()
        info = self._dataset_info()
        delivered = 0
        backoff = 0.1
        failing_since = None
        while True:
            remaining = 0 if self.max_batches == 0 else self.max_batches - delivered
            if self.max_batches and remaining <= 0:
                break
            base = delivered
            try:
                request = self.request(cursor=cursor, max_batches=remaining)
                waiting = time.perf_counter()
                for raw in self.client.stream_raw(request, self.stream_metadata()):
                    self.data_wait_seconds += time.perf_counter() - waiting
                    failing_since = None
                    backoff = 0.1
                    meta, image, label, windows, skipped = decode_batch(raw)
                    batch = Batch(
                        image=image, label=label, windows=windows, epoch=meta["epoch"],
                        index=base + meta["index"], cursor=meta["cursor"], skipped=skipped,
                        layers=meta["layers"], meta=meta["samples"], info=info,
                        time_masks=meta["time_masks"], targets=meta["targets"],
                        dataset_version=meta["dataset_version"],
                    )
                    cursor = meta["cursor"]
                    self.cursor = cursor
                    # A reconnection resumes on this version or is refused.
                    self.dataset_version = meta["dataset_version"]
                    delivered += 1
                    yield batch
                    waiting = time.perf_counter()
                break
            except Unavailable:
                now = time.monotonic()
                failing_since = failing_since or now
                if now - failing_since > self.reconnect_timeout:
                    raise
                time.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
                self._next_replica()
                self.reconnects += 1
        self._end()
