"""``h5pipe run CONFIG.yaml``: the YAML holds a flow's parameters; ``--set a.b=v`` overrides them."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ValidationError

from flows.params import CacheParams, ExportParams, PipelineParams

FLOWS: dict[str, type[BaseModel]] = {"export": ExportParams, "cache": CacheParams, "pipeline": PipelineParams}


class ConfigFileError(ValueError):
    """A config that cannot run; the message names the file and the field."""


def apply_override(config: dict, assignment: str) -> None:
    if "=" not in assignment:
        raise ConfigFileError(f"override {assignment!r} must look like section.field=value")
    dotted, raw = assignment.split("=", 1)
    *parents, leaf = dotted.strip().split(".")
    node = config
    for name in parents:
        node = node.setdefault(name, {})
        if not isinstance(node, dict):
            raise ConfigFileError(f"override {dotted!r}: {name!r} is not a section")
    node[leaf] = yaml.safe_load(raw)


def load_config(path: str | Path, overrides: list[str] = ()) -> tuple[str, BaseModel]:
    """(flow name, validated parameters) from a YAML file plus overrides."""
    path = Path(path)
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ConfigFileError(f"{path}: cannot read the config: {e}") from e
    if not isinstance(config, dict):
        raise ConfigFileError(f"{path}: the config must be a mapping of parameters")
    for assignment in overrides:
        apply_override(config, assignment)
    flow_name = config.pop("flow", "pipeline")
    if flow_name not in FLOWS:
        raise ConfigFileError(f"{path}: flow must be one of {', '.join(FLOWS)}, got {flow_name!r}")
    if flow_name != "pipeline" and flow_name in config and len(config) == 1:
        config = config[flow_name]  # a section named after the flow
    try:
        return flow_name, FLOWS[flow_name].model_validate(config)
    except ValidationError as e:
        raise ConfigFileError(f"{path}: invalid {flow_name} config:\n{describe_errors(e)}") from e


def describe_errors(error: ValidationError) -> str:
    return "\n".join(f"  {'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors())
