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
            outcome.cached[i] = state.name == "Cached"
        else:
            outcome.failures[i] = _reason(future)
        if on_done:
            on_done(i, outcome.results.get(i))
    return outcome


def _reason(future: PrefectFuture) -> str:
    try:
        future.result(raise_on_failure=True)
    except BaseException as e:  # noqa: BLE001 - reported, then raised by the flow
        return f"{type(e).__name__}: {e}"
    return future.state.message or future.state.name


def raise_failures(outcome: ChunkOutcome, names: list[str]) -> None:
    if outcome.failures:
        lines = [f"  {names[i]}: {why}" for i, why in sorted(outcome.failures.items())]
        raise ChunksFailed(f"{len(outcome.failures)} of {len(names)} chunks failed:\n" + "\n".join(lines))
