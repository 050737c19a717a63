"""Command-line options generated from the flows' pydantic models, so the CLI and the YAML never
drift: every field a model gains is a flag the next time ``h5pipe --help`` runs.

A field ``chunk_size`` is ``--chunk-size``. Nested models are flattened: ``run.max_workers`` is
``--max-workers`` and ``run.storage.endpoint_url`` ``--endpoint-url``, a nested model's ``path``
takes the model's own name (``tokenizer.path`` is ``--tokenizer``), and a name already taken is
prefixed with its parent (``--tokenizer-backend`` if ``backend`` were taken). ``ALIASES`` adds
other spellings (``--dataset`` for ``datasets``).

Values are handed to the model as text, so the model's own validation (types, ranges, choices)
names the field in its errors, and only flags given on the command line are passed: the defaults
are the model's. Booleans are ``--x/--no-x``; list fields repeat (``--input a --input b``) and a
field that is only a list also splits on commas (``--dataset a,b``); dict fields take JSON
(``--processor-kwargs '{"train_on": "last"}'``). Secret fields (``SecretStr``) get no flag: pass
secrets through the environment, never on a command line where ``ps`` shows them.
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from inspect import Parameter, Signature

import typer
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

ALIASES = {"datasets": ("dataset",), "normalizer": ("normalize",)}
Kind = typing.Literal["bool", "list", "split_list", "json", "scalar"]


@dataclass(frozen=True, slots=True)
class Flag:
    """One command-line option and the model field it sets."""

    path: tuple[str, ...]  # the field in the model, e.g. ("run", "storage", "endpoint_url")
    name: str  # the option without dashes, e.g. "endpoint-url"
    field: FieldInfo
    kind: Kind

    @property
    def param(self) -> str:
        """The Python parameter name typer passes the value under."""
        return self.name.replace("-", "_")

    @property
    def required(self) -> bool:
        """Whether the model requires the field (then the flag is required too)."""
        return self.field.is_required()


def model_flags(model: type[BaseModel]) -> list[Flag]:
    """Every field of ``model`` (nested models flattened) as a flag; top-level names first."""
    leaves = list(_leaves(model, ()))
    taken: set[str] = set()
    flags = []
    for path, field in sorted(leaves, key=lambda leaf: len(leaf[0])):
        name = _flag_name(path, taken)
        taken.add(name)
        flags.append(Flag(path, name, field, _kind(field.annotation)))
    order = {path: i for i, (path, _) in enumerate(leaves)}
    return sorted(flags, key=lambda f: order[f.path])


def _leaves(model: type[BaseModel], prefix: tuple[str, ...]):
    for name, field in model.model_fields.items():
        nested = _nested_model(field.annotation)
        if nested is not None:
            yield from _leaves(nested, (*prefix, name))
        elif not _is_secret(field.annotation):
            yield (*prefix, name), field


def _flag_name(path: tuple[str, ...], taken: set[str]) -> str:
    parts = path[:-1] if path[-1] == "path" and len(path) > 1 else path
    name = parts[-1]
    for depth in range(2, len(parts) + 1):
        if name.replace("_", "-") not in taken:
            break
        name = "_".join(parts[-depth:])
    return name.replace("_", "-")


def _args(annotation) -> tuple:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return tuple(a for a in typing.get_args(annotation) if a is not type(None))
    return (annotation,)


def _nested_model(annotation) -> type[BaseModel] | None:
    found = [a for a in _args(annotation) if isinstance(a, type) and issubclass(a, BaseModel)]
    return found[0] if found else None


def _is_secret(annotation) -> bool:
    return any(a is SecretStr for a in _args(annotation))


def _kind(annotation) -> Kind:
    args = _args(annotation)
    origins = [typing.get_origin(a) or a for a in args]
    if origins == [bool]:
        return "bool"
    if list in origins:
        return "split_list" if len(args) == 1 else "list"
    if dict in origins:
        return "json"
    return "scalar"


def parameters(flags: list[Flag]) -> list[Parameter]:
    """typer parameters for ``flags`` (None unless given, so the model's defaults apply)."""
    return [_parameter(flag) for flag in flags]


def _parameter(flag: Flag) -> Parameter:
    names = [f"--{flag.name}", *(f"--{a}" for a in ALIASES.get(flag.path[-1], ()))]
    annotation: object = {"bool": bool | None, "list": list[str] | None, "split_list": list[str] | None}.get(
        flag.kind, str | None
    )
    if flag.kind == "bool":
        names = [f"--{flag.name}/--no-{flag.name}", *(f"--{a}" for a in ALIASES.get(flag.path[-1], ()))]
    default = ... if flag.required else None
    if flag.required:
        annotation = str
    option = typer.Option(default, *names, help=_help(flag), show_default=False, metavar=_metavar(flag))
    return Parameter(flag.param, Parameter.KEYWORD_ONLY, default=option, annotation=annotation)


def _metavar(flag: Flag) -> str | None:
    if flag.kind == "bool":
        return None
    choices = _choices(flag)
    if choices:
        return "|".join(map(str, choices))
    scalars = {int: "INT", float: "NUMBER", str: "TEXT"}
    found = [scalars[a] for a in _args(flag.field.annotation) if a in scalars]
    return {"json": "JSON", "split_list": "A,B"}.get(flag.kind) or (found[0] if found else "TEXT")


def _choices(flag: Flag) -> list:
    literals = [a for a in _args(flag.field.annotation) if typing.get_origin(a) is typing.Literal]
    return [c for a in literals for c in typing.get_args(a)]


def _help(flag: Flag) -> str:
    text = flag.field.description or ""
    if flag.kind == "json":
        text += " (JSON object)"
    if flag.kind == "split_list":
        text += " (comma-separated or repeated)"
    default = flag.field.get_default(call_default_factory=True)
    if not flag.required and flag.field.default is not PydanticUndefined and default not in (None, {}, []):
        text += f" (default: {default})"
    if len(flag.path) > 1:
        text += f" (YAML: {'.'.join(flag.path)})"
    return text.strip()


def model_data(flags: list[Flag], values: dict) -> dict:
    """The nested dict ``model_validate`` takes, from the flags given (None: not given)."""
    data: dict = {}
    for flag in flags:
        value = values.get(flag.param)
        if value is None or value == []:
            continue
        target = data
        for key in flag.path[:-1]:
            target = target.setdefault(key, {})
        target[flag.path[-1]] = _value(flag, value)
    return data


def _value(flag: Flag, value):
    if flag.kind == "json":
        try:
            return json.loads(value)
        except ValueError as exc:
            raise typer.BadParameter(f"--{flag.name} takes a JSON object, got {value!r}: {exc}") from None
    if flag.kind == "split_list":
        return [part.strip() for v in value for part in v.split(",") if part.strip()]
    if flag.kind == "list":
        return value[0] if len(value) == 1 else list(value)
    return value


def model_command(
    model: type[BaseModel], run: Callable[..., None], extra: list[Parameter], doc: str
) -> Callable[..., None]:
    """A typer command whose options are ``model``'s fields plus ``extra``; calls
    ``run(data, **extra_values)`` with the nested dict of the flags given."""
    flags = model_flags(model)
    clash = {p.name for p in extra} & {f.param for f in flags}
    if clash:
        raise RuntimeError(f"CLI-only options {sorted(clash)} clash with fields of {model.__name__}")

    def command(**values) -> None:
        extras = {p.name: values.pop(p.name) for p in extra}
        run(model_data(flags, values), **extras)

    command.__signature__ = Signature([*parameters(flags), *extra])
    command.__doc__ = doc
    command.__name__ = run.__name__
    return command
