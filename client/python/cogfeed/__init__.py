"""cogfeed: training batches cut from Cloud-Optimized GeoTIFFs, streamed from a cogfeed
daemon over gRPC into numpy (and PyTorch with `cogfeed.torch`); `Stitcher` writes predictions
over a grid stream back to georeferenced COGs.

Failures raise `CogfeedError` subclasses by kind (`NotFound` is also a `LookupError`,
`InvalidRequest` a `ValueError`, `PermissionDenied` a `PermissionError`, `Unavailable` a
`ConnectionError`, ...), never a raw `grpc.RpcError`."""

from ._client import CHANNEL_OPTIONS, Batch, Client, Loader, replicas
from ._errors import (Cancelled, CogfeedError, DataLoss, DeadlineExceeded, FailedPrecondition, InternalError,
                      InvalidRequest, NotFound, OutOfRange, PermissionDenied, ResourceExhausted, Unauthenticated,
                      Unavailable)
from ._tensor import to_numpy
from ._wire import WINDOW_COLUMNS, SampleMeta, SkippedSample
from .preview import preview
from .stitch import Stitcher

__all__ = ["Batch", "CHANNEL_OPTIONS", "Cancelled", "Client", "CogfeedError", "DataLoss", "DeadlineExceeded",
           "FailedPrecondition", "InternalError", "InvalidRequest", "Loader", "NotFound", "OutOfRange",
           "PermissionDenied", "ResourceExhausted", "SampleMeta", "SkippedSample", "Stitcher", "Unauthenticated",
           "Unavailable", "WINDOW_COLUMNS", "preview", "replicas", "to_numpy"]
#: The package's version: the one place it is written (pyproject.toml reads it from here).
__version__ = "0.1.0"
