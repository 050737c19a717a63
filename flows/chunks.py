"""Running mapped chunk tasks: collect results, verify cache hits, name the chunks that failed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from prefect.futures import PrefectFuture, as_completed


class ChunksFailed(RuntimeError):
    """Some chunks failed after their retries; the message lists each chunk and why."""


@dataclass
class ChunkOutcome:
    results: dict[int, object] = field(default_factory=dict)
    cached: dict[int, bool] = field(default_factory=dict)
    failures: dict[int, str] = field(default_factory=dict)
    reused: set[int] = field(default_factory=set)  # hits the flow verified itself (flows/plan.py)


def collect(
    futures: list[PrefectFuture], names: list[str], on_done: Callable[[int, object], None] | None = None
) -> ChunkOutcome:
    """Wait for every future; keep results, whether each was a cache hit, and failure messages."""
    index = {id(f): i for i, f in enumerate(futures)}
    outcome = ChunkOutcome()
    for future in as_completed(futures):
        i = index[id(future)]
        future.wait()  # sets the final state; .state alone may still read an earlier one
        state = future.state
        if state.is_completed():
            outcome.results[i] = future.result()
            outcome.cached[i] = state.name == "Cached" or was_resumed(outcome.results[i])
        else:
            outcome.failures[i] = _reason(future)
        if on_done:
            on_done(i, outcome.results.get(i))
    return outcome


def was_resumed(result) -> bool:
    """A chunk the task reused from the manifest rather than computed (tasks/cache.py ``cache_many``)."""
    return bool(getattr(result, "resumed", False))


def _reason(future: PrefectFuture) -> str:
    try:
        future.result(raise_on_failure=True)
    except BaseException as e:  # noqa: BLE001 - reported, then raised by the flow
        return f"{type(e).__name__}: {e}"
    return future.state.message or future.state.name


def blame_upstream(outcome: ChunkOutcome, upstream: list) -> None:
    """A chunk whose task never ran because the future it was given failed (e.g. its hash_chunk
    run) is reported with that future's exception, not with the waiting task's Pending state."""
    for i in list(outcome.failures):
        before = upstream[i]
        if not isinstance(before, PrefectFuture):
            continue
        before.wait()  # as in collect: .state alone may still read an earlier state than the final one
        if not before.state.is_completed():
            outcome.failures[i] = _reason(before)


def raise_failures(outcome: ChunkOutcome, names: list[str]) -> None:
    if outcome.failures:
        lines = [f"  {names[i]}: {why}" for i, why in sorted(outcome.failures.items())]
        raise ChunksFailed(f"{len(outcome.failures)} of {len(names)} chunks failed:\n" + "\n".join(lines))


def output_matches(result, how: str, storage_options: dict) -> bool:
    """Do the files a result describes (output and parts) still stand? The one reuse rule,
    pipeline_core/commit/standing.py, applied to a Prefect cache hit."""
    from pipeline_core.commit.standing import still_stands

    return still_stands(result.files(), how, storage_options)


def run_chunks(
    futures: list[PrefectFuture], names: list[str], progress, committer, annotate: Callable | None = None
) -> ChunkOutcome:
    """Collect mapped chunk tasks: advance the progress and commit each result as it lands.

    ``annotate(i, result)`` may complete a result (in place) before it is committed.
    """

    def finished(i: int, result) -> None:
        progress.advance()
        if result is not None:
            if annotate:
                annotate(i, result)
            committer.record(result)

    outcome = collect(futures, names, finished)
    committer.flush()  # every finished chunk is on record before the flow can fail on the others
    return outcome


def rebuild_bad_hits(outcome: ChunkOutcome, names: list[str], is_valid, rebuild, committer, logger) -> None:
    """A cache hit whose output is gone or changed is recomputed (``rebuild(i)``), never trusted."""
    for i in [i for i, hit in outcome.cached.items() if hit and i not in outcome.reused]:
        if not is_valid(outcome.results[i]):
            logger.warning("cache hit for %s points at a missing or changed output; rebuilding", names[i])
            outcome.results[i] = rebuild(i)
            outcome.cached[i] = False
            committer.record(outcome.results[i])


def in_order(outcome: ChunkOutcome, n: int) -> tuple[list, list[bool]]:
    return [outcome.results[i] for i in range(n)], [outcome.cached[i] for i in range(n)]


def sweep_outputs(output_dir: str, storage_options: dict, logger) -> None:
    """Remove temp files of writers that are gone (a crashed earlier run); never a live writer's."""
    from pipeline_core.commit.sweep import sweep_local_staging, sweep_stale_temps
    from pipeline_core.storage.fs import is_local, url_to_fs

    removed = sweep_stale_temps(output_dir, storage_options)
    if not is_local(url_to_fs(output_dir, storage_options)[0]):
        removed += sweep_local_staging()
    if removed:
        logger.info("removed %d stale temporary file(s) of interrupted writers: %s", len(removed), removed[:5])


def run_batches(
    futures: list[PrefectFuture],
    groups: list[list[int]],
    progress,
    committer,
    annotate: Callable | None = None,
    hits: bool = False,
) -> ChunkOutcome:
    """``run_chunks`` for batch tasks (flows/batching.py): future ``j`` returns the results of the
    chunks at positions ``groups[j]`` (with ``hits``: ``(result, was it a cache hit)`` pairs, see
    tasks/cache_group.py); a failed batch fails each of its chunks with its reason."""
    index = {id(f): j for j, f in enumerate(futures)}
    outcome = ChunkOutcome()
    for future in as_completed(futures):
        group = groups[index[id(future)]]
        future.wait()
        if future.state.is_completed():
            for k, item in zip(group, future.result(), strict=True):
                result, hit = item if hits else (item, False)
                outcome.results[k], outcome.cached[k] = result, hit or was_resumed(result)
                if annotate:
                    annotate(k, result)
                committer.record(result)
        else:
            why = _reason(future)
            outcome.failures.update({k: why for k in group})
        progress.advance(len(group))
    committer.flush()
    return outcome
