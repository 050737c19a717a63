"""Serve the deployments of prefect.yaml from this process: schedules and UI runs, no work pool.

    export H5PIPE_DATA=$PWD/out/sample      # the sample deployments' parameters use it
    python -m deployments.serve             # or: h5pipe serve
    python -m deployments.serve --name h5pipe-cache/sample --limit 2

Runs start in subprocesses of this one; stopping it (Ctrl-C) pauses the schedules. The served
deployments carry the same names as the ``prefect deploy`` ones, so on one server use one or the
other: serving replaces the work-pool deployment of the same name, and deploying replaces it back.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Sequence
from pathlib import Path

from deployments.spec import PREFECT_YAML, DeploymentSpec, DeploymentSpecError, load_specs, require_parameters_set


def load_flow(spec: DeploymentSpec):
    """The flow object behind ``spec.entrypoint`` (imported as a module: h5pipe is installed)."""
    try:
        return getattr(importlib.import_module(spec.module), spec.function)
    except (ImportError, AttributeError) as e:
        raise DeploymentSpecError(
            f"deployment {spec.name!r}: cannot load {spec.entrypoint}: {e}; install h5pipe (`pip install -e .`)"
        ) from e


def full_name(spec: DeploymentSpec) -> str:
    """``h5pipe-cache/sample``: the name Prefect shows and ``prefect deployment run`` takes."""
    return f"{load_flow(spec).name}/{spec.name}"


def to_deployment(spec: DeploymentSpec):
    """A RunnerDeployment with the schedules, tags, concurrency and parameters of ``spec``."""
    from prefect.client.schemas.objects import ConcurrencyLimitConfig, ConcurrencyLimitStrategy
    from prefect.deployments.runner import EntrypointType
    from prefect.schedules import Cron

    require_parameters_set(spec)
    limit = None
    if spec.concurrency_limit:
        strategy = ConcurrencyLimitStrategy(spec.collision_strategy)
        limit = ConcurrencyLimitConfig(limit=spec.concurrency_limit, collision_strategy=strategy)
    return load_flow(spec).to_deployment(
        name=spec.name,
        description=spec.description or None,
        tags=list(spec.tags),
        schedules=[Cron(s.cron, timezone=s.timezone, active=s.active) for s in spec.schedules],
        concurrency_limit=limit,
        parameters=spec.parameters,
        entrypoint_type=EntrypointType.MODULE_PATH,
    )


def select(specs: list[DeploymentSpec], names: Sequence[str]) -> list[DeploymentSpec]:
    """The specs named ``flow/deployment`` in ``names`` (all of them when ``names`` is empty)."""
    if not names:
        return specs
    by_name = {full_name(s): s for s in specs}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise DeploymentSpecError(f"unknown deployment(s) {', '.join(unknown)}; choose from {', '.join(by_name)}")
    return [by_name[n] for n in names]


def serve(names: Sequence[str] = (), prefect_file: Path = PREFECT_YAML, limit: int | None = None) -> None:
    """Serve the chosen deployments until interrupted; ``limit`` caps concurrent runs in this process."""
    import prefect

    deployments = [to_deployment(s) for s in select(load_specs(prefect_file), names)]
    prefect.serve(*deployments, limit=limit)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m deployments.serve", description=__doc__.splitlines()[0])
    parser.add_argument("--name", action="append", default=[], help="flow/deployment to serve (repeatable)")
    parser.add_argument("--prefect-file", type=Path, default=PREFECT_YAML, help="deployments file")
    parser.add_argument("--limit", type=int, default=None, help="most runs at once in this process")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        serve(args.name, args.prefect_file, args.limit)
    except DeploymentSpecError as e:
        raise SystemExit(f"h5pipe serve: {e}") from None


if __name__ == "__main__":
    main()
