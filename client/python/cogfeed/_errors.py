"""Exceptions raised by the cogfeed client, one class per kind of failure.

Every failure of a request is a `CogfeedError`; its subclass says what kind, and the ones a
caller would catch with a builtin also derive from it (a `NotFound` is a `LookupError`, an
`InvalidRequest` a `ValueError`, a `PermissionDenied` a `PermissionError`, an `Unavailable` a
`ConnectionError`, a `DeadlineExceeded` a `TimeoutError`). Each keeps the gRPC status `code`
(a `grpc.StatusCode`) and the server's message `details`.

This module is the one place where a `grpc.RpcError` becomes a `CogfeedError`
(`from_rpc_error`, `rpc_errors`, `Stream`): no raw gRPC error leaves the public API.
"""

import contextlib
from typing import Any, Callable, ClassVar, Dict, Generic, Iterator, Optional, Tuple, Type, TypeVar, Union

import grpc

T = TypeVar("T")


class CogfeedError(Exception):
    """A request failed: `code` is the gRPC status code, `details` the server's message.

    Raised as one of its subclasses (below); a bare `CogfeedError` is a status with no
    class of its own. `CogfeedError(code, details)`, or `Kind(details)` with the class's own
    code (`InvalidRequest("batch_size must be positive")`).
    """

    #: The status code of this class (UNKNOWN for the base and for codes without a class).
    grpc_code: ClassVar[grpc.StatusCode] = grpc.StatusCode.UNKNOWN

    code: grpc.StatusCode
    details: str

    def __init__(self, code: Union[grpc.StatusCode, str], details: Optional[str] = None) -> None:
        if not isinstance(code, grpc.StatusCode):
            # `Kind(details)`: also how torch's DataLoader re-raises a worker's exception.
            code, details = type(self).grpc_code, (str(code) if details is None else details)
        details = details or ""
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details

    def __reduce__(self) -> Tuple[Any, ...]:
        # Pickled with code and details (multiprocessing, DataLoader workers).
        return type(self), (self.code, self.details)


class InvalidRequest(CogfeedError, ValueError):
    """INVALID_ARGUMENT: the request (or an argument, checked before anything is sent) is
    wrong: a bad batch size, an unknown sampler, a layer the dataset does not have."""

    grpc_code = grpc.StatusCode.INVALID_ARGUMENT


class OutOfRange(InvalidRequest):
    """OUT_OF_RANGE: an argument past the end of what exists (an `InvalidRequest`)."""

    grpc_code = grpc.StatusCode.OUT_OF_RANGE


class NotFound(CogfeedError, LookupError):
    """NOT_FOUND: no such dataset, scene or object."""

    grpc_code = grpc.StatusCode.NOT_FOUND


class PermissionDenied(CogfeedError, PermissionError):
    """PERMISSION_DENIED: the token may not read this dataset (and the parent of
    `Unauthenticated`: catch this one for both)."""

    grpc_code = grpc.StatusCode.PERMISSION_DENIED


class Unauthenticated(PermissionDenied):
    """UNAUTHENTICATED: no token, or not a valid one, where the daemon requires one."""

    grpc_code = grpc.StatusCode.UNAUTHENTICATED


class Unavailable(CogfeedError, ConnectionError):
    """UNAVAILABLE: the daemon cannot be reached (or TLS failed), is shutting down, or its
    store is down after retries. `Loader` reconnects on it until `reconnect_timeout`."""

    grpc_code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceeded(CogfeedError, TimeoutError):
    """DEADLINE_EXCEEDED: the call ran past its deadline."""

    grpc_code = grpc.StatusCode.DEADLINE_EXCEEDED


class ResourceExhausted(CogfeedError):
    """RESOURCE_EXHAUSTED: a limit of the daemon (memory, streams or requests per token,
    a tile too large)."""

    grpc_code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPrecondition(CogfeedError):
    """FAILED_PRECONDITION: the data cannot serve this request (an unsupported TIFF
    feature, an object changed under the daemon, a STAC catalog it cannot use)."""

    grpc_code = grpc.StatusCode.FAILED_PRECONDITION


class DataLoss(CogfeedError):
    """DATA_LOSS: a corrupt tile or file (`on_corrupt="skip"` leaves such samples out)."""

    grpc_code = grpc.StatusCode.DATA_LOSS


class Cancelled(CogfeedError):
    """CANCELLED: the call was cancelled (`Client.stream(...).cancel()`)."""

    grpc_code = grpc.StatusCode.CANCELLED


class InternalError(CogfeedError):
    """INTERNAL, UNKNOWN, UNIMPLEMENTED: a fault in the daemon (its log has the detail) or
    a daemon that does not serve this call."""

    grpc_code = grpc.StatusCode.INTERNAL


#: The class of each status code (codes not listed become a bare `CogfeedError`).
_BY_CODE: Dict[grpc.StatusCode, Type[CogfeedError]] = {
    cls.grpc_code: cls
    for cls in (InvalidRequest, OutOfRange, NotFound, PermissionDenied, Unauthenticated, Unavailable,
                DeadlineExceeded, ResourceExhausted, FailedPrecondition, DataLoss, Cancelled, InternalError)
}
_BY_CODE[grpc.StatusCode.UNKNOWN] = InternalError
_BY_CODE[grpc.StatusCode.UNIMPLEMENTED] = InternalError


def error_class(code: grpc.StatusCode) -> Type[CogfeedError]:
    """The `CogfeedError` subclass raised for a status code."""
    return _BY_CODE.get(code, CogfeedError)


def from_rpc_error(err: grpc.RpcError) -> CogfeedError:
    """The `CogfeedError` of a grpc error (which is also a Call), of its code's class."""
    code = err.code() if callable(getattr(err, "code", None)) else grpc.StatusCode.UNKNOWN
    details = err.details() if callable(getattr(err, "details", None)) else str(err)
    if not isinstance(code, grpc.StatusCode):
        code = grpc.StatusCode.UNKNOWN
    return error_class(code)(code, details or "")


@contextlib.contextmanager
def rpc_errors() -> Iterator[None]:
    """Re-raises a `grpc.RpcError` raised inside as its `CogfeedError` (the gRPC error is
    left out of the traceback: it says nothing more)."""
    try:
        yield
    except grpc.RpcError as e:
        raise from_rpc_error(e) from None


def call(method: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`method(*args, **kwargs)` with grpc errors raised as `CogfeedError`s."""
    with rpc_errors():
        return method(*args, **kwargs)


class Stream(Generic[T]):
    """The responses of a streaming call; a failure, also one in the middle of the stream,
    raises its `CogfeedError`. `cancel()` ends the call (the next read raises `Cancelled`);
    `code()`, `details()`, `initial_metadata()` and the rest of the gRPC call are there too."""

    def __init__(self, call: Any) -> None:
        self._call = call

    def __iter__(self) -> "Stream[T]":
        return self

    def __next__(self) -> T:
        with rpc_errors():
            return next(self._call)

    def cancel(self) -> bool:
        """Cancels the call; True if it was still running."""
        return bool(self._call.cancel())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._call, name)
