"""What the config alone decides, checked before Prefect starts.

The CLI calls ``check_before_run`` before it starts a flow: an unknown strategy, a processor and
packing that cannot go together, packing without a pad value, a missing tokenizer, a bad
``process_func`` or dataset_info entry, and the refusal of other settings into a written folder
(or of a rerun that would leave an earlier run's splits there, flows/layouts.py) all fail here,
in seconds, as one message (exit 2), instead of inside a task after Prefect started. The flows
check the same things again (a deployment run does not come through here).

Raises ``ConfigError`` (or ``FileNotFoundError`` for a missing tokenizer or source file).
"""

from __future__ import annotations

from flows.params import CacheParams, ExportParams, PipelineParams


def check_before_run(flow_name: str, params) -> None:
    if isinstance(params, PipelineParams):
        check_export(params.export)
        check_cache(params.cache, inputs=False)  # its input is what the export will write
    elif isinstance(params, ExportParams):
        check_export(params)
    elif isinstance(params, CacheParams):
        check_cache(params)


def check_cache(params: CacheParams, inputs: bool = True) -> None:
    """Tokenizer, processor, options, the packer they make, the settings refusal, and (``inputs``)
    that the inputs exist and have distinct output names."""
    from flows.cache_flow import chunk_inputs, make_job
    from flows.layouts import stale_parts
    from pipeline_core.commit.manifest import open_for_run
    from pipeline_core.processors.build import ProcessorSpec, TokenizerSpec, build_processor, load_tokenizer
    from pipeline_core.stages.cache import CacheOptions, make_packer
    from tasks.keys import digest

    job = make_job(params)
    processor = build_processor(ProcessorSpec(**job.processor), load_tokenizer(TokenizerSpec(**job.tokenizer)))
    make_packer(processor, CacheOptions(**job.cache_options()))
    storage = params.run.storage.to_fsspec()
    if inputs and params.input is not None:
        chunk_inputs(params.input, storage)
    open_for_run(params.output, "cache", digest(job.settings()), params.overwrite, storage)
    stale_parts(params, storage)  # an earlier run's splits (or unsplit outputs) this run does not write


def check_export(params: ExportParams) -> None:
    """The process_func imports, a dataset_info source parses, and the settings refusal."""
    from flows.export_flow import export_job
    from pipeline_core.commit.manifest import open_for_run
    from tasks.keys import digest

    storage = params.run.storage.to_fsspec()
    job = export_job(params)
    if _is_dataset_info(params, storage):
        from pipeline_core.sources.open import selected_entries

        selected_entries(params.source, storage or None, params.datasets, params.dataset_dir)
    open_for_run(params.output, "export", digest(job.settings()), params.overwrite, storage)


def _is_dataset_info(params: ExportParams, storage: dict) -> bool:
    """Whether the export reads a dataset_info (by the flag, else by content, as ``open_source``)."""
    from pipeline_core.sources.detect import is_dataset_info
    from pipeline_core.storage.fs import url_to_fs

    if params.dataset_info is not None or not isinstance(params.source, str):
        return bool(params.dataset_info)
    fs, path = url_to_fs(params.source, storage or None)
    return fs.isfile(path) and is_dataset_info(path, fs)
