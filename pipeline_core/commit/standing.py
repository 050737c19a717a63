"""The one reuse rule: does a published output still stand?

Every chunk a stage finishes publishes a set of files: its output (HDF5, JSONL chunk, or with
Megatron-only output the first key's ``.idx``) and its *parts* (the quarantine file
``{stem}.errors.jsonl``, every Megatron ``.bin``/``.idx``). The commit record (the manifest) lists
each one with its size and sha256, and the stamp it had once hashed (see ``stamps``).

``still_stands`` is the only place that decides whether such a set may be reused. It is called by

- the flows' rerun plan (``flows/plan.py``: reuse without a task),
- the cache task's manifest resume (``tasks/cache.py``: reuse inside a task whose Prefect cache
  entry is gone),
- the check of a Prefect cache hit (``flows/chunks.py``: the content-keyed policy gives a hit, the
  files it describes must still stand),
- ``verify`` (every manifest entry, always by sha256),

so a file ``verify`` reports bad is one the next run rebuilds. A set stands when every file exists
with its recorded size and, per ``how``:

- ``"sha256"``: its stamp equals the recorded one (not rewritten since it was hashed), or its
  bytes hash to the recorded sha256;
- ``"size"`` (``verify_hits="size"``, for stores where reading is expensive): a file recorded with
  a stamp stands by its stamp alone, never read. Size alone could not tell another run's file of
  the same size (``--overwrite`` to other settings and back: a Prefect hit of the first settings
  named the file the second had written), so a changed stamp means rebuild. A file recorded
  without one stands by its size where the store gives no stamps, and is hashed where it does
  (the record predates stamps: results cached before tasks recorded them);
- ``"stamp"``: the stamp alone, never reading the bytes (the export plan: a miss just runs the
  task, whose Prefect hit is checked by sha256 again).

The tasks record each file's stamp as they publish it (tasks/hashing.py ``stamped_digest``), so
a Prefect hit carries the stamps of the very files its run wrote.

The full user-facing description is docs/commit-protocol.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pipeline_core.commit.stamps import file_infos, stamp_of
from pipeline_core.storage.hashing import FileDigest, file_digest

How = Literal["sha256", "size", "stamp"]


@dataclass(frozen=True, slots=True)
class Published:
    """One published file as the commit record holds it."""

    url: str
    sha256: str
    size: int
    stamp: str | None = None  # its stamp once hashed; None: always hash it


def still_stands(
    files: Sequence[Published],
    how: How = "sha256",
    storage_options: dict | None = None,
    infos: dict[str, dict | None] | None = None,
) -> bool:
    """True when every file of a finished chunk still holds what was committed (see the module
    docstring). ``infos``: fsspec infos already listed (by URL); the others are listed here, one
    listing per folder."""
    infos = dict(infos or {})
    unlisted = [f.url for f in files if f.url not in infos]
    if unlisted:
        infos.update(file_infos(unlisted, storage_options))
    return all(_stands(f, infos.get(f.url), how, storage_options) for f in files)


def _stands(file: Published, info: dict | None, how: How, storage_options: dict | None) -> bool:
    if info is None or info.get("size") != file.size:
        return False
    now = stamp_of(info)
    if file.stamp is not None and file.stamp == now:
        return True  # not rewritten since its sha256 was recorded
    if how == "stamp":
        return False
    if how == "size":
        return _by_size(file, now, storage_options)
    return _hashes_as_recorded(file, storage_options)


def _by_size(file: Published, now: str | None, storage_options: dict | None) -> bool:
    """``"size"`` once the size matched and no recorded stamp vouched for the file (module docstring)."""
    if file.stamp is not None:
        return False  # rewritten since it was recorded: maybe another run's file of the same size
    if now is None:
        return True  # the store gives no stamps: the size is all there is to go by
    return _hashes_as_recorded(file, storage_options)  # recorded before the tasks stamped their files


def _hashes_as_recorded(file: Published, storage_options: dict | None) -> bool:
    return file_digest(file.url, storage_options) == FileDigest(file.sha256, file.size)
