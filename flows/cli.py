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

from flows.server_cli import server_app

# Prefect's temporary server (used when PREFECT_API_URL is unset) can take longer than its default
# 20 s to start on a busy 2-core machine; give it more room unless the user chose a value.
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="h5pipe: raw LLM training data -> training-ready HDF5."
)

Opt = typer.Option
app.add_typer(server_app, name="server")


def _fail(message: str, code: int) -> None:
    typer.secho(message, err=True, fg=typer.colors.RED)
    raise typer.Exit(code)


def _run_flow(flow_name: str, params) -> dict:
    from flows.local_server import ServerError, api_for_run, using_api
    from flows.progress import terminal_progress
    from flows.runs import run_flow

    try:
        api_url = api_for_run(lambda line: typer.echo(line, err=True))
    except ServerError as e:
        _fail(str(e), 1)
    with using_api(api_url), terminal_progress():
        try:
            return run_flow(flow_name, params)
        except Exception as e:  # noqa: BLE001 - reported as a failed run
            _fail(f"h5pipe {flow_name} failed: {type(e).__name__}: {e}", 1)


def _validated(model, data: dict):
    from pydantic import ValidationError

    from flows.config_file import describe_errors

    try:
        return model.model_validate(data)
    except ValidationError as e:
        _fail(f"invalid parameters:\n{describe_errors(e)}", 2)


def _print_summary(result: dict) -> None:
    typer.echo(json.dumps(result.get("summary", result), indent=2, default=str))


@app.command()
def export(
    source: Annotated[str, Opt(help="hub id, local file/folder, fsspec URL or dataset_info YAML")],
    output: Annotated[str, Opt(help="folder URL for the JSONL chunks")],
    chunk_size: Annotated[int, Opt(help="input rows per chunk")] = 1_000_000,
    prefix: Annotated[str, Opt(help="chunk file prefix")] = "train",
    split: Annotated[str, Opt()] = "train",
    streaming: Annotated[bool, Opt(help="never materialise the dataset")] = False,
    process_func: Annotated[str | None, Opt(help="'module:function' applied to each row")] = None,
    endpoint_url: Annotated[str | None, Opt(help="S3-compatible endpoint")] = None,
    max_workers: Annotated[int, Opt()] = 2,
) -> None:
    """Export a dataset to JSONL chunks."""
    from flows.params import ExportParams

    run = {"max_workers": max_workers, "storage": {"endpoint_url": endpoint_url}}
    params = _validated(
        ExportParams,
        dict(
            source=source,
            output=output,
            chunk_size=chunk_size,
            prefix=prefix,
            split=split,
            streaming=streaming,
            process_func=process_func,
            run=run,
        ),
    )
    _print_summary(_run_flow("export", params))


@app.command()
def cache(
    input: Annotated[str, Opt("--input", help="JSONL file or folder of chunks")],
    output: Annotated[str, Opt(help="folder URL for the HDF5 files")],
    tokenizer: Annotated[str, Opt(help="tokenizer.json or a folder holding it")],
    processor: Annotated[str, Opt(help="pt | sft | dpo")] = "pt",
    strategy: Annotated[str | None, Opt(help="chatml | alpaca | template")] = None,
    pack_size: Annotated[int, Opt(help="0 = no packing")] = 0,
    pad_value: Annotated[int | None, Opt()] = None,
    eos_token: Annotated[str | None, Opt()] = None,
    bos_token: Annotated[str | None, Opt()] = None,
    pad_token: Annotated[str | None, Opt()] = None,
    max_length: Annotated[int | None, Opt()] = None,
    overflow: Annotated[str, Opt(help="drop | truncate")] = "drop",
    on_error: Annotated[str, Opt(help="skip | raise")] = "skip",
    normalize: Annotated[bool, Opt(help="apply the default text normalizer")] = False,
    packing: Annotated[str, Opt(help="concat | bfd (whole samples, best fit)")] = "concat",
    output_format: Annotated[str, Opt(help="hdf5 | megatron | both")] = "hdf5",
    split_sentences: Annotated[bool, Opt(help="pt: one item per sentence")] = False,
    overwrite: Annotated[bool, Opt(help="replace outputs written with other settings")] = False,
    compression: Annotated[str | None, Opt(help="HDF5 compression: gzip | lzf")] = None,
    task_runner: Annotated[str, Opt(help="threads | processes | dask")] = "threads",
    max_workers: Annotated[int, Opt()] = 2,
    endpoint_url: Annotated[str | None, Opt(help="S3-compatible endpoint")] = None,
) -> None:
    """Tokenize JSONL chunks into HDF5."""
    from flows.params import CacheParams

    data = dict(
        input=input,
        output=output,
        processor=processor,
        strategy=strategy,
        pack_size=pack_size,
        pad_value=pad_value,
        tokenizer={"path": tokenizer, "eos_token": eos_token, "bos_token": bos_token, "pad_token": pad_token},
        max_length=max_length,
        overflow=overflow,
        on_error=on_error,
        normalizer=normalize,
        packing=packing,
        output_format=output_format,
        split_sentences=split_sentences,
        overwrite=overwrite,
        compression=compression,
        run={"task_runner": task_runner, "max_workers": max_workers, "storage": {"endpoint_url": endpoint_url}},
    )
    _print_summary(_run_flow("cache", _validated(CacheParams, data)))


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
    index: Annotated[int, Opt(help="which sample to decode")] = 0,
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

    config = write_sample(output, rows)
    typer.echo(f"sample written: {config}")
    if run_it:
        run(config, [])
        for folder, pattern in (("jsonl", "*.jsonl"), ("h5", "*.h5")):
            files = sorted((output / folder).glob(pattern))
            typer.echo(f"wrote {len(files)} file(s) in {output / folder}: {', '.join(f.name for f in files)}")


def main() -> None:  # pragma: no cover - console entry
    sys.exit(app())
