"""cogfeed: training batches cut from Cloud-Optimized GeoTIFFs, streamed from a cogfeed
daemon over gRPC into numpy (and PyTorch with `cogfeed.torch`); `Stitcher` writes predictions
over a grid stream back to georeferenced COGs."""

from ._client import CHANNEL_OPTIONS, Batch, Client, Loader, replicas
from ._errors import CogfeedError
from ._tensor import to_numpy
from ._wire import WINDOW_COLUMNS, SampleMeta, SkippedSample
from .preview import preview
from .stitch import Stitcher

__all__ = ["Batch", "CHANNEL_OPTIONS", "Client", "CogfeedError", "Loader", "SampleMeta", "SkippedSample",
           "Stitcher", "WINDOW_COLUMNS", "preview", "replicas", "to_numpy"]
__version__ = "0.1.0"
