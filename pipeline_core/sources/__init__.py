"""Sources: where the export stage's rows come from.

    source = open_source("mix.yaml", seed=0)            # or a Dataset, a file, folder, URL, hub id
    source.num_rows, source.fingerprint, source.summary()
    for record in source.records(0, 100): ...           # Record(dataset, index, row)

See ``open`` for what is accepted, ``dataset_info`` for the YAML/JSON fields (LLaMA-Factory's,
parsed lazily: only selected entries), ``mixing`` for how several datasets are counted, sampled
and interleaved, and ``limit`` for a trial run's first rows. ``sample`` writes the small corpus the
project ships for ``make run``.

May import: ``errors``, ``storage``, ``converters``.
"""

from pipeline_core.sources.base import DatasetCounts, Record, Source
from pipeline_core.sources.convert import (
    RowFailure,
    SourceRowError,
    convert_row,
    converter_label,
    resolve_converter,
)
from pipeline_core.sources.dataset_info import (
    DatasetEntry,
    DatasetInfo,
    load_dataset_info,
    parse_dataset_info,
    read_dataset_info,
)
from pipeline_core.sources.detect import Location, locate
from pipeline_core.sources.formats import BUILDERS
from pipeline_core.sources.mixing import MIX_BLOCK, Interleave, Selection, apportion, mix_counts
from pipeline_core.sources.mixture import MixtureSource
from pipeline_core.sources.open import SourceOptions, open_source
from pipeline_core.sources.single import DatasetSource

__all__ = [
    "BUILDERS",
    "MIX_BLOCK",
    "DatasetCounts",
    "DatasetEntry",
    "DatasetInfo",
    "DatasetSource",
    "Interleave",
    "Location",
    "MixtureSource",
    "Record",
    "RowFailure",
    "Selection",
    "Source",
    "SourceOptions",
    "SourceRowError",
    "apportion",
    "convert_row",
    "converter_label",
    "load_dataset_info",
    "locate",
    "mix_counts",
    "open_source",
    "parse_dataset_info",
    "read_dataset_info",
    "resolve_converter",
]
