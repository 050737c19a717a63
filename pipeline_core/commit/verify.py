"""``verify``: check an output folder against its manifest and every HDF5 file against its invariants.

A file is good only when it is listed in the manifest with the size and sha256 it has now (the
one reuse rule, ``standing.still_stands``, by sha256: what verify reports bad a rerun rebuilds), and
(for HDF5) it is complete and self-consistent: every key the attributes name is present, offsets
start at 0, never decrease and end at the data length, counts equal the attributes, and every row
is accounted for (``row_problems``), with one line per skipped row and per dropped sample in its
quarantine file ``{stem}.errors.jsonl`` (a writer killed between the two publishes leaves them apart).
A packed file's contents follow the packers' rules too (``formats.pack_check``: boundaries, ids,
padding, position ids). A Megatron pair (``{prefix}.idx`` + ``.bin``) is whole and agrees with
itself (``megatron_problems``): a valid header, an index as long as it promises, documents from 0
to the sequence count, sequences back to back filling the .bin exactly. Megatron's reader checks
none of that when it opens a pair: a wrong pointer reads other tokens without a word.

Temporary files (see ``sweep``) are reported when their writer is gone; a live writer's are not
the folder's problem. Damaged HDF5 files raise all sorts of errors inside h5py: each one is a
reported problem, never a crash of verify.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pipeline_core.commit.manifest import MANIFEST, ManifestError, load_manifest
from pipeline_core.commit.standing import Published, still_stands
from pipeline_core.commit.sweep import is_temp_name, stale_temps
from pipeline_core.formats.h5 import COMPLETE_ATTR, OFFSETS_SUFFIX, decode_attr, open_h5
from pipeline_core.formats.megatron.format import DOCUMENT_DTYPE, LENGTH_DTYPE, POINTER_DTYPE, IndexHeader
from pipeline_core.formats.megatron.reader import index_problems
from pipeline_core.formats.pack_check import packed_problems
from pipeline_core.formats.positions import POSITION_IDS, STORAGE_ATTR
from pipeline_core.storage.fs import fetch_files, join_url, url_to_fs

OUTPUT_SUFFIXES = (".h5", ".jsonl", ".bin", ".idx")  # outputs and parts (quarantine files, Megatron pairs)


@dataclass
class VerifyReport:
    folder: str
    checked: int = 0
    problems: dict[str, list[str]] = field(default_factory=dict)

    def add(self, name: str, problem: str) -> None:
        self.problems.setdefault(name, []).append(problem)

    @property
    def ok(self) -> bool:
        return not self.problems

    def lines(self) -> list[str]:
        head = f"{self.folder}: {self.checked} file(s) checked, {len(self.problems)} bad"
        return [head] + [f"  {name}: {'; '.join(why)}" for name, why in sorted(self.problems.items())]


def h5_problems(url: str, storage_options: dict | None = None) -> list[str]:
    """What is wrong with one h5pipe HDF5 file (empty when nothing is)."""
    try:
        with open_h5(url, storage_options) as f:
            return _structure_problems(f) or _quarantine_problems(url, f.attrs, storage_options)
    except Exception as e:  # noqa: BLE001 - a damaged file fails anywhere in h5py, with any error type
        return [f"unreadable: {type(e).__name__}: {e}"]


def megatron_problems(idx_url: str, storage_options: dict | None = None) -> list[str]:
    """What is wrong with one Megatron pair, given its ``.idx`` (empty when nothing is). The index is
    read whole (12 bytes a sequence, 8 a document), the .bin only sized."""
    bin_url = idx_url[: -len(".idx")] + ".bin"
    name = bin_url.rsplit("/", 1)[-1]
    try:
        fs, idx_path = url_to_fs(idx_url, storage_options)
        bin_path = url_to_fs(bin_url, storage_options)[1]
        if not fs.exists(bin_path):
            return [f"no {name} beside it (a partial publish)"]
        raw = fs.cat_file(idx_path)
        header = IndexHeader.parse(raw, idx_url.rsplit("/", 1)[-1])
        if len(raw) < header.index_size:
            return [f"index has {len(raw)} bytes but its header promises {header.index_size} (truncated)"]
        count, docs = header.sequence_count, header.document_index_count
        lengths = np.frombuffer(raw, LENGTH_DTYPE, count, header.lengths_offset)
        pointers = np.frombuffer(raw, POINTER_DTYPE, count, header.pointers_offset)
        documents = np.frombuffer(raw, DOCUMENT_DTYPE, docs, header.documents_offset)
        return index_problems(header, lengths, pointers, documents, fs.size(bin_path))
    except Exception as e:  # noqa: BLE001 - a damaged index fails in the parse or in numpy: reported
        return [f"unreadable: {type(e).__name__}: {e}"]


def _quarantine_problems(url: str, attrs, storage_options: dict | None) -> list[str]:
    """``{stem}.errors.jsonl`` holds one line per skipped row and one per sample dropped from a
    written row (``samples_dropped``, absent in files written before it: 0); no file when none."""
    skipped, dropped = int(attrs.get("rows_skipped") or 0), int(attrs.get("samples_dropped") or 0)
    errors_url = url[: -len(".h5")] + ".errors.jsonl"
    fs, path = url_to_fs(errors_url, storage_options)
    lines = 0
    if fs.exists(path):
        with fs.open(path, "rb") as f:
            lines = sum(1 for line in f if line.strip())
    if lines != skipped + dropped:
        counted = f"{skipped} rows skipped" + (f" and {dropped} samples dropped" if dropped else "")
        return [f"{counted} but {lines} in {errors_url.rsplit('/', 1)[-1]} (a partial publish)"]
    return []


def _structure_problems(f) -> list[str]:
    attrs = {k: decode_attr(v) for k, v in f.attrs.items()}
    if not attrs.get(COMPLETE_ATTR):
        return ["not complete (the writer never finished it)"]
    problems = []
    keys = attrs.get("keys") or []
    missing = [k for k in keys if k not in f]
    if missing:
        problems.append(f"missing datasets {missing}")
    problems += _count_problems(f, attrs, [k for k in keys if k in f])
    problems += _position_problems(f, attrs)
    problems += row_problems(attrs)
    return problems or packed_problems(f, attrs)  # the packs' contents, once their shapes agree


def row_problems(attrs: dict) -> list[str]:
    """Every row read is written or skipped: ``rows_read = rows_written + rows_skipped``, and a written
    row kept at least one sample (``samples_written >= rows_written``; more with ``rewritten="per_turn"``).

    A file written before ``rows_written`` existed kept one sample per written row, so it holds
    ``rows_read = samples_written + rows_skipped`` (one whose rows made several samples does not:
    it is reported, and a rerun rebuilds it with the counts above)."""
    read, skipped, samples = attrs.get("rows_read"), attrs.get("rows_skipped", 0), attrs.get("samples_written", 0)
    if "rows_written" not in attrs:
        return [] if read == samples + skipped else ["rows_read != samples_written + rows_skipped"]
    written = attrs["rows_written"]
    problems = [] if read == written + skipped else ["rows_read != rows_written + rows_skipped"]
    if samples < written:
        problems.append(f"{samples} samples written from {written} written rows (each keeps at least one)")
    return problems


def _position_problems(f, attrs: dict) -> list[str]:
    """A packed HDF5 file stores ``position_ids`` or derives them from ``cu_seqlens``
    (``position_ids_storage = "derived"``, see formats.positions): it must hold what it needs."""
    if attrs.get("pack_size", 0) <= 0 or "cu_seqlens" not in (attrs.get("keys") or []):
        return []
    if attrs.get(STORAGE_ATTR) == "derived":
        return ["position_ids stored in a file that derives them"] if POSITION_IDS in f else []
    return [] if POSITION_IDS in f else ["no position_ids and no position_ids_storage='derived'"]


def expected_rows(attrs: dict) -> int | None:
    """Rows every key must have: packs when packed, sentences when split, else samples."""
    if attrs.get("pack_size", 0) > 0:
        return attrs.get("packs")
    if attrs.get("split_sentences"):
        return attrs.get("sentences_written")
    return attrs.get("samples_written")


def _count_problems(f, attrs: dict, keys: list[str]) -> list[str]:
    problems = []
    expected = expected_rows(attrs)
    for key in keys:
        if f[key].ndim == 2:
            rows = f[key].shape[0]
        elif key + OFFSETS_SUFFIX not in f:
            problems.append(f"{key}: no {key}{OFFSETS_SUFFIX}")
            continue
        else:
            rows, problem = _offsets_check(f, key)
            problems += problem
        if expected is not None and rows != expected:
            problems.append(f"{key}: {rows} rows, attributes say {expected}")
    return problems


def _offsets_check(f, key: str) -> tuple[int, list[str]]:
    offsets = f[key + OFFSETS_SUFFIX][...]
    n = len(f[key])
    if len(offsets) == 0 or offsets[0] != 0 or np.any(np.diff(offsets) < 0) or offsets[-1] != n:
        return max(len(offsets) - 1, 0), [f"{key}{OFFSETS_SUFFIX}: not monotone from 0 to the data length {n}"]
    return len(offsets) - 1, []


def verify_output(folder: str, storage_options: dict | None = None, how: str = "sha256") -> VerifyReport:
    report = VerifyReport(folder)
    fs, path = url_to_fs(folder, storage_options)
    if not fs.isdir(path):
        report.add(folder, "no such folder; give the output folder of an export or cache run")
        return report
    try:
        manifest = load_manifest(folder, storage_options)
    except ManifestError as e:
        report.add(MANIFEST, str(e))
        return report
    names = [u.rsplit("/", 1)[-1] for u in fetch_files(folder, None, storage_options)]
    outputs = [n for n in names if n.endswith(OUTPUT_SUFFIXES) and not is_temp_name(n)]
    if manifest is None:
        report.add(MANIFEST, "missing: the run never committed this folder")
    elif not manifest.complete:
        report.add(MANIFEST, "not committed: a run is writing this folder or was interrupted; rerun the stage into it")
    elif manifest.dropping:
        report.add(MANIFEST, f"a run was interrupted while removing {len(manifest.dropping)} file(s); rerun the stage")
    for temp in stale_temps(folder, storage_options):
        report.add(temp.name, "temporary file of a writer that is gone; rerun the stage (it sweeps them) or delete it")
    for name in outputs:
        report.checked += 1
        if manifest is not None and name not in manifest.entries:
            report.add(name, "not in the manifest (partial or stray)")
        if name.endswith(".h5"):
            for problem in h5_problems(join_url(folder, name), storage_options):
                report.add(name, problem)
        elif name.endswith(".idx"):
            for problem in megatron_problems(join_url(folder, name), storage_options):
                report.add(name, problem)
        elif name.endswith(".bin") and name[: -len(".bin")] + ".idx" not in names:
            report.add(name, "no .idx beside it (a partial publish); rerun the stage")
    for name, entry in (manifest.entries if manifest else {}).items():
        if name not in names:
            report.add(name, "listed in the manifest but missing")
        elif not still_stands([Published(join_url(folder, name), entry.sha256, entry.size)], how, storage_options):
            report.add(name, "size or sha256 differs from the manifest")
    return report
