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


def tokenizer_of_file(path: str, attrs: dict):
    """(the tokenizer at ``path`` with the roles the file records, None) when its fingerprint is the
    file's ``tokenizer_fingerprint``, else (None, why not): ids decoded with another tokenizer read
    as plausible text that is not what the file holds."""
    from pipeline_core.tokenizer.auto import ROLES, AutoTokenizer

    plain = AutoTokenizer.from_file(path)
    roles = {f"{r}_token": _token_of(plain, attrs.get(f"{r}_id", -1)) for r in ROLES}
    tokenizer = AutoTokenizer.from_file(path, **roles)  # a None role is unset (the file has none)
    recorded = attrs.get("tokenizer_fingerprint")
    if recorded is None or tokenizer.fingerprint == recorded:
        return tokenizer, None
    return None, (
        f"the tokenizer at {path} is not the one this file was written with (fingerprint "
        f"{tokenizer.fingerprint[:12]} != {str(recorded)[:12]}, vocab {tokenizer.vocab_size} against "
        f"{attrs.get('vocab_size')}): pass --tokenizer with the tokenizer the run used"
    )


def _token_of(tokenizer, token_id) -> str | None:
    """The token a role id names, None for -1 (no such role) or an id the tokenizer lacks."""
    token_id = int(token_id)
    if token_id < 0:
        return None
    return tokenizer.id_to_token(token_id)


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
        unit = "packs" if attrs.get("pack_size") else "samples"  # a packed file's rows are packs
        for key in data_keys(f):
            read_as = f" (read as {narrowed[key]})" if key in narrowed else ""
            lines.append(f"  {key}: {_count(f, key)} {unit}, shape {f[key].shape}, dtype {f[key].dtype}{read_as}")
        for key in derived_keys(f):
            lines.append(f"  {key}: not stored, derived from cu_seqlens on read (load_h5 int32, H5Dataset int64)")
        main = next((k for k in ("sequence", "chosen") if k in f), None)
        path = tokenizer_path or tokenizer_path_from_run_record(url)
        count = _count(f, main) if main else 0
        item = unit[:-1]
        if not main and attrs.get("samples_written") == 0 or main and not 0 <= index < count:
            lines.append(f"(no {item} {index}: the file holds {count})" if count else "(no samples: nothing to decode)")
        elif main and path:
            tokenizer, problem = tokenizer_of_file(path, attrs)
            ids = sample_of(f, main, index)
            if problem:
                lines.append(f"({item} {index} not decoded: {problem})")
            else:
                lines += [f"{item} {index} ({main}, {len(ids)} tokens):", tokenizer.decode(ids.tolist())]
        elif main:
            lines.append("(pass --tokenizer to decode a sample)")
    return "\n".join(lines)
