"""``h5pipe inspect``: what a file holds, in words a person can check."""

from __future__ import annotations

import json

from pipeline_core.formats.h5 import OFFSETS_SUFFIX, data_keys, decode_attr, narrowed_keys, open_h5
from pipeline_core.formats.positions import derived_keys
from pipeline_core.storage.fs import join_url, url_to_fs

RUN_RECORD = "h5pipe-run.json"


def tokenizer_path_from_run_record(file_url: str) -> str | None:
    folder = file_url.rsplit("/", 1)[0] if "/" in file_url else "."
    fs, path = url_to_fs(join_url(folder, RUN_RECORD))
    if not fs.exists(path):
        return None
    with fs.open(path, "r") as f:
        config = json.load(f).get("config", {})
    return (config.get("tokenizer") or config.get("cache", {}).get("tokenizer") or {}).get("path")


def sample_of(handle, key: str, index: int):
    if key + OFFSETS_SUFFIX in handle:
        offsets = handle[key + OFFSETS_SUFFIX]
        return handle[key][offsets[index] : offsets[index + 1]]
    return handle[key][index]


def _count(handle, key: str) -> int:
    if key + OFFSETS_SUFFIX in handle:
        return len(handle[key + OFFSETS_SUFFIX]) - 1
    return handle[key].shape[0]


def describe_file(url: str, tokenizer_path: str | None = None, index: int = 0) -> str:
    lines = [f"file: {url}"]
    with open_h5(url) as f:
        attrs = {k: decode_attr(v) for k, v in sorted(f.attrs.items())}
        lines += [f"  {k}: {v}" for k, v in attrs.items()]
        lines.append("datasets:")
        narrowed = narrowed_keys(f)
        for key in data_keys(f):
            read_as = f" (read as {narrowed[key]})" if key in narrowed else ""
            lines.append(f"  {key}: {_count(f, key)} samples, shape {f[key].shape}, dtype {f[key].dtype}{read_as}")
        for key in derived_keys(f):
            lines.append(f"  {key}: not stored, derived from cu_seqlens on read (load_h5 int32, H5Dataset int64)")
        main = next((k for k in ("sequence", "chosen") if k in f), None)
        path = tokenizer_path or tokenizer_path_from_run_record(url)
        count = _count(f, main) if main else 0
        if not main and attrs.get("samples_written") == 0 or main and not 0 <= index < count:
            lines.append(f"(no sample {index}: the file holds {count})" if count else "(no samples: nothing to decode)")
        elif main and path:
            from pipeline_core.tokenizer.auto import AutoTokenizer

            ids = sample_of(f, main, index)
            lines += [
                f"sample {index} ({main}, {len(ids)} tokens):",
                AutoTokenizer.from_file(path).decode(ids.tolist()),
            ]
        elif main:
            lines.append("(pass --tokenizer to decode a sample)")
    return "\n".join(lines)
