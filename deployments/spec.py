"""Read ``deployments/prefect.yaml`` into plain deployment specs, environment placeholders filled in.

``{{ $VAR }}`` placeholders are replaced as ``prefect deploy`` replaces them: by the variable's
value wherever it is set, left as written where it is not. So the served and the deployed
parameters agree.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

PREFECT_YAML = Path(__file__).with_name("prefect.yaml")
REPO_ROOT = PREFECT_YAML.parents[1]
ENV_PLACEHOLDER = re.compile(r"{{\s*\$(\w+)\s*}}")


class DeploymentSpecError(ValueError):
    """prefect.yaml cannot be used as written; the message names the deployment and the fix."""


@dataclass(frozen=True)
class CronSchedule:
    cron: str
    timezone: str | None = None
    active: bool = True


@dataclass(frozen=True)
class DeploymentSpec:
    """One ``deployments:`` entry of prefect.yaml."""

    name: str
    entrypoint: str  # "flows/cache_flow.py:cache_flow", relative to the repository root
    description: str
    tags: tuple[str, ...]
    schedules: tuple[CronSchedule, ...]
    concurrency_limit: int | None
    collision_strategy: str
    work_pool: str | None
    parameters: dict

    @property
    def module(self) -> str:
        """``flows.cache_flow``: the entrypoint's file as an importable module."""
        path, _ = self.entrypoint.split(":")
        return path.removesuffix(".py").replace("/", ".")

    @property
    def function(self) -> str:
        return self.entrypoint.split(":")[1]


def load_specs(path: Path = PREFECT_YAML, environ: Mapping[str, str] | None = None) -> list[DeploymentSpec]:
    """Every deployment in ``path``, with ``{{ $VAR }}`` taken from ``environ`` (default: os.environ)."""
    config = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    entries = config.get("deployments") or []
    if not entries:
        raise DeploymentSpecError(f"{path}: no deployments; add entries under 'deployments:'")
    filled = fill_variables(entries, os.environ if environ is None else environ)
    return [_spec(entry, path) for entry in filled]


def fill_variables(value, environ: Mapping[str, str]):
    """``value`` with every ``{{ $VAR }}`` whose VAR is in ``environ`` replaced by its value."""
    if isinstance(value, str):
        return ENV_PLACEHOLDER.sub(lambda m: environ.get(m.group(1), m.group(0)), value)
    if isinstance(value, Mapping):
        return {k: fill_variables(v, environ) for k, v in value.items()}
    if isinstance(value, list):
        return [fill_variables(v, environ) for v in value]
    return value


def _spec(entry: dict, path: Path) -> DeploymentSpec:
    name = entry.get("name")
    if not name or ":" not in entry.get("entrypoint", ""):
        raise DeploymentSpecError(f"{path}: every deployment needs a name and an entrypoint 'file.py:function'")
    limit = entry.get("concurrency_limit")
    limit = limit if isinstance(limit, dict) else {"limit": limit}
    return DeploymentSpec(
        name=name,
        entrypoint=entry["entrypoint"],
        description=entry.get("description", ""),
        tags=tuple(entry.get("tags") or ()),
        schedules=tuple(_schedule(s, name, path) for s in entry.get("schedules") or ()),
        concurrency_limit=limit.get("limit"),
        collision_strategy=limit.get("collision_strategy") or "ENQUEUE",
        work_pool=(entry.get("work_pool") or {}).get("name"),
        parameters=entry.get("parameters") or {},
    )


def _schedule(schedule: dict, name: str, path: Path) -> CronSchedule:
    if "cron" not in schedule:
        raise DeploymentSpecError(f"{path}: deployment {name!r}: only cron schedules are supported, got {schedule}")
    return CronSchedule(schedule["cron"], schedule.get("timezone"), schedule.get("active", True))


def unset_variables(value) -> set[str]:
    """Names of ``{{ $VAR }}`` placeholders still in ``value`` (their variables were not set)."""
    if isinstance(value, str):
        return set(ENV_PLACEHOLDER.findall(value))
    if isinstance(value, Mapping):
        return set().union(*(unset_variables(v) for v in value.values()))
    if isinstance(value, (list, tuple)):
        return set().union(*(unset_variables(v) for v in value))
    return set()


def require_parameters_set(spec: DeploymentSpec) -> None:
    """Refuse parameters that still hold ``{{ $VAR }}``: the run would look for a literal path."""
    missing = sorted(unset_variables(spec.parameters))
    if missing:
        exports = " ".join(f"{v}=..." for v in missing)
        raise DeploymentSpecError(
            f"deployment {spec.name!r} ({spec.entrypoint}) needs {', '.join(missing)} in the environment: "
            f"`export {exports}` (for the sample: `h5pipe sample --output out/sample` then "
            f"`export H5PIPE_DATA=$PWD/out/sample`), or edit the parameters in prefect.yaml"
        )
