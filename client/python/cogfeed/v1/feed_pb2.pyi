from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Sampler(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SAMPLER_UNSPECIFIED: _ClassVar[Sampler]
    SAMPLER_ALIGNED: _ClassVar[Sampler]
    SAMPLER_RANDOM: _ClassVar[Sampler]
    SAMPLER_GRID: _ClassVar[Sampler]
    SAMPLER_POINTS: _ClassVar[Sampler]
    SAMPLER_BALANCED: _ClassVar[Sampler]
SAMPLER_UNSPECIFIED: Sampler
SAMPLER_ALIGNED: Sampler
SAMPLER_RANDOM: Sampler
SAMPLER_GRID: Sampler
SAMPLER_POINTS: Sampler
SAMPLER_BALANCED: Sampler

class Tensor(_message.Message):
    __slots__ = ("dtype", "shape", "data")
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    dtype: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    data: bytes
    def __init__(self, dtype: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., data: _Optional[bytes] = ...) -> None: ...

class ListDatasetsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListDatasetsResponse(_message.Message):
    __slots__ = ("datasets",)
    DATASETS_FIELD_NUMBER: _ClassVar[int]
    datasets: _containers.RepeatedCompositeFieldContainer[DatasetSummary]
    def __init__(self, datasets: _Optional[_Iterable[_Union[DatasetSummary, _Mapping]]] = ...) -> None: ...

class DatasetSummary(_message.Message):
    __slots__ = ("name", "scenes", "labels", "version")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SCENES_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    name: str
    scenes: int
    labels: bool
    version: str
    def __init__(self, name: _Optional[str] = ..., scenes: _Optional[int] = ..., labels: _Optional[bool] = ..., version: _Optional[str] = ...) -> None: ...

class DescribeDatasetRequest(_message.Message):
    __slots__ = ("dataset",)
    DATASET_FIELD_NUMBER: _ClassVar[int]
    dataset: str
    def __init__(self, dataset: _Optional[str] = ...) -> None: ...

class Level(_message.Message):
    __slots__ = ("width", "height", "block_width", "block_height")
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    BLOCK_WIDTH_FIELD_NUMBER: _ClassVar[int]
    BLOCK_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    width: int
    height: int
    block_width: int
    block_height: int
    def __init__(self, width: _Optional[int] = ..., height: _Optional[int] = ..., block_width: _Optional[int] = ..., block_height: _Optional[int] = ...) -> None: ...

class SceneInfo(_message.Message):
    __slots__ = ("index", "name", "levels", "has_label", "geotransform", "crs", "datetime", "start_datetime", "end_datetime")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    LEVELS_FIELD_NUMBER: _ClassVar[int]
    HAS_LABEL_FIELD_NUMBER: _ClassVar[int]
    GEOTRANSFORM_FIELD_NUMBER: _ClassVar[int]
    CRS_FIELD_NUMBER: _ClassVar[int]
    DATETIME_FIELD_NUMBER: _ClassVar[int]
    START_DATETIME_FIELD_NUMBER: _ClassVar[int]
    END_DATETIME_FIELD_NUMBER: _ClassVar[int]
    index: int
    name: str
    levels: _containers.RepeatedCompositeFieldContainer[Level]
    has_label: bool
    geotransform: _containers.RepeatedScalarFieldContainer[float]
    crs: str
    datetime: str
    start_datetime: str
    end_datetime: str
    def __init__(self, index: _Optional[int] = ..., name: _Optional[str] = ..., levels: _Optional[_Iterable[_Union[Level, _Mapping]]] = ..., has_label: _Optional[bool] = ..., geotransform: _Optional[_Iterable[float]] = ..., crs: _Optional[str] = ..., datetime: _Optional[str] = ..., start_datetime: _Optional[str] = ..., end_datetime: _Optional[str] = ...) -> None: ...

class DatasetInfo(_message.Message):
    __slots__ = ("name", "version", "bands", "dtype", "labels", "label_dtype", "fill", "mean", "std", "scenes", "layers", "crs", "balance", "balance_layer")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    BANDS_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    LABEL_DTYPE_FIELD_NUMBER: _ClassVar[int]
    FILL_FIELD_NUMBER: _ClassVar[int]
    MEAN_FIELD_NUMBER: _ClassVar[int]
    STD_FIELD_NUMBER: _ClassVar[int]
    SCENES_FIELD_NUMBER: _ClassVar[int]
    LAYERS_FIELD_NUMBER: _ClassVar[int]
    CRS_FIELD_NUMBER: _ClassVar[int]
    BALANCE_FIELD_NUMBER: _ClassVar[int]
    BALANCE_LAYER_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    bands: _containers.RepeatedScalarFieldContainer[int]
    dtype: str
    labels: bool
    label_dtype: str
    fill: float
    mean: _containers.RepeatedScalarFieldContainer[float]
    std: _containers.RepeatedScalarFieldContainer[float]
    scenes: _containers.RepeatedCompositeFieldContainer[SceneInfo]
    layers: _containers.RepeatedCompositeFieldContainer[LayerInfo]
    crs: str
    balance: _containers.RepeatedCompositeFieldContainer[ClassShare]
    balance_layer: str
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ..., bands: _Optional[_Iterable[int]] = ..., dtype: _Optional[str] = ..., labels: _Optional[bool] = ..., label_dtype: _Optional[str] = ..., fill: _Optional[float] = ..., mean: _Optional[_Iterable[float]] = ..., std: _Optional[_Iterable[float]] = ..., scenes: _Optional[_Iterable[_Union[SceneInfo, _Mapping]]] = ..., layers: _Optional[_Iterable[_Union[LayerInfo, _Mapping]]] = ..., crs: _Optional[str] = ..., balance: _Optional[_Iterable[_Union[ClassShare, _Mapping]]] = ..., balance_layer: _Optional[str] = ...) -> None: ...

class ClassShare(_message.Message):
    __slots__ = ("class_value", "natural", "target", "expected")
    CLASS_VALUE_FIELD_NUMBER: _ClassVar[int]
    NATURAL_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_FIELD_NUMBER: _ClassVar[int]
    class_value: int
    natural: float
    target: float
    expected: float
    def __init__(self, class_value: _Optional[int] = ..., natural: _Optional[float] = ..., target: _Optional[float] = ..., expected: _Optional[float] = ...) -> None: ...

class LayerInfo(_message.Message):
    __slots__ = ("name", "assets", "resolution", "resampling", "dtype", "bands", "nodata")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ASSETS_FIELD_NUMBER: _ClassVar[int]
    RESOLUTION_FIELD_NUMBER: _ClassVar[int]
    RESAMPLING_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    BANDS_FIELD_NUMBER: _ClassVar[int]
    NODATA_FIELD_NUMBER: _ClassVar[int]
    name: str
    assets: _containers.RepeatedScalarFieldContainer[str]
    resolution: float
    resampling: str
    dtype: str
    bands: int
    nodata: float
    def __init__(self, name: _Optional[str] = ..., assets: _Optional[_Iterable[str]] = ..., resolution: _Optional[float] = ..., resampling: _Optional[str] = ..., dtype: _Optional[str] = ..., bands: _Optional[int] = ..., nodata: _Optional[float] = ...) -> None: ...

class StreamBatchesRequest(_message.Message):
    __slots__ = ("dataset", "job", "sampler", "patch_size", "stride", "level", "batch_size", "seed", "epoch", "rank", "world_size", "cursor", "max_batches", "bands", "labels", "dtype", "normalize", "augment", "samples_per_epoch", "prefetch", "on_corrupt", "layers", "split", "mixture", "dataset_version", "order", "open_blocks", "visits")
    DATASET_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    SAMPLER_FIELD_NUMBER: _ClassVar[int]
    PATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    STRIDE_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCHES_FIELD_NUMBER: _ClassVar[int]
    BANDS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    NORMALIZE_FIELD_NUMBER: _ClassVar[int]
    AUGMENT_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_PER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    PREFETCH_FIELD_NUMBER: _ClassVar[int]
    ON_CORRUPT_FIELD_NUMBER: _ClassVar[int]
    LAYERS_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    MIXTURE_FIELD_NUMBER: _ClassVar[int]
    DATASET_VERSION_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    OPEN_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    VISITS_FIELD_NUMBER: _ClassVar[int]
    dataset: str
    job: str
    sampler: Sampler
    patch_size: int
    stride: int
    level: int
    batch_size: int
    seed: int
    epoch: int
    rank: int
    world_size: int
    cursor: int
    max_batches: int
    bands: _containers.RepeatedScalarFieldContainer[int]
    labels: bool
    dtype: str
    normalize: bool
    augment: bool
    samples_per_epoch: int
    prefetch: int
    on_corrupt: str
    layers: _containers.RepeatedScalarFieldContainer[str]
    split: str
    mixture: _containers.RepeatedCompositeFieldContainer[MixturePart]
    dataset_version: str
    order: str
    open_blocks: int
    visits: int
    def __init__(self, dataset: _Optional[str] = ..., job: _Optional[str] = ..., sampler: _Optional[_Union[Sampler, str]] = ..., patch_size: _Optional[int] = ..., stride: _Optional[int] = ..., level: _Optional[int] = ..., batch_size: _Optional[int] = ..., seed: _Optional[int] = ..., epoch: _Optional[int] = ..., rank: _Optional[int] = ..., world_size: _Optional[int] = ..., cursor: _Optional[int] = ..., max_batches: _Optional[int] = ..., bands: _Optional[_Iterable[int]] = ..., labels: _Optional[bool] = ..., dtype: _Optional[str] = ..., normalize: _Optional[bool] = ..., augment: _Optional[bool] = ..., samples_per_epoch: _Optional[int] = ..., prefetch: _Optional[int] = ..., on_corrupt: _Optional[str] = ..., layers: _Optional[_Iterable[str]] = ..., split: _Optional[str] = ..., mixture: _Optional[_Iterable[_Union[MixturePart, _Mapping]]] = ..., dataset_version: _Optional[str] = ..., order: _Optional[str] = ..., open_blocks: _Optional[int] = ..., visits: _Optional[int] = ...) -> None: ...

class MixturePart(_message.Message):
    __slots__ = ("dataset", "weight")
    DATASET_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    dataset: str
    weight: float
    def __init__(self, dataset: _Optional[str] = ..., weight: _Optional[float] = ...) -> None: ...

class Window(_message.Message):
    __slots__ = ("scene", "col", "row", "width", "height", "level", "padded")
    SCENE_FIELD_NUMBER: _ClassVar[int]
    COL_FIELD_NUMBER: _ClassVar[int]
    ROW_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    PADDED_FIELD_NUMBER: _ClassVar[int]
    scene: int
    col: int
    row: int
    width: int
    height: int
    level: int
    padded: bool
    def __init__(self, scene: _Optional[int] = ..., col: _Optional[int] = ..., row: _Optional[int] = ..., width: _Optional[int] = ..., height: _Optional[int] = ..., level: _Optional[int] = ..., padded: _Optional[bool] = ...) -> None: ...

class Batch(_message.Message):
    __slots__ = ("epoch", "index", "cursor", "image", "label", "windows", "batches_in_epoch", "skipped", "layers", "samples", "image_layer", "time_masks", "targets", "dataset_version")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    WINDOWS_FIELD_NUMBER: _ClassVar[int]
    BATCHES_IN_EPOCH_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    LAYERS_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    IMAGE_LAYER_FIELD_NUMBER: _ClassVar[int]
    TIME_MASKS_FIELD_NUMBER: _ClassVar[int]
    TARGETS_FIELD_NUMBER: _ClassVar[int]
    DATASET_VERSION_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    index: int
    cursor: int
    image: Tensor
    label: Tensor
    windows: _containers.RepeatedCompositeFieldContainer[Window]
    batches_in_epoch: int
    skipped: _containers.RepeatedCompositeFieldContainer[SkippedSample]
    layers: _containers.RepeatedCompositeFieldContainer[NamedTensor]
    samples: _containers.RepeatedCompositeFieldContainer[SampleInfo]
    image_layer: str
    time_masks: _containers.RepeatedCompositeFieldContainer[NamedTensor]
    targets: _containers.RepeatedCompositeFieldContainer[NamedTensor]
    dataset_version: str
    def __init__(self, epoch: _Optional[int] = ..., index: _Optional[int] = ..., cursor: _Optional[int] = ..., image: _Optional[_Union[Tensor, _Mapping]] = ..., label: _Optional[_Union[Tensor, _Mapping]] = ..., windows: _Optional[_Iterable[_Union[Window, _Mapping]]] = ..., batches_in_epoch: _Optional[int] = ..., skipped: _Optional[_Iterable[_Union[SkippedSample, _Mapping]]] = ..., layers: _Optional[_Iterable[_Union[NamedTensor, _Mapping]]] = ..., samples: _Optional[_Iterable[_Union[SampleInfo, _Mapping]]] = ..., image_layer: _Optional[str] = ..., time_masks: _Optional[_Iterable[_Union[NamedTensor, _Mapping]]] = ..., targets: _Optional[_Iterable[_Union[NamedTensor, _Mapping]]] = ..., dataset_version: _Optional[str] = ...) -> None: ...

class NamedTensor(_message.Message):
    __slots__ = ("name", "tensor")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TENSOR_FIELD_NUMBER: _ClassVar[int]
    name: str
    tensor: Tensor
    def __init__(self, name: _Optional[str] = ..., tensor: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...

class SampleInfo(_message.Message):
    __slots__ = ("items", "datetime", "crs", "bounds", "resolution", "padded", "drawn", "valid_fraction", "split", "datetimes", "point_id", "targets", "dataset", "harmonized_offset")
    class TargetsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    DATETIME_FIELD_NUMBER: _ClassVar[int]
    CRS_FIELD_NUMBER: _ClassVar[int]
    BOUNDS_FIELD_NUMBER: _ClassVar[int]
    RESOLUTION_FIELD_NUMBER: _ClassVar[int]
    PADDED_FIELD_NUMBER: _ClassVar[int]
    DRAWN_FIELD_NUMBER: _ClassVar[int]
    VALID_FRACTION_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    DATETIMES_FIELD_NUMBER: _ClassVar[int]
    POINT_ID_FIELD_NUMBER: _ClassVar[int]
    TARGETS_FIELD_NUMBER: _ClassVar[int]
    DATASET_FIELD_NUMBER: _ClassVar[int]
    HARMONIZED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedScalarFieldContainer[str]
    datetime: str
    crs: str
    bounds: _containers.RepeatedScalarFieldContainer[float]
    resolution: float
    padded: bool
    drawn: str
    valid_fraction: float
    split: str
    datetimes: _containers.RepeatedCompositeFieldContainer[LayerDates]
    point_id: str
    targets: _containers.ScalarMap[str, float]
    dataset: str
    harmonized_offset: _containers.RepeatedCompositeFieldContainer[LayerOffsets]
    def __init__(self, items: _Optional[_Iterable[str]] = ..., datetime: _Optional[str] = ..., crs: _Optional[str] = ..., bounds: _Optional[_Iterable[float]] = ..., resolution: _Optional[float] = ..., padded: _Optional[bool] = ..., drawn: _Optional[str] = ..., valid_fraction: _Optional[float] = ..., split: _Optional[str] = ..., datetimes: _Optional[_Iterable[_Union[LayerDates, _Mapping]]] = ..., point_id: _Optional[str] = ..., targets: _Optional[_Mapping[str, float]] = ..., dataset: _Optional[str] = ..., harmonized_offset: _Optional[_Iterable[_Union[LayerOffsets, _Mapping]]] = ...) -> None: ...

class LayerDates(_message.Message):
    __slots__ = ("layer", "dates")
    LAYER_FIELD_NUMBER: _ClassVar[int]
    DATES_FIELD_NUMBER: _ClassVar[int]
    layer: str
    dates: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, layer: _Optional[str] = ..., dates: _Optional[_Iterable[str]] = ...) -> None: ...

class LayerOffsets(_message.Message):
    __slots__ = ("layer", "offsets")
    LAYER_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    layer: str
    offsets: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, layer: _Optional[str] = ..., offsets: _Optional[_Iterable[int]] = ...) -> None: ...

class SkippedSample(_message.Message):
    __slots__ = ("sample", "window", "reason")
    SAMPLE_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    sample: int
    window: Window
    reason: str
    def __init__(self, sample: _Optional[int] = ..., window: _Optional[_Union[Window, _Mapping]] = ..., reason: _Optional[str] = ...) -> None: ...

class CountBatchesResponse(_message.Message):
    __slots__ = ("batches", "samples_in_epoch", "batches_in_epoch")
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_IN_EPOCH_FIELD_NUMBER: _ClassVar[int]
    BATCHES_IN_EPOCH_FIELD_NUMBER: _ClassVar[int]
    batches: int
    samples_in_epoch: int
    batches_in_epoch: int
    def __init__(self, batches: _Optional[int] = ..., samples_in_epoch: _Optional[int] = ..., batches_in_epoch: _Optional[int] = ...) -> None: ...

class ReadWindowRequest(_message.Message):
    __slots__ = ("dataset", "scene", "level", "col", "row", "width", "height", "bands", "labels")
    DATASET_FIELD_NUMBER: _ClassVar[int]
    SCENE_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    COL_FIELD_NUMBER: _ClassVar[int]
    ROW_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    BANDS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    dataset: str
    scene: int
    level: int
    col: int
    row: int
    width: int
    height: int
    bands: _containers.RepeatedScalarFieldContainer[int]
    labels: bool
    def __init__(self, dataset: _Optional[str] = ..., scene: _Optional[int] = ..., level: _Optional[int] = ..., col: _Optional[int] = ..., row: _Optional[int] = ..., width: _Optional[int] = ..., height: _Optional[int] = ..., bands: _Optional[_Iterable[int]] = ..., labels: _Optional[bool] = ...) -> None: ...

class ReadWindowResponse(_message.Message):
    __slots__ = ("image", "label")
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    image: Tensor
    label: Tensor
    def __init__(self, image: _Optional[_Union[Tensor, _Mapping]] = ..., label: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...

class Footprint(_message.Message):
    __slots__ = ("crs", "bounds", "resolution", "datetime", "item")
    CRS_FIELD_NUMBER: _ClassVar[int]
    BOUNDS_FIELD_NUMBER: _ClassVar[int]
    RESOLUTION_FIELD_NUMBER: _ClassVar[int]
    DATETIME_FIELD_NUMBER: _ClassVar[int]
    ITEM_FIELD_NUMBER: _ClassVar[int]
    crs: str
    bounds: _containers.RepeatedScalarFieldContainer[float]
    resolution: float
    datetime: str
    item: str
    def __init__(self, crs: _Optional[str] = ..., bounds: _Optional[_Iterable[float]] = ..., resolution: _Optional[float] = ..., datetime: _Optional[str] = ..., item: _Optional[str] = ...) -> None: ...

class ReadFootprintRequest(_message.Message):
    __slots__ = ("dataset", "layers", "footprints")
    DATASET_FIELD_NUMBER: _ClassVar[int]
    LAYERS_FIELD_NUMBER: _ClassVar[int]
    FOOTPRINTS_FIELD_NUMBER: _ClassVar[int]
    dataset: str
    layers: _containers.RepeatedScalarFieldContainer[str]
    footprints: _containers.RepeatedCompositeFieldContainer[Footprint]
    def __init__(self, dataset: _Optional[str] = ..., layers: _Optional[_Iterable[str]] = ..., footprints: _Optional[_Iterable[_Union[Footprint, _Mapping]]] = ...) -> None: ...
