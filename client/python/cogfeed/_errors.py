"""Exceptions raised by the cogfeed client."""

import grpc


class CogfeedError(Exception):
    """A request failed; `code` is the gRPC status code, `details` the server's message."""

    def __init__(self, code: grpc.StatusCode, details: str):
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details


def from_rpc_error(err: grpc.RpcError) -> CogfeedError:
    """Wraps a grpc error (which is also a Call) into a CogfeedError."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    details = err.details() if hasattr(err, "details") else str(err)
    return CogfeedError(code, details or "")
