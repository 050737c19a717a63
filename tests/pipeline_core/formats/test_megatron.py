"""Megatron indexed dataset: our files must load in megatron-core's own IndexedDataset."""

from __future__ import annotations

import os
import struct
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline_core.formats.megatron import (
    IndexedReader,
    IndexedWriter,
    check_indexed,
    choose_dtype,
    merge_indexed,
)


def _megatron_indexed_dataset():
    """megatron-core is a test extra; CI must have it, a developer machine may skip."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Transformer Engine and Apex are not installed"
            from megatron.core.datasets.indexed_dataset import IndexedDataset
    except ImportError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"megatron-core must be installed in CI: {exc}")
        pytest.skip(f"megatron-core not installed: {exc}")
    return IndexedDataset


# A document is a list of sequences; a corpus is a list of documents.
token = st.integers(min_value=0, max_value=65_000)
sequence = st.lists(token, max_size=12)
document = st.lists(sequence, max_size=4)  # a document may hold no sequence
corpus = st.lists(document, min_size=1, max_size=8)


def _has_tokens(docs) -> bool:
    # megatron-core memory-maps the .bin and numpy cannot map an empty file, so a dataset
    # without a single token only round-trips through our own reader.
    return any(s for d in docs for s in d)


def _flat(seqs: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    flat = np.array([t for s in seqs for t in s], dtype=np.int64)
    return flat, np.array([len(s) for s in seqs], dtype=np.int64)


def _write(prefix, docs, dtype=np.uint16) -> None:
    with IndexedWriter(prefix, dtype) as writer:
        for doc in docs:
            writer.add_document(*_flat(doc))


def _expected_document_indices(docs) -> list[int]:
    return np.concatenate([[0], np.cumsum([len(d) for d in docs])]).tolist()


def _sequences(docs) -> list[list[int]]:
    return [s for d in docs for s in d]


def _read_megatron(prefix) -> tuple[list[list[int]], list[int], np.dtype]:
    dataset = _megatron_indexed_dataset()(str(prefix))
    seqs = [dataset[i].tolist() for i in range(len(dataset))]
    return seqs, dataset.document_indices.tolist(), np.dtype(dataset.index.dtype)


def test_choose_dtype_follows_megatron_threshold():
    assert choose_dtype(32_000) is np.uint16
    assert choose_dtype(65_499) is np.uint16
    assert choose_dtype(65_500) is np.int32
    assert choose_dtype(151_936) is np.int32
    with pytest.raises(ValueError, match="vocab_size"):
        choose_dtype(0)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(docs=corpus.filter(_has_tokens), dtype=st.sampled_from([np.uint16, np.int32]))
def test_megatron_reads_multi_sequence_documents(tmp_path_factory, docs, dtype):
    prefix = tmp_path_factory.mktemp("ds") / "out"
    _write(prefix, docs, dtype)
    seqs, document_indices, stored = _read_megatron(prefix)
    assert seqs == _sequences(docs)
    assert document_indices == _expected_document_indices(docs)
    assert stored == np.dtype(dtype)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.lists(sequence, max_size=6), min_size=1, max_size=4).filter(_has_tokens))
def test_batches_of_sequences_are_one_document_each(tmp_path_factory, batches):
    prefix = tmp_path_factory.mktemp("ds") / "out"
    with IndexedWriter(prefix, np.int32) as writer:
        for batch in batches:
            writer.add_sequences(*_flat(batch))
    expected = [s for batch in batches for s in batch]
    seqs, document_indices, _ = _read_megatron(prefix)
    assert seqs == expected
    assert document_indices == list(range(len(expected) + 1))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # megatron-core passes copy=False to numpy
def test_an_empty_document_is_written_as_megatron_cores_builder_writes_it(tmp_path):
    """A text whose sentences all came out empty is still a document (HDF5 keeps it): the same
    .bin and .idx bytes as megatron-core's IndexedDatasetBuilder given the same documents."""
    import torch

    _megatron_indexed_dataset()
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    docs = [[[1, 2], [3]], [], [[4, 5, 6]], []]
    _write(tmp_path / "ours", docs)
    builder = IndexedDatasetBuilder(str(tmp_path / "theirs.bin"), dtype=np.uint16)
    for doc in docs:
        builder.add_document(torch.tensor([t for s in doc for t in s], dtype=torch.int64), [len(s) for s in doc])
    builder.finalize(str(tmp_path / "theirs.idx"))
    for ext in (".bin", ".idx"):
        assert (tmp_path / f"ours{ext}").read_bytes() == (tmp_path / f"theirs{ext}").read_bytes()
    assert _read_megatron(tmp_path / "ours")[1] == [0, 2, 2, 3, 3]


def test_open_document_spans_batches_until_end_document(tmp_path):
    with IndexedWriter(tmp_path / "x", np.uint16, document_per_sequence=False) as writer:
        writer.add_sequences(np.array([1, 2, 3]), np.array([2, 1]))
        writer.add_sequences(np.array([4]), np.array([1]))
        writer.end_document()
        writer.end_document()  # nothing open: no empty document
        writer.add_sequences(np.array([5, 6]), np.array([1, 1]))  # closed by finalize
    reader = check_indexed(tmp_path / "x")
    assert reader.document_indices.tolist() == [0, 3, 5]
    assert [s.tolist() for s in reader.document(0)] == [[1, 2], [3], [4]]


def test_index_header_layout(tmp_path):
    _write(tmp_path / "x", [[[7, 8, 9]], [[1], [2, 3]]], np.int32)
    raw = (tmp_path / "x.idx").read_bytes()
    magic, version, code, sequences, doc_entries = struct.unpack("<9sQBQQ", raw[:34])
    assert (magic, version, code, sequences, doc_entries) == (b"MMIDIDX\x00\x00", 1, 4, 3, 3)
    body = raw[34:]
    assert np.frombuffer(body[:12], "<i4").tolist() == [3, 1, 2]
    assert np.frombuffer(body[12:36], "<i8").tolist() == [0, 12, 16]
    assert np.frombuffer(body[36:], "<i8").tolist() == [0, 1, 3]
    assert np.fromfile(tmp_path / "x.bin", "<i4").tolist() == [7, 8, 9, 1, 2, 3]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    chunks=st.lists(corpus, min_size=1, max_size=4).filter(lambda c: any(map(_has_tokens, c))),
    block_bytes=st.sampled_from([8, 24, 1 << 20]),
)
def test_merge_equals_concatenation(tmp_path_factory, chunks, block_bytes):
    root = tmp_path_factory.mktemp("merge")
    prefixes = [root / f"chunk{i}" for i in range(len(chunks))]
    for prefix, docs in zip(prefixes, chunks, strict=True):
        _write(prefix, docs)
    merge_indexed(prefixes, root / "all", block_bytes=block_bytes)
    joined = [d for docs in chunks for d in docs]
    seqs, document_indices, _ = _read_megatron(root / "all")
    assert seqs == _sequences(joined)
    assert document_indices == _expected_document_indices(joined)
    check_indexed(root / "all")


def test_merge_rejects_dtype_mismatch_naming_the_file(tmp_path):
    _write(tmp_path / "a", [[[1, 2]]], np.uint16)
    _write(tmp_path / "b", [[[3]]], np.int32)
    with pytest.raises(ValueError, match=r"b\.idx stores int32"):
        merge_indexed([tmp_path / "a", tmp_path / "b"], tmp_path / "out")
    assert not (tmp_path / "out.idx").exists()
    assert not (tmp_path / "out.bin.tmp").exists()


def test_merge_refuses_to_overwrite_an_input(tmp_path):
    _write(tmp_path / "a", [[[1]]])
    with pytest.raises(ValueError, match="also an input"):
        merge_indexed([tmp_path / "a"], tmp_path / "a")


def test_crash_before_finalize_leaves_no_index(tmp_path):
    prefix = tmp_path / "x"
    writer = IndexedWriter(prefix, np.uint16)
    writer.add_sequences(np.arange(5), np.array([5]))
    writer._bin.flush()  # a crash now: the process dies without finalize()
    assert sorted(os.listdir(tmp_path)) == ["x.bin.tmp"]
    assert not _megatron_indexed_dataset().exists(str(prefix))
    writer.abort()
    assert os.listdir(tmp_path) == []


def test_exception_in_with_block_discards_everything(tmp_path):
    with pytest.raises(RuntimeError), IndexedWriter(tmp_path / "x", np.uint16) as writer:
        writer.add_sequences(np.arange(3), np.array([3]))
        raise RuntimeError("tokenizer died")
    assert os.listdir(tmp_path) == []


def test_rewrite_keeps_old_dataset_until_finalize(tmp_path):
    _write(tmp_path / "x", [[[1, 2]]])
    writer = IndexedWriter(tmp_path / "x", np.uint16)
    writer.add_sequences(np.array([9, 9, 9]), np.array([3]))
    assert IndexedReader(tmp_path / "x")[0].tolist() == [1, 2]
    writer.finalize()
    assert IndexedReader(tmp_path / "x")[0].tolist() == [9, 9, 9]
    assert sorted(os.listdir(tmp_path)) == ["x.bin", "x.idx"]


def test_token_ids_outside_dtype_are_rejected(tmp_path):
    with IndexedWriter(tmp_path / "x", np.uint16) as writer, pytest.raises(ValueError, match="choose_dtype"):
        writer.add_sequences(np.array([1, 70_000]), np.array([2]))


def test_lengths_must_cover_the_tokens(tmp_path):
    with IndexedWriter(tmp_path / "x", np.uint16) as writer, pytest.raises(ValueError, match="add up to 2"):
        writer.add_sequences(np.arange(3), np.array([1, 1]))


def test_unsupported_dtype_lists_the_choices(tmp_path):
    with pytest.raises(ValueError, match="uint16"):
        IndexedWriter(tmp_path / "x", np.uint32)


def test_reader_rejects_foreign_and_truncated_files(tmp_path):
    _write(tmp_path / "x", [[[1, 2, 3]]])
    (tmp_path / "x.bin").write_bytes(b"\x01\x00")
    with pytest.raises(ValueError, match="bin has 2 bytes"):
        check_indexed(tmp_path / "x")
    (tmp_path / "x.idx").write_bytes(b"NOTMEGATRON" * 4)
    with pytest.raises(ValueError, match="bad magic"):
        IndexedReader(tmp_path / "x")


def test_empty_dataset_round_trips_in_our_reader(tmp_path):
    IndexedWriter(tmp_path / "x", np.uint16).finalize()
    reader = check_indexed(tmp_path / "x")
    assert len(reader) == 0 and reader.document_indices.tolist() == [0]
