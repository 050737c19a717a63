"""The ``h5pipe`` command line: run the flows ad hoc, inspect and check what they wrote.

With no PREFECT_API_URL set, a run uses (or starts) the local Prefect server h5pipe keeps
between runs (``h5pipe server start|stop|status``, flows/local_server.py); ``H5PIPE_SERVER=temporary``
gives Prefect's own temporary server per run instead.
Exit codes: 0 success, 1 a failed run, 2 a bad config or bad arguments.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from typer.core import TyperGroup

from flows.server_cli import server_app

# Prefect's temporary server (used when PREFECT_API_URL is unset) can take longer than its default
# 20 s to start on a busy 2-core machine; give it more room unless the user chose a value.
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")


class _Group(TyperGroup):
    """Typer's group, with the stage commands built only when one is asked for: their options come
    from the pydantic models, whose import costs most of a second, so ``h5pipe inspect`` and
    ``h5pipe verify`` do not pay for them."""

    def list_commands(self, ctx) -> list[str]:
        return [*STAGES, *(n for n in super().list_commands(ctx) if n not in STAGES)]

    def get_command(self, ctx, cmd_name: str):
        if cmd_name in STAGES and cmd_name not in self.commands:
            self.add_command(stage_command(cmd_name), cmd_name)
        return super().get_command(ctx, cmd_name)


app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="h5pipe: raw LLM training data -> training-ready HDF5.",
    cls=_Group,
)

Opt = typer.Option
app.add_typer(server_app, name="server")


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        from pipeline_core.version import FORMAT_VERSION

        try:
            installed = version("h5pipe")
        except PackageNotFoundError:  # run from a checkout
            installed = "unknown"
        typer.echo(f"h5pipe {installed} (HDF5 format {FORMAT_VERSION})")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool, Opt("--version", callback=_version, is_eager=True, help="print the version and exit")
    ] = False,
) -> None:
    """h5pipe: raw LLM training data -> training-ready HDF5."""


def _fail(message: str, code: int) -> None:
    typer.secho(message, err=True, fg=typer.colors.RED)
    raise typer.Exit(code)


def _run_flow(flow_name: str, params) -> dict:
    from flows.failures import check_config, disk_full
    from flows.local_server import ServerError, api_for_run, using_api
    from flows.progress import terminal_progress
    from flows.runs import run_flow

    check_config(flow_name, params, _fail)  # exit 2 before Prefect starts
    try:
        api_url = api_for_run(lambda line: typer.echo(line, err=True))
    except ServerError as e:
        _fail(str(e), 1)
    with using_api(api_url), terminal_progress():
        try:
            return run_flow(flow_name, params)
        except Exception as e:  # noqa: BLE001 - reported as a failed run
            full = disk_full(e)
            typer.secho(full or f"h5pipe {flow_name} failed: {type(e).__name__}: {e}", err=True, fg=typer.colors.RED)
            if full:  # HDF5 crashes at exit after a failed write: leave before it can
                sys.stderr.flush()
                os._exit(1)
            raise typer.Exit(1) from None


def _validated(model, data: dict):
    from pydantic import ValidationError

    from flows.config_file import describe_errors

    try:
        return model.model_validate(data)
    except ValidationError as e:
        _fail(f"invalid parameters:\n{describe_errors(e)}", 2)


def _print_summary(result: dict) -> None:
    typer.echo(json.dumps(result.get("summary", result), indent=2, default=str))


def _dry_run_option():
    from inspect import Parameter

    option = typer.Option(False, "--dry-run", help="show the plan (chunks, cached, to do) and write nothing")
    return Parameter("dry_run", Parameter.KEYWORD_ONLY, default=option, annotation=bool)


def _stage(flow_name: str, model):
    """``data`` (the flags given, nested like the YAML) validated, then planned or run."""

    def run_stage(data: dict, dry_run: bool = False) -> None:
        params = _validated(model, data)
        if dry_run:
            from flows.dry_run import dry_run as plan

            try:
                typer.echo(json.dumps(plan(flow_name, params), indent=2, default=str))
            except Exception as e:  # noqa: BLE001 - a plan that cannot be made is a bad config
                _fail(f"h5pipe {flow_name} --dry-run: {type(e).__name__}: {e}", 2)
            return
        _print_summary(_run_flow(flow_name, params))

    run_stage.__name__ = flow_name
    return run_stage


STAGES = {
    "export": ("ExportParams", "Export a dataset (or dataset_info entries) to JSONL chunks."),
    "cache": ("CacheParams", "Tokenize JSONL chunks into HDF5 (and/or Megatron/MindSpeed files)."),
}


def stage_command(name: str):
    """The click command of stage ``name``, its options generated from its pydantic model."""
    import flows.params
    from flows.cli_options import model_command

    model_name, doc = STAGES[name]
    model = getattr(flows.params, model_name)
    single = typer.Typer(add_completion=False)
    single.command(name)(model_command(model, _stage(name, model), [_dry_run_option()], doc))
    command = typer.main.get_command(single)
    command.name = name
    return command


@app.command()
def run(
    config: Annotated[Path, typer.Argument(help="YAML with the flow parameters (flow: export|cache|pipeline)")],
    set_: Annotated[list[str] | None, Opt("--set", help="override, e.g. --set cache.pack_size=2048")] = None,
) -> None:
    """Run a flow from a YAML config; --set options override its fields."""
    from flows.config_file import ConfigFileError, load_config

    try:
        flow_name, params = load_config(config, set_ or [])
    except ConfigFileError as e:
        _fail(str(e), 2)
    _print_summary(_run_flow(flow_name, params))


@app.command()
def inspect(
    file: Annotated[str, typer.Argument(help="an h5pipe HDF5 file (path or URL)")],
    tokenizer: Annotated[
        str | None, Opt(help="to decode a sample; default: from h5pipe-run.json beside the file")
    ] = None,
    index: Annotated[int, Opt(help="which sample to decode (in a packed file: which pack)")] = 0,
) -> None:
    """Show a file's attributes, counts and a decoded sample."""
    from flows.inspect import describe_file

    try:
        typer.echo(describe_file(file, tokenizer, index))
    except (OSError, ValueError, KeyError) as e:
        _fail(f"cannot inspect {file}: {e}", 1)


@app.command()
def verify(
    output: Annotated[str, typer.Argument(help="an output folder (path or URL) written by h5pipe")],
    quick: Annotated[bool, Opt(help="compare sizes instead of sha256")] = False,
    endpoint_url: Annotated[str | None, Opt(help="S3-compatible endpoint")] = None,
) -> None:
    """Check every file against the manifest and the HDF5 invariants; exit 1 listing bad files."""
    from pipeline_core.commit.verify import verify_output

    storage = {"endpoint_url": endpoint_url} if endpoint_url else None
    report = verify_output(output, storage, "size" if quick else "sha256")
    typer.echo("\n".join(report.lines()))
    if not report.ok:
        raise typer.Exit(1)


@app.command()
def merge(
    input: Annotated[
        str, Opt("--input", help="a cache output folder with Megatron files (output_format megatron|both)")
    ],
    output: Annotated[str, Opt(help="the merged prefix, e.g. merged/all: merged/all_text_document.bin/.idx")],
    endpoint_url: Annotated[str | None, Opt(help="S3-compatible endpoint")] = None,
) -> None:
    """Merge the per-chunk Megatron/MindSpeed files of a cache output into one dataset per key."""
    from pipeline_core.errors import ConfigError
    from pipeline_core.stages.merge import merge_output

    storage = {"endpoint_url": endpoint_url} if endpoint_url else None
    try:
        merged = merge_output(input, output, storage)
    except (ConfigError, ValueError) as e:
        _fail(f"h5pipe merge: {e}", 2)
    typer.echo(json.dumps(merged, indent=2))


@app.command()
def serve(
    name: Annotated[
        list[str] | None, Opt("--name", help="deployment to serve, e.g. h5pipe-cache/sample (default: all)")
    ] = None,
    limit: Annotated[int | None, Opt(help="at most this many concurrent runs")] = None,
    prefect_file: Annotated[Path | None, Opt(help="the prefect.yaml to read")] = None,
) -> None:
    """Serve the deployments of deployments/prefect.yaml with prefect.serve (no work pool needed)."""
    from deployments.serve import PREFECT_YAML
    from deployments.serve import serve as serve_deployments
    from deployments.spec import DeploymentSpecError

    try:
        serve_deployments(name or (), prefect_file or PREFECT_YAML, limit)
    except DeploymentSpecError as e:
        _fail(str(e), 2)


@app.command()
def sample(
    output: Annotated[Path, Opt(help="folder for the sample data, tokenizer and run.yaml")] = Path("out/sample"),
    rows: Annotated[int, Opt()] = 600,
    run_it: Annotated[bool, Opt("--run/--no-run", help="run the pipeline on it")] = True,
) -> None:
    """Write the shipped sample (data + a tokenizer trained on it + run.yaml) and run it."""
    from flows.sample import write_sample
    from pipeline_core.errors import ConfigError

    try:
        config = write_sample(output, rows)
    except ConfigError as e:
        _fail(str(e), 2)
    typer.echo(f"sample written: {config}")
    if run_it:
        run(config, [])
        for folder, pattern in (("jsonl", "*.jsonl"), ("h5", "*.h5")):
            files = sorted((output / folder).glob(pattern))
            typer.echo(f"wrote {len(files)} file(s) in {output / folder}: {', '.join(f.name for f in files)}")


def main() -> None:  # pragma: no cover - console entry
    sys.exit(app())
