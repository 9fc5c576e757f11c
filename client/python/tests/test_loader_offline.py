"""The Loader without a daemon: its request comes from the proto's descriptor, the data-wait
metadata goes with every stream open, epoch/cursor state is one class, and short batches
(samples skipped by the server, down to none) decode. Streams are hand-built Batch messages."""

import inspect

import pytest

import cogfeed
from cogfeed._state import EpochCursor
from cogfeed.v1 import feed_pb2 as pb
from conftest import requires_torch
from test_wire import skipping_batch

FIELDS = pb.StreamBatchesRequest.DESCRIPTOR.fields
ADDRESS = "127.0.0.1:1"  # never dialled: channels connect lazily


def some_value(f):
    """A non-default value for a request field, as a Loader keyword."""
    if f.enum_type is not None:
        return "grid"
    if f.message_type is not None:  # mixture parts
        return [pb.MixturePart(dataset="a", weight=3.0), pb.MixturePart(dataset="b", weight=1.0)]
    if f.is_repeated:
        return ["b", "a"] if f.type == f.TYPE_STRING else [3, 1]
    return {f.TYPE_STRING: "x", f.TYPE_BOOL: True}.get(f.type, 7)


def test_request_carries_every_proto_field():
    # A mixture stands instead of a dataset: every field but one of the two.
    for without in ["dataset", "mixture"]:
        values = {f.name: some_value(f) for f in FIELDS if f.name not in ("dataset", without)}
        request = cogfeed.Loader(ADDRESS, None if without == "dataset" else "x", **values).request()
        assert sorted(f.name for f, _ in request.ListFields()) == sorted(f.name for f in FIELDS if f.name != without)
        for f in FIELDS:
            if f.name != without:
                expected = pb.SAMPLER_GRID if f.enum_type is not None else some_value(f)
                assert getattr(request, f.name) == expected, f.name
    # One field at a time too: each keyword reaches its own field.
    for name, value in values.items():
        request = cogfeed.Loader(ADDRESS, "demo", **{name: value}).request()
        assert getattr(request, name) == (pb.SAMPLER_GRID if name == "sampler" else value), name
    # A mixture as a dict of weights.
    request = cogfeed.Loader(ADDRESS, mixture={"a": 3, "b": 1}).request()
    assert list(request.mixture) == some_value(pb.StreamBatchesRequest.DESCRIPTOR.fields_by_name["mixture"])
    with pytest.raises(TypeError, match="dataset or a mixture"):
        cogfeed.Loader(ADDRESS)


def test_defaults_are_unchanged():
    loader = cogfeed.Loader(ADDRESS, "demo")
    assert loader.request() == pb.StreamBatchesRequest(
        dataset="demo", job="python", sampler=pb.SAMPLER_RANDOM, patch_size=256, batch_size=16, world_size=1,
        dtype="native")
    assert (loader.sampler, loader.rank, loader.world_size, loader.bands, loader.on_corrupt) == ("random", 0, 1, [], "")
    # None means the default; request() can override cursor and max_batches.
    loader = cogfeed.Loader(ADDRESS, "demo", rank=None, world_size=None, bands=None, on_corrupt="skip", cursor=8)
    assert (loader.rank, loader.world_size, loader.bands) == (0, 1, [])
    request = loader.request(cursor=16, max_batches=2)
    assert (request.on_corrupt, request.cursor, request.max_batches) == ("skip", 16, 2)


def test_keywords_are_the_proto_fields_typed_in_proto_order():
    params = inspect.signature(cogfeed.Loader).parameters
    connection = ("token", "tls", "reconnect_timeout")
    assert list(params)[:2] == ["address", "dataset"]
    request = [n for n in list(params)[1:] if n not in connection]
    assert request == [f.name for f in FIELDS], "a StreamBatchesRequest field without its Loader keyword"
    for name, p in params.items():
        assert p.annotation is not inspect.Parameter.empty, f"{name} has no type"
        if name not in ("address", "dataset"):
            assert p.kind is inspect.Parameter.KEYWORD_ONLY, name
    # The signature shows the defaults the request gets (None: the proto's zero value, or 1 world).
    defaults = cogfeed.Loader(ADDRESS, "demo").request()
    for f in FIELDS:
        default = params[f.name].default
        if default is not None and f.enum_type is None:
            assert getattr(defaults, f.name) == default, f.name
    assert defaults.sampler == pb.SAMPLER_RANDOM and params["sampler"].default == "random"


def test_unknown_keyword_or_sampler_raises_naming_it():
    with pytest.raises(TypeError, match="'smapler'"):
        cogfeed.Loader(ADDRESS, "demo", smapler="grid")
    for error in (ValueError, cogfeed.InvalidRequest):
        with pytest.raises(error, match="'tiled'.*aligned, random, grid"):
            cogfeed.Loader(ADDRESS, "demo", sampler="tiled")
    with pytest.raises(cogfeed.InvalidRequest, match="no server address"):
        cogfeed.Loader(" , ", "demo")


@requires_torch
def test_stream_dataset_refuses_an_unknown_keyword_when_built():
    from cogfeed.torch import StreamDataset

    with pytest.raises(TypeError, match="'smapler'"):
        StreamDataset(ADDRESS, "demo", smapler="grid")
    with pytest.raises(TypeError, match="rank comes from"):
        StreamDataset(ADDRESS, "demo", rank=1)
    StreamDataset(ADDRESS, "demo", sampler="grid", token="t", cursor=4)


def test_data_wait_goes_with_every_stream_open_as_a_delta():
    loader = cogfeed.Loader(ADDRESS, "demo")
    header = cogfeed._client.DATA_WAIT_HEADER
    assert header == "cogfeed-data-wait-seconds"
    assert loader.stream_metadata() == [(header, "0.000")]  # the first stream too
    loader.data_wait_seconds += 1.25
    assert loader.stream_metadata() == [(header, "1.250")]
    assert loader.stream_metadata() == [(header, "0.000")]
    sent = 0.0
    for _ in range(10):  # rounding does not drift: the deltas add up to the total
        loader.data_wait_seconds += 0.0004
        sent += float(loader.stream_metadata()[0][1])
    assert round(sent, 3) == 0.004
    assert loader.data_wait_seconds == pytest.approx(1.254)


class FakeStreams:
    """Stands in for Client.stream_raw: records each open's metadata, sends `batches`."""

    def __init__(self, batches):
        self.batches, self.opens = batches, []

    def __call__(self, request, metadata=()):
        self.opens.append((request, dict(metadata)))
        return iter(self.batches)


def short_batches(dtype="uint16"):
    """Two batches of a batch_size 3 stream: 2 samples and 1 skipped, then all 3 skipped;
    images of 16-bit `dtype` (as the daemon names it: "uint16", "bfloat16")."""
    _, first = skipping_batch(2, 1)
    _, empty = skipping_batch(0, 3)
    first.index, first.cursor, empty.index, empty.cursor = 0, 3, 1, 6
    first.image.dtype = empty.image.dtype = dtype
    return [first.SerializeToString(), empty.SerializeToString()]


def test_loader_sends_data_wait_first_and_yields_short_batches(monkeypatch):
    streams = FakeStreams(short_batches())
    monkeypatch.setattr(cogfeed.Client, "stream_raw", streams)
    loader = cogfeed.Loader(ADDRESS, "demo", batch_size=3, on_corrupt="skip")
    batches = [b for b in loader]  # (list() would ask len() of the server)
    assert [b.image.shape[0] for b in batches] == [2, 0]
    assert batches[1].image.shape == (0, 2, 3, 4) and batches[1].windows.shape == (0, 7)
    assert [len(b.skipped) for b in batches] == [1, 3]
    assert batches[0].skipped[0] == cogfeed.SkippedSample(30, (2, 0, 5, 4, 3, 0, 1), "missing")
    assert loader.state_dict() == {"epoch": 0, "cursor": 6, "dataset_version": ""}
    ((request, metadata),) = streams.opens
    assert request.on_corrupt == "skip"
    assert set(metadata) == {"cogfeed-data-wait-seconds"}
    waited = loader.data_wait_seconds
    for _ in loader:  # a replay opens a stream that reports the first pass's wait
        pass
    assert streams.opens[1][1]["cogfeed-data-wait-seconds"] == f"{round(waited, 3):.3f}"


class Counted(EpochCursor):
    def _count(self, cursor):
        return 100 - cursor

    def run(self, cursors):
        self._begin()
        for c in cursors:
            self.cursor = c
        self._end()


def test_epoch_cursor_state():
    s = Counted(epoch=2, cursor=10)
    assert (s.state_dict(), len(s)) == ({"epoch": 2, "cursor": 10, "dataset_version": ""}, 90)
    s.run([20, 30])
    assert s.state_dict() == {"epoch": 2, "cursor": 30, "dataset_version": ""} and len(s) == 90
    assert s._begin() == 10  # a finished pass replays from where it started
    s.load_state_dict({"epoch": 3, "cursor": 40})  # a state saved before versions were kept
    assert (s.state_dict(), len(s), s._begin()) == ({"epoch": 3, "cursor": 40, "dataset_version": ""}, 60, 40)
    s.set_epoch(4)
    assert (s.state_dict(), len(s)) == ({"epoch": 4, "cursor": 0, "dataset_version": ""}, 100)


def test_loader_and_stream_dataset_share_the_state_class():
    assert issubclass(cogfeed.Loader, EpochCursor)
    classes = [cogfeed.Loader]
    try:
        from cogfeed.torch import StreamDataset
        classes.append(StreamDataset)
    except ImportError:
        pass
    for cls in classes:
        assert issubclass(cls, EpochCursor)
        for name in ("state_dict", "load_state_dict", "set_epoch", "__len__", "_begin", "_end"):
            assert getattr(cls, name) is getattr(EpochCursor, name), f"{cls.__name__}.{name} is its own"
    loader = cogfeed.Loader(ADDRESS, "demo", epoch=2, cursor=8)
    assert loader.state_dict() == {"epoch": 2, "cursor": 8, "dataset_version": ""}
    loader.set_epoch(3)
    assert loader.request().epoch == 3 and loader.request().cursor == 0


@requires_torch
def test_stream_dataset_short_and_empty_batches(monkeypatch):
    import torch

    from cogfeed.torch import KEYS, StreamDataset

    for dtype, wire, torch_dtype in [("native", "uint16", torch.uint16), ("bfloat16", "bfloat16", torch.bfloat16)]:
        monkeypatch.setattr(cogfeed.Client, "stream_raw", FakeStreams(short_batches(wire)))
        ds = StreamDataset(ADDRESS, "demo", batch_size=3, on_corrupt="skip", dtype=dtype)
        first, empty = [b for b in ds]
        assert tuple(first["image"].shape) == (2, 2, 3, 4) and first["image"].dtype == torch_dtype
        assert tuple(empty["image"].shape) == (0, 2, 3, 4) and empty["image"].dtype == torch_dtype
        assert tuple(empty["label"].shape) == (0, 3, 4) and tuple(empty["windows"].shape) == (0, 7)
        assert [s.sample for s in empty["skipped"]] == [30, 31, 32]
        # A scene dataset: every fixed key, the named things' dicts empty.
        assert tuple(first) == KEYS
        assert first["layers"] == first["time_masks"] == first["targets"] == {} and first["meta"] == []
        assert ds.state_dict() == {"epoch": 0, "cursor": 6, "dataset_version": ""}


def test_the_dataset_version_travels_with_the_cursor(monkeypatch):
    # Batches name the version they were drawn from; the state keeps it and a resume sends it.
    batches = short_batches()
    versioned = []
    for raw in batches:
        b = pb.Batch.FromString(raw)
        b.dataset_version = "v-one"
        versioned.append(b.SerializeToString())
    streams = FakeStreams(versioned)
    monkeypatch.setattr(cogfeed.Client, "stream_raw", streams)
    loader = cogfeed.Loader(ADDRESS, "demo", batch_size=3, on_corrupt="skip")
    assert [b.dataset_version for b in loader] == ["v-one", "v-one"]
    state = loader.state_dict()
    assert state == {"epoch": 0, "cursor": 6, "dataset_version": "v-one"}
    resumed = cogfeed.Loader(ADDRESS, "demo", batch_size=3)
    resumed.load_state_dict(state)
    assert resumed.request().dataset_version == "v-one" and resumed.request().cursor == 6
    assert cogfeed.Loader(ADDRESS, "demo", cursor=6, dataset_version="v-one").request().dataset_version == "v-one"
