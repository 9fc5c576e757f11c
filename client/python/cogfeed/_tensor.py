"""Protocol tensors as numpy arrays without copying the payload."""

from typing import Any

import numpy as np

_DTYPES = {
    "uint8": np.uint8,
    "int8": np.int8,
    "uint16": np.uint16,
    "int16": np.int16,
    "uint32": np.uint32,
    "int32": np.int32,
    "uint64": np.uint64,
    "int64": np.int64,
    "float16": np.float16,
    "float32": np.float32,
    "float64": np.float64,
    "complex64": np.complex64,
    "complex128": np.complex128,
}


def numpy_dtype(name: str) -> np.dtype:
    """The little-endian numpy dtype of a tensor dtype name (bfloat16 as uint16 bits, marked
    `dtype.metadata == {"cogfeed": "bfloat16"}` so they are not taken for integers)."""
    if name == "bfloat16":
        return np.dtype("<u2", metadata={"cogfeed": "bfloat16"})
    try:
        return np.dtype(_DTYPES[name]).newbyteorder("<")
    except KeyError:
        raise ValueError(f"unknown tensor dtype {name!r}") from None


def to_numpy(tensor: Any) -> np.ndarray:
    """A read-only numpy view of a `cogfeed.v1.Tensor` (little-endian, C order).

    `np.frombuffer` wraps the message's bytes object: the only copy is the one protobuf makes
    when it parses the message. bfloat16 has no numpy type: it comes back as uint16 bits
    (`torch.frombuffer(..., dtype=torch.bfloat16)` reads them).
    """
    dtype = numpy_dtype(tensor.dtype)
    shape = tuple(int(d) for d in tensor.shape)
    return np.frombuffer(tensor.data, dtype=dtype).reshape(shape)
