"""Which chunks need a task: outputs the manifest shows as current are reused without one.

A rerun over unchanged inputs should cost a listing, not a Prefect task run per chunk. Before
submitting anything, the cache flow compares each input with its output's manifest entry:

- the entry was written for this input URL, and the input's stamp (size plus ETag or mtime and
  inode, see pipeline_core/commit/stamps.py) equals the stamp recorded when it was hashed, so the
  recorded source sha256 still describes its bytes;
- the output is the expected file and still verifies: its stamp equals the one recorded after
  it was written, or else its size (``verify_hits="size"``) or sha256 (``"sha256"``) matches;
- the manifest's config hash is this run's (Committer.open refuses or resets it otherwise).

Such chunks are *reused*: reported as cached, no task submitted. Every other chunk goes through
hash_chunk and cache_chunk as before, where Prefect's content-keyed cache and the task's own
manifest resume still apply. ``RunOptions.trust_stamps=False`` turns this off (every input
hashed again on every run).

The export flow does the same for its chunks (``plan_exports``): a chunk is reused when its
manifest entry was written from a source with this run's fingerprint and the file still has the
stamp recorded after it was written. Otherwise its task runs and Prefect's cache hit is verified
as before (``verify_hits``), which for ``sha256`` reads the whole file.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from flows.chunks import ChunkOutcome
from pipeline_core.commit.stamps import file_infos, stamp_of
from pipeline_core.stages.export import chunk_name
from pipeline_core.storage.fs import join_url
from pipeline_core.storage.hashing import FileDigest, matches
from tasks.models import ChunkResult, ExportChunkResult, ExportJob


@dataclass
class Plan:
    stamps: list[str | None]  # each input's stamp, taken before anything reads it
    reused: dict[int, ChunkResult] = field(default_factory=dict)
    todo: list[int] = field(default_factory=list)
    output_infos: dict[str, dict | None] = field(default_factory=dict)  # the outputs as listed before any task

    def reused_output_infos(self) -> dict[str, dict | None]:
        """The listing of reused chunks' outputs: no task rewrote them, so it is still current."""
        return {r.output_url: self.output_infos.get(r.output_url) for r in self.reused.values()}


def plan_chunks(
    inputs: list[str], outputs: list[str], committed: list[dict | None], verify: str, storage: dict, trust: bool = True
) -> Plan:
    """Split chunks into reused (current per the manifest) and todo (need hash + cache tasks)."""
    infos = file_infos(inputs, storage)
    plan = Plan([stamp_of(infos[u]) if infos[u] else None for u in inputs])
    plan.output_infos = file_infos(outputs, storage) if trust else {}
    current = (
        _current(url, plan.stamps[i], output, entry, plan.output_infos.get(output), verify, storage) if trust else None
        for i, (url, output, entry) in enumerate(zip(inputs, outputs, committed))
    )
    return _split(plan, current, storage)


def _current(url, stamp, output, entry, output_info, verify, storage) -> ChunkResult | None:
    if entry is None or stamp is None or output_info is None:
        return None
    result = ChunkResult.model_validate(entry)
    if (result.input_url, result.source_stamp, result.output_url) != (url, stamp, output):
        return None
    if output_info.get("size") != result.size:
        return None
    if result.output_stamp is not None and result.output_stamp == stamp_of(output_info):
        return result  # not rewritten since its sha256 was recorded
    if verify == "sha256" and not matches(output, FileDigest(result.sha256, result.size), storage):
        return None
    return result


def plan_exports(job: ExportJob, n: int, entries: dict[str, dict], storage: dict, trust: bool = True) -> Plan:
    """Split export chunks ``0..n-1`` into reused and todo; ``entries``: the manifest's results by file name."""
    plan = Plan([None] * n)
    urls = [join_url(job.output_dir, chunk_name(job.prefix, i)) for i in range(n)]
    plan.output_infos = file_infos(urls, storage) if trust else {}
    current = (
        _current_export(i, url, entries.get(url.rsplit("/", 1)[-1]), job.source_fingerprint, plan.output_infos.get(url))
        if trust
        else None
        for i, url in enumerate(urls)
    )
    return _split(plan, current, storage)


def _split(plan: Plan, current, storage: dict) -> Plan:
    """Chunk ``i`` is reused when ``current`` yields a result for it, else it goes to the todo
    list; so does a reused chunk whose ``.errors.jsonl`` is gone (one listing per folder)."""
    for i, result in enumerate(current):
        if result is None:
            plan.todo.append(i)
        else:
            plan.reused[i] = result
    wanted = [r.errors_url for r in plan.reused.values() if r.errors_url]
    if not wanted:
        return plan
    found = file_infos(wanted, storage)
    lost = [i for i, r in plan.reused.items() if r.errors_url and not found.get(r.errors_url)]
    for i in lost:
        del plan.reused[i]
    plan.todo = sorted(plan.todo + lost)
    return plan


def _current_export(index, url, entry, fingerprint, output_info) -> ExportChunkResult | None:
    if entry is None or output_info is None or not fingerprint:
        return None
    result = ExportChunkResult.model_validate(entry)
    if (result.index, result.output_url, result.source_fingerprint) != (index, url, fingerprint):
        return None
    if output_info.get("size") != result.size or result.output_stamp is None:
        return None
    return result if result.output_stamp == stamp_of(output_info) else None


def stamp_outputs(results: list[ChunkResult], committer, storage: dict, listed: dict | None = None) -> None:
    """Record each output's current stamp, so the next run need not hash it.

    ``listed``: infos already known to be current (the plan's, for reused chunks); the other
    outputs are listed here, once per folder.
    """
    listed = listed or {}
    infos = {**file_infos([r.output_url for r in results if r.output_url not in listed], storage), **listed}
    for result in results:
        info = infos.get(result.output_url)
        stamp = stamp_of(info) if info and info.get("size") == result.size else None
        if stamp != result.output_stamp:
            result.output_stamp = stamp
            committer.record(result, save=False)  # saved once, by the final commit


def merged(plan: Plan, ran: ChunkOutcome) -> ChunkOutcome:
    """The whole run's outcome by input index: reused chunks as cache hits, plus the tasks' (``ran``)."""
    outcome = ChunkOutcome()
    for i, result in plan.reused.items():
        outcome.results[i], outcome.cached[i] = result, True
        outcome.reused.add(i)
    for k, i in enumerate(plan.todo):
        if k in ran.results:
            outcome.results[i], outcome.cached[i] = ran.results[k], ran.cached[k]
        if k in ran.failures:
            outcome.failures[i] = ran.failures[k]
    return outcome
