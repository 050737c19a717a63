"""cache_files: several inputs through one read-ahead thread and one encode feeder give the files
cache_file gives one input at a time; a failing input leaves nothing of its own and stops the
stream after the inputs before it are published; no thread outlives it."""

import hashlib
import json
import threading
from pathlib import Path

import h5py
import numpy as np
import pytest

from pipeline_core import BadRowError, ProcessorFactory, load_h5
from pipeline_core.stages import cache as cache_module
from pipeline_core.stages.cache import CacheOptions, cache_file, cache_files, cache_jsonl, local_sizes, suits_one_thread
from pipeline_core.stages.input_stream import CacheInput

STAGE_THREADS = ("h5pipe-read-ahead", "h5pipe-encode", "h5pipe-hash", "h5pipe-h5-write")


def stage_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(STAGE_THREADS)]


def write_chunk(path, texts: list[str]) -> str:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    return str(path)


@pytest.fixture
def chunks(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    return [
        write_chunk(
            folder / f"train_chunk_{i}.jsonl", [f"chunk {i} document {j}: " + "word " * (j % 40) for j in range(60)]
        )
        for i in range(4)
    ]


def same_file(a: str, b: str) -> None:
    with h5py.File(a) as x, h5py.File(b) as y:
        assert sorted(x) == sorted(y)
        for key in x:
            assert x[key].dtype == y[key].dtype and np.array_equal(x[key][()], y[key][()]), key
        assert {k: str(v) for k, v in x.attrs.items()} == {k: str(v) for k, v in y.attrs.items()}


@pytest.mark.parametrize("in_one_thread", [False, True])
@pytest.mark.parametrize("options", [{}, {"pack_size": 64, "pad_value": 0}, {"batch_size": 7, "batch_bytes": 500}])
def test_a_stream_of_inputs_writes_what_one_input_at_a_time_writes(chunks, gpt2, tmp_path, options, in_one_thread):
    processor = ProcessorFactory.create("pt", gpt2)
    stream = cache_files(
        map(CacheInput, chunks), str(tmp_path / "stream"), processor, CacheOptions(**options), None, in_one_thread
    )
    streamed = list(stream)
    one_by_one = [cache_file(c, str(tmp_path / "one"), processor, CacheOptions(**options)) for c in chunks]
    assert [s.input_url for s in streamed] == chunks
    for s, o, chunk in zip(streamed, one_by_one, chunks, strict=True):
        assert s.source_sha256 == o.source_sha256 == hashlib.sha256(Path(chunk).read_bytes()).hexdigest()
        assert s.samples_written == o.samples_written == 60
        same_file(s.output_url, o.output_url)
    eos = gpt2.eos_token_id
    first = load_h5(streamed[0].output_url)["sequence"] if not options.get("pack_size") else None
    if first is not None:  # independently: the tokenizer's own ids plus eos, document by document
        texts = [json.loads(line)["text"] for line in Path(chunks[0]).read_text(encoding="utf-8").splitlines()]
        assert [first[i].tolist() for i in range(len(first))] == [gpt2.encode(t) + [eos] for t in texts]
    assert not stage_threads()


@pytest.mark.parametrize("in_one_thread", [False, True])
def test_a_failing_input_leaves_nothing_and_the_ones_before_it_stand(chunks, gpt2, tmp_path, in_one_thread):
    with open(chunks[2], "a", encoding="utf-8") as f:
        f.write("{not json\n")
    out = tmp_path / "out"
    processor = ProcessorFactory.create("pt", gpt2)
    seen = []
    stream = cache_files(
        map(CacheInput, chunks), str(out), processor, CacheOptions(on_error="raise"), None, in_one_thread
    )
    with pytest.raises(BadRowError, match=r"train_chunk_2\.jsonl:61: .*invalid_json"):
        for stats in stream:
            seen.append(stats.output_url.rsplit("/", 1)[-1])
    assert seen == ["train_chunk_0.h5", "train_chunk_1.h5"]
    assert sorted(p.name for p in out.iterdir()) == ["train_chunk_0.h5", "train_chunk_1.h5"]  # no temp, no chunk 3
    assert not stage_threads()


def test_a_missing_input_fails_after_the_ones_before_it(chunks, gpt2, tmp_path):
    out = tmp_path / "out"
    inputs = [CacheInput(chunks[0]), CacheInput(str(tmp_path / "in" / "gone.jsonl")), CacheInput(chunks[1])]
    stream = cache_files(inputs, str(out), ProcessorFactory.create("pt", gpt2))
    assert next(stream).output_url.endswith("train_chunk_0.h5")
    with pytest.raises(FileNotFoundError, match="gone.jsonl"):
        next(stream)
    assert sorted(p.name for p in out.iterdir()) == ["train_chunk_0.h5"]
    assert not stage_threads()


def test_a_refused_input_is_discarded_and_leaving_early_discards_the_one_in_progress(chunks, gpt2, tmp_path):
    def refuse(sha256: str) -> None:
        raise RuntimeError(f"changed while cached ({sha256[:8]})")

    out = tmp_path / "out"
    processor = ProcessorFactory.create("pt", gpt2)
    inputs = [CacheInput(chunks[0]), CacheInput(chunks[1], check_source=refuse), CacheInput(chunks[2])]
    with pytest.raises(RuntimeError, match="changed while cached"):
        list(cache_files(inputs, str(out), processor))
    assert sorted(p.name for p in out.iterdir()) == ["train_chunk_0.h5"]

    stream = cache_files(map(CacheInput, chunks), str(tmp_path / "early"), processor, CacheOptions(batch_size=5))
    next(stream)
    stream.close()  # chunk 1 was begun by the threads ahead: nothing of it is left
    assert sorted(p.name for p in (tmp_path / "early").iterdir()) == ["train_chunk_0.h5"]
    assert not stage_threads()


def test_in_one_thread_the_stream_starts_no_thread_and_writes_the_same_bytes(chunks, gpt2, tmp_path):
    processor = ProcessorFactory.create("pt", gpt2)
    options = CacheOptions(pack_size=64, pad_value=0)
    during = []
    for _ in cache_files(map(CacheInput, chunks), str(tmp_path / "one"), processor, options, None, True):
        during += stage_threads()
    threaded = list(cache_files(map(CacheInput, chunks), str(tmp_path / "threads"), processor, options))
    assert during == []
    for chunk, other in zip(sorted((tmp_path / "one").iterdir()), [s.output_url for s in threaded], strict=True):
        assert chunk.read_bytes() == Path(other).read_bytes()


@pytest.mark.parametrize(
    ("sizes", "suits"),
    [([], False), ([4096] * 1000, True), ([65535, 1], True), ([65536], False), ([1 << 20, 100, 100], False)],
)
def test_inputs_averaging_under_64_kib_suit_one_thread(sizes, suits):
    assert suits_one_thread(sizes) is suits


def test_cache_jsonl_caches_small_local_inputs_in_one_thread_and_large_ones_with_threads(
    chunks, gpt2, tmp_path, monkeypatch
):
    taken = []

    def spy(*args):  # the real cache_files, its in_one_thread noted
        taken.append(args[5])
        return cache_files(*args)

    monkeypatch.setattr(cache_module, "cache_files", spy)
    processor = ProcessorFactory.create("pt", gpt2)
    small = cache_jsonl(str(tmp_path / "in"), str(tmp_path / "small"), processor)
    big = tmp_path / "big"
    big.mkdir()
    write_chunk(big / "train_chunk_0.jsonl", ["word " * 20_000])  # 100 KB: past the 64 KiB average
    cache_jsonl(str(big), str(tmp_path / "big_out"), processor)
    assert taken == [True, False]
    threaded = list(cache_files(map(CacheInput, chunks), str(tmp_path / "threads"), processor, CacheOptions()))
    for ours, theirs in zip(small, [s.output_url for s in threaded], strict=True):
        assert Path(ours).read_bytes() == Path(theirs).read_bytes()


def test_local_sizes_are_the_files_sizes_and_none_elsewhere(chunks, tmp_path):
    assert local_sizes(chunks) == [Path(c).stat().st_size for c in chunks]
    assert local_sizes([*chunks, str(tmp_path / "gone.jsonl")]) == []  # the reader names it
    assert local_sizes(["memory://bucket/a.jsonl"]) == []  # a size elsewhere costs a request
