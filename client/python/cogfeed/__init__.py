"""cogfeed: training batches cut from Cloud-Optimized GeoTIFFs, streamed from a cogfeed
daemon over gRPC into numpy (and PyTorch with `cogfeed.torch`)."""

from ._client import CHANNEL_OPTIONS, Batch, Client, Loader, replicas
from ._errors import CogfeedError
from ._tensor import to_numpy
from ._wire import WINDOW_COLUMNS, SampleMeta, SkippedSample

__all__ = ["Batch", "CHANNEL_OPTIONS", "Client", "CogfeedError", "Loader", "SampleMeta", "SkippedSample",
           "WINDOW_COLUMNS", "replicas", "to_numpy"]
__version__ = "0.1.0"
