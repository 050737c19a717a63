"""Untrusted names and files: nothing escapes the output folder, nothing outside an HDF5 is read,
and no dataset loading script runs."""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest
from pydantic import ValidationError

from flows.params import ExportParams
from pipeline_core.formats.h5 import COMPLETE_ATTR, load_h5, open_h5, read_attrs
from pipeline_core.formats.h5_writer import save_h5
from pipeline_core.loader.dataset import H5Dataset
from pipeline_core.processors import ProcessorFactory
from pipeline_core.sources import open_source
from pipeline_core.stages.cache import cache_file
from pipeline_core.stages.export import export_chunk, export_dataset
from pipeline_core.stages.outputs import output_names

UNSAFE_PREFIXES = ["../evil", "a/../../evil", "..\\evil", "/abs/evil", "evil\x00", "s3://bucket/evil"]
ROWS = [{"text": f"row {i}"} for i in range(10)]


def files_under(root) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, n), root) for d, _, names in os.walk(root) for n in names)


@pytest.mark.parametrize("prefix", UNSAFE_PREFIXES)
def test_an_export_prefix_that_escapes_is_refused_before_any_write(tmp_path, prefix):
    out = tmp_path / "nest" / "out"
    with pytest.raises(ValueError, match="unsafe output name"):
        export_dataset(ROWS, str(out), prefix, chunk_size=4)
    with pytest.raises(ValueError, match="unsafe output name"):
        export_chunk(ROWS, 0, str(out), prefix, chunk_size=4)
    assert files_under(tmp_path) == []


@pytest.mark.parametrize("prefix", UNSAFE_PREFIXES)
def test_flow_parameters_refuse_an_escaping_prefix(prefix):
    with pytest.raises(ValidationError, match="prefix"):
        ExportParams(source="rows.jsonl", output="out", prefix=prefix)


def test_an_input_whose_name_escapes_is_refused_before_any_write(tmp_path, gpt2):
    inputs = tmp_path / "in"
    inputs.mkdir()
    evil = inputs / "..\\..\\evil.jsonl"  # a legal file name on Linux, a path on Windows
    evil.write_text('{"text": "hello"}\n')
    with pytest.raises(ValueError, match="unsafe output name"):
        output_names(str(evil), str(tmp_path / "out"))
    with pytest.raises(ValueError, match="unsafe output name"):
        cache_file(str(evil), str(tmp_path / "out"), ProcessorFactory.create("pt", gpt2))
    assert files_under(tmp_path) == ["in/..\\..\\evil.jsonl"]


def test_save_h5_refuses_a_file_name_that_escapes(tmp_path):
    with pytest.raises(ValueError, match="unsafe output name"):
        save_h5(str(tmp_path / "out"), "../escaped.h5", {"x": np.zeros((2, 2), np.int32)})
    assert not (tmp_path / "escaped.h5").exists()


# ---- HDF5 files that reach outside themselves ---------------------------------------------------


@pytest.fixture()
def secret(tmp_path):
    """Data outside the HDF5 file that an attacker's file would like us to read."""
    raw = tmp_path / "secret.bin"
    raw.write_bytes(np.arange(16, dtype=np.int32).tobytes())
    with h5py.File(tmp_path / "secret.h5", "w") as f:
        f["sequence"] = np.arange(16, dtype=np.int32)
    return tmp_path


def h5pipe_shaped(path, build) -> str:
    """An HDF5 that looks like a complete h5pipe output; ``build(f)`` adds the malicious part."""
    with h5py.File(path, "w") as f:
        build(f)
        f["sequence_offsets"] = np.array([0, 16], np.int64)
        f.attrs["keys"] = '["sequence"]'
        f.attrs[COMPLETE_ATTR] = True
    return str(path)


def external_link(secret):
    return lambda f: f.__setitem__("sequence", h5py.ExternalLink(str(secret / "secret.h5"), "/sequence"))


def nested_external_link(secret):
    return lambda f: f.create_group("g").__setitem__("x", h5py.ExternalLink(str(secret / "secret.h5"), "/sequence"))


def external_dataset(secret):
    raw = str(secret / "secret.bin")
    return lambda f: f.create_dataset("sequence", shape=(16,), dtype=np.int32, external=[(raw, 0, 64)])


def virtual_dataset(secret):
    def build(f):
        layout = h5py.VirtualLayout(shape=(16,), dtype=np.int32)
        layout[:] = h5py.VirtualSource(str(secret / "secret.h5"), "sequence", shape=(16,))
        f.create_virtual_dataset("sequence", layout)

    return build


def soft_link(secret):
    def build(f):
        f["real"] = np.arange(16, dtype=np.int32)
        f["sequence"] = h5py.SoftLink("/real")

    return build


MALICIOUS = {
    "external link": (external_link, "ExternalLink"),
    "external link in a group": (nested_external_link, "'/g/x' is a ExternalLink"),
    "external dataset": (external_dataset, "external dataset"),
    "virtual dataset": (virtual_dataset, "virtual dataset"),
    "soft link": (soft_link, "SoftLink"),
}


@pytest.mark.parametrize("kind", MALICIOUS)
def test_hdf5_reaching_outside_itself_is_refused_when_reading(secret, tmp_path, kind):
    build, what = MALICIOUS[kind]
    path = h5pipe_shaped(tmp_path / "evil.h5", build(secret))
    for read in (open_h5, load_h5, read_attrs):
        with pytest.raises(ValueError, match=f"{what}.*self-contained"):
            read(path)


@pytest.mark.parametrize("kind", ["external link", "external dataset", "virtual dataset"])
def test_h5dataset_refuses_hdf5_reaching_outside_itself(secret, tmp_path, kind):
    (tmp_path / "data").mkdir()
    h5pipe_shaped(tmp_path / "data" / "evil.h5", MALICIOUS[kind][0](secret))
    with pytest.raises(ValueError, match="self-contained"):
        H5Dataset(tmp_path / "data")[0]


# ---- no dataset loading script is run -----------------------------------------------------------

SCRIPT = """
import pathlib
pathlib.Path({marker!r}).write_text("the loading script ran")
import datasets


class Evil(datasets.GeneratorBasedBuilder):
    def _info(self):
        return datasets.DatasetInfo(features=datasets.Features({{"text": datasets.Value("string")}}))

    def _split_generators(self, dl_manager):
        return [datasets.SplitGenerator(name="train")]

    def _generate_examples(self):
        yield 0, {{"text": "from the script"}}
"""


def dataset_with_script(root, marker, card: bool):
    folder = root / "evil_ds"
    folder.mkdir()
    (folder / "evil_ds.py").write_text(SCRIPT.format(marker=str(marker)))
    (folder / "train.jsonl").write_text('{"text": "from the data file"}\n')
    if card:
        (folder / "README.md").write_text("---\nlicense: mit\n---\n# a dataset with a loading script\n")
    return folder


@pytest.mark.parametrize("target", ["repo folder", "plain folder", "script file"])
def test_a_dataset_loading_script_is_never_run(tmp_path, target, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    marker = tmp_path / "MARKER"
    folder = dataset_with_script(tmp_path, marker, card=target == "repo folder")
    source = folder / "evil_ds.py" if target == "script file" else folder
    try:
        rows = list(open_source(str(source)).iter_rows(0, 10))
    except Exception:  # noqa: BLE001 - refusing the folder is fine too; running the script is not
        rows = []
    assert not marker.exists(), "the dataset's loading script was executed"
    assert all(r.get("text") != "from the script" for r in rows)
