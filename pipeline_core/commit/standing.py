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
- ``"size"``: the size alone (``verify_hits="size"``, for stores where reading is expensive);
- ``"stamp"``: the stamp alone, never reading the bytes (the export plan: a miss just runs the
  task, whose Prefect hit is checked by sha256 again).

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
    if file.stamp is not None and file.stamp == stamp_of(info):
        return True  # not rewritten since its sha256 was recorded
    if how == "stamp":
        return False
    return how == "size" or file_digest(file.url, storage_options) == FileDigest(file.sha256, file.size)
