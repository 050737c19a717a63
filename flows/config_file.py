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


class UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.safe_load`` refusing a key given twice in one mapping (PyYAML keeps the last one,
    so ``pack_size: 512`` then ``pack_size: 0`` ran unpacked with no word)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} is given twice in one mapping; keep one", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep)


def load_config(path: str | Path, overrides: list[str] = ()) -> tuple[str, BaseModel]:
    """(flow name, validated parameters) from a YAML file plus overrides."""
    path = Path(path)
    try:
        config = yaml.load(path.read_text(encoding="utf-8"), Loader=UniqueKeyLoader) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ConfigFileError(f"{path}: cannot read the config: {e}") from e
    if not isinstance(config, dict):
        raise ConfigFileError(f"{path}: the config must be a mapping of parameters")
    for assignment in overrides:
        apply_override(config, assignment)
    flow_name = config.pop("flow", "pipeline")
    if flow_name not in FLOWS:
        raise ConfigFileError(f"{path}: flow must be one of {', '.join(FLOWS)}, got {flow_name!r}")
    if flow_name != "pipeline" and isinstance(config.get(flow_name), dict):
        config = _the_section(path, flow_name, config)
    try:
        return flow_name, FLOWS[flow_name].model_validate(config)
    except ValidationError as e:
        hint = _stage_alone_hint(flow_name, config)
        raise ConfigFileError(f"{path}: invalid {flow_name} config:\n{describe_errors(e)}{hint}") from e


def _the_section(path: Path, flow_name: str, config: dict) -> dict:
    """The parameters of a one-stage config written as a section named after its flow."""
    beside = sorted(str(k) for k in config if k != flow_name)
    if beside:
        raise ConfigFileError(
            f"{path}: a {flow_name} config holds its parameters at the top level or all in its "
            f"'{flow_name}:' section, not both: move {', '.join(beside)} into the section"
        )
    return config[flow_name]


def _stage_alone_hint(flow_name: str, config: dict) -> str:
    stages = [k for k in ("export", "cache") if k in config]
    if flow_name == "pipeline" and len(stages) == 1:
        return f"\n  (to run the {stages[0]} stage alone, add 'flow: {stages[0]}')"
    return ""


def describe_errors(error: ValidationError) -> str:
    return "\n".join(f"  {'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors())
