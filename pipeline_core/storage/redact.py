"""Keep credentials out of every log line, including botocore's and s3fs's debug output.

``protect_secrets`` registers secret values (explicit storage options and the AWS_* variables
s3fs reads) and installs a log-record factory that masks them, and the access-key part of
signed request headers, before any handler sees the record. It is process-wide and idempotent.
"""

from __future__ import annotations

import logging
import os
import re
import threading

MASK = "**********"
SECRET_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
SECRET_OPTIONS = ("key", "secret", "token", "aws_access_key_id", "aws_secret_access_key", "aws_session_token")
PATTERNS = [
    re.compile(r"(Credential=)[^/,\s]+"),
    re.compile(r"(X-Amz-Security-Token['\"]?[:=]\s*['\"]?)[^'\",\s&]+", re.IGNORECASE),
    re.compile(r"(X-Amz-Credential=)[^&\s]+", re.IGNORECASE),
]

_secrets: set[str] = set()
_lock = threading.Lock()
_installed = False


def redact(text: str) -> str:
    for secret in sorted(_secrets, key=len, reverse=True):
        text = text.replace(secret, MASK)
    for pattern in PATTERNS:
        text = pattern.sub(lambda m: m.group(1) + MASK, text)
    return text


def protect_secrets(storage_options: dict | None = None) -> None:
    values = [os.environ.get(name) for name in SECRET_ENV]
    values += [str((storage_options or {}).get(name) or "") for name in SECRET_OPTIONS]
    with _lock:
        _secrets.update(v for v in values if v and len(v) >= 4)
        _install()


def _install() -> None:
    global _installed
    if _installed:
        return
    previous = logging.getLogRecordFactory()

    def factory(*args, **kwargs):
        record = previous(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a broken format is the handler's problem, not ours
            return record
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, ()
        return record

    logging.setLogRecordFactory(factory)
    _installed = True
