"""Which failures are worth a retry: transient I/O only.

Throttling, 5xx answers, connection resets and timeouts are retried; everything else (a bad
config, a bad row under on_error='raise', a bug) fails at once, because retrying it would only
fail again more slowly.
"""

from __future__ import annotations

import errno
import socket

from pipeline_core.errors import error_chain

TRANSIENT_CODES = {
    "SlowDown",
    "Throttling",
    "ThrottlingException",
    "RequestTimeout",
    "RequestTimeTooSkewed",
    "InternalError",
    "ServiceUnavailable",
    "503",
    "500",
    "502",
    "504",
}
TRANSIENT_ERRNOS = {
    errno.ECONNRESET,
    errno.ECONNREFUSED,
    errno.ECONNABORTED,
    errno.EPIPE,
    errno.ETIMEDOUT,
    errno.EAGAIN,
}
TRANSIENT_NAMES = {
    "EndpointConnectionError",
    "ConnectTimeoutError",
    "ReadTimeoutError",
    "ConnectionClosedError",
    "ResponseStreamingError",
    "ServerDisconnectedError",
    "ClientConnectionError",
    "ClientOSError",
    "ClientPayloadError",
    "IncompleteReadError",
}


class TransientIOError(OSError):
    """Raise this (or wrap in it) to say: the same call may well succeed if tried again."""


def _client_error_code(exc: BaseException) -> str | None:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        error = response.get("Error", {})
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return error.get("Code") or (str(status) if status else None)
    return None


def is_transient(exc: BaseException) -> bool:
    for e in error_chain(exc):
        if isinstance(e, (TransientIOError, TimeoutError, ConnectionError, socket.timeout)):
            return True
        if type(e).__name__ in TRANSIENT_NAMES:
            return True
        if _client_error_code(e) in TRANSIENT_CODES:
            return True
        if isinstance(e, OSError) and e.errno in TRANSIENT_ERRNOS:
            return True
        if "SlowDown" in str(e) or "Please reduce your request rate" in str(e):
            return True
    return False


def retry_on_transient(task, task_run, state) -> bool:
    """Prefect ``retry_condition_fn``: retry only when the failure was transient I/O."""
    exc = state.data if isinstance(state.data, BaseException) else None
    if exc is None:
        try:
            state.result(raise_on_failure=True)
        except BaseException as e:  # noqa: BLE001 - we only classify it
            exc = e
    return exc is not None and is_transient(exc)


def backoff_delays(retries: int, first: float) -> list[float]:
    """Exponential backoff: first, 2*first, 4*first, ... (Prefect adds the jitter)."""
    return [first * (2**i) for i in range(retries)]


def chunk_retries() -> dict:
    """The retry options of the tasks that cache chunks (each run overrides the count and delays)."""
    return {
        "retries": 3,
        "retry_delay_seconds": [2, 4, 8],
        "retry_jitter_factor": 0.5,
        "retry_condition_fn": retry_on_transient,
    }
