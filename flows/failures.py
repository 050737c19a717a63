"""How the CLI reports what ends a run: config errors (exit 2, before Prefect) and a full disk.

Kept out of cli.py so the command module stays a list of commands.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Callable

from pipeline_core.errors import error_chain

_H5_FILE = re.compile(r"filename = '([^']+)'")


def check_config(flow_name: str, params, fail: Callable[[str, int], None]) -> None:
    """Everything the config decides (flows/precheck.py): ``fail(message, 2)`` on a config error,
    ``fail(message, 1)`` on a damaged manifest or an input folder whose export has not finished."""
    from flows.precheck import check_before_run
    from pipeline_core.commit.manifest import IncompleteFolder, ManifestError
    from pipeline_core.errors import ConfigError

    try:
        check_before_run(flow_name, params)
    except (ConfigError, FileNotFoundError) as e:
        fail(f"invalid config for h5pipe {flow_name}: {e}", 2)
    except (ManifestError, IncompleteFolder) as e:
        fail(f"h5pipe {flow_name} cannot start: {e}", 1)


def disk_full(error: BaseException) -> str | None:
    """The message for a run that ran out of disk space (naming the file), else None."""
    text = str(error)
    chained = [e for e in error_chain(error) if isinstance(e, OSError) and e.errno == errno.ENOSPC]
    if not chained and "No space left on device" not in text and "errno = 28" not in text:
        return None
    found = _H5_FILE.search(text)
    name = found[1] if found else next((e.filename for e in chained if e.filename), None)
    where = f" writing {name}" if name else ""
    return (
        f"h5pipe ran out of disk space{where} (No space left on device). Free space or write to another "
        "folder, then rerun: finished chunks are kept, and the interrupted one's temporary file is swept"
    )
