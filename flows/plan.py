"""Which chunks need a task: outputs the manifest shows as current are reused without one.

A rerun over unchanged inputs should cost a listing, not a Prefect task run per chunk. Before
submitting anything, the cache flow compares each input with its output's manifest entry:

- the entry was written for this input URL, and the input's stamp (size plus ETag or mtime and
  inode, see pipeline_core/commit/stamps.py) equals the stamp recorded when it was hashed, so the
  recorded source sha256 still describes its bytes;
- the output is the expected file and it and its parts (quarantine file, Megatron .bin/.idx)
  still stand by the one reuse rule, ``still_stands`` (pipeline_core/commit/standing.py): each
  stamp equals the one recorded after it was written, or else (``"sha256"``) its sha256 matches;
  ``verify_hits="size"`` never reads a stamped file, whose changed stamp means it is rebuilt;
- the manifest's config hash is this run's (Committer.open refuses or resets it otherwise).

Such chunks are *reused*: reported as cached, no task submitted. Every other chunk is hashed by
the flow (a hash_chunk task run only for a chunk whose read failed there) and goes through
cache_chunk (on worker processes: one group task per worker, flows/grouped.py), where Prefect's
content-keyed cache and the task's own manifest resume still apply.
``RunOptions.trust_stamps=False`` turns this off (every input hashed again on every run).

The export flow does the same for its chunks (``plan_exports``): a chunk is reused when its
manifest entry was written from a source with this run's fingerprint and the file still has the
stamp recorded after it was written. Otherwise its task runs and Prefect's cache hit is verified
as before (``verify_hits``): by the stamps the task recorded as it wrote the files, so a hit names
those very files, and for ``sha256`` by reading the whole file when a stamp differs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from flows.chunks import ChunkOutcome
from pipeline_core.commit.stamps import file_infos, stamp_of
from pipeline_core.commit.standing import still_stands
from pipeline_core.stages.export import chunk_name
from pipeline_core.storage.fs import join_url
from tasks.models import ChunkResult, ExportChunkResult, ExportJob


@dataclass
class Plan:
    stamps: list[str | None]  # each input's stamp, taken before anything reads it
    reused: dict[int, ChunkResult] = field(default_factory=dict)
    todo: list[int] = field(default_factory=list)
    output_infos: dict[str, dict | None] = field(default_factory=dict)  # the outputs as listed before any task

    def todo_stamps(self, trusted: bool) -> list[str | None]:
        """Each to-do input's stamp from before it was hashed, for its cache task to check after
        its read (tasks/cache.py); all None when the run does not trust stamps."""
        return [self.stamps[i] if trusted else None for i in self.todo]

    def reused_output_infos(self) -> dict[str, dict | None]:
        """The listing of reused chunks' files: no task rewrote them, so it is still current."""
        return {f.url: self.output_infos.get(f.url) for r in self.reused.values() for f in r.files()}


def plan_chunks(
    inputs: list[str], outputs: list[str], committed: list[dict | None], verify: str, storage: dict, trust: bool = True
) -> Plan:
    """Split chunks into reused (current per the manifest) and todo (need hash + cache tasks)."""
    infos = file_infos(inputs, storage)
    plan = Plan([stamp_of(infos[u]) if infos[u] else None for u in inputs])
    candidates = [
        _same_input(url, plan.stamps[i], output, entry) if trust else None
        for i, (url, output, entry) in enumerate(zip(inputs, outputs, committed))
    ]
    return _split(plan, candidates, verify, storage)


def _same_input(url, stamp, output, entry) -> ChunkResult | None:
    """The committed result when it was written for this input, unchanged since it was hashed."""
    if entry is None or stamp is None:
        return None
    result = ChunkResult.model_validate(entry)
    return result if (result.input_url, result.source_stamp, result.output_url) == (url, stamp, output) else None


def plan_exports(job: ExportJob, n: int, entries: dict[str, dict], storage: dict, trust: bool = True) -> Plan:
    """Split export chunks ``0..n-1`` into reused and todo; ``entries``: the manifest's results by file name."""
    plan = Plan([None] * n)
    urls = [join_url(job.output_dir, chunk_name(job.prefix, i)) for i in range(n)]
    candidates = [
        _same_source(i, url, entries.get(url.rsplit("/", 1)[-1]), job.source_fingerprint) if trust else None
        for i, url in enumerate(urls)
    ]
    return _split(plan, candidates, "stamp", storage)


def _same_source(index, url, entry, fingerprint) -> ExportChunkResult | None:
    if entry is None or not fingerprint:
        return None
    result = ExportChunkResult.model_validate(entry)
    return result if (result.index, result.output_url, result.source_fingerprint) == (index, url, fingerprint) else None


def _split(plan: Plan, candidates: list, how: str, storage: dict) -> Plan:
    """Chunk ``i`` is reused when its candidate still stands (the one reuse rule,
    pipeline_core/commit/standing.py), else it goes to the todo list; one listing per folder."""
    plan.output_infos = file_infos([f.url for r in candidates if r for f in r.files()], storage)
    for i, result in enumerate(candidates):
        if result is not None and still_stands(result.files(), how, storage, plan.output_infos):
            plan.reused[i] = result
        else:
            plan.todo.append(i)
    return plan


def stamp_outputs(results: list, cached: list[bool], committer, storage: dict, listed: dict | None = None) -> None:
    """Record the current stamp of each file of each reused result, so the next run need not hash it.

    Only results this run did not write (``cached``: plan reuse, Prefect hits, manifest resumes)
    are restamped: their files were checked by the reuse rule, perhaps by sha256 after a touch
    that changed the stamp. A result a task wrote this run keeps the stamps the task took with its
    sha256 (tasks/hashing.py): a stamp listed now could belong to a rewrite made after that hash,
    and would then vouch for bytes the recorded sha256 does not describe.
    ``listed``: infos already known to be current (the plan's, for reused chunks); the other
    files are listed here, once per folder.
    """
    listed = listed or {}
    reused = [r for r, hit in zip(results, cached, strict=True) if hit]
    urls = [f.url for r in reused for f in r.files() if f.url not in listed]
    infos = {**file_infos(urls, storage), **listed}
    for result in reused:
        if _restamp(result, infos):
            committer.record(result, save=False)  # saved once, by the final commit


def _restamp(result, infos: dict) -> bool:
    """Set the stamps of a result's output and parts from ``infos``; True when one changed."""
    changed = False
    for holder, url, size, attr in [(result, result.output_url, result.size, "output_stamp")] + [
        (p, p.url, p.size, "stamp") for p in result.parts
    ]:
        info = infos.get(url)
        stamp = stamp_of(info) if info and info.get("size") == size else None
        if stamp != getattr(holder, attr):
            setattr(holder, attr, stamp)
            changed = True
    return changed


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
