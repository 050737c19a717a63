"""gigatoken on its thread pool or on the calling thread: the rule by cores, the setting, the same ids
either way, and the pool used after a fork only where no pool can have been lost in it."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from pipeline_core.errors import ConfigError
from pipeline_core.stages.encode_ahead import EncodeAhead
from pipeline_core.tokenizer import encode_pool
from pipeline_core.tokenizer.backends import TokenizersBackend
from pipeline_core.tokenizer.encode_pool import PARALLEL_ENV, encode_parallel
from pipeline_core.tokenizer.gigatoken import SMALL_BATCH_CHARS, GigatokenBackend
from tests.pipeline_core.tokenizer.backend_corpora import GPT2, assert_same, corpus_strings, require_fixtures

ROOT = Path(__file__).resolve().parents[3]


def _decided_in(thread_marked: bool) -> bool | None:
    """encode_parallel() as a stage encode thread (marked as EncodeAhead marks its workers) or another sees it."""
    initializer = encode_pool.beside_the_stage if thread_marked else None
    with ThreadPoolExecutor(1, initializer=initializer) as pool:
        return pool.submit(encode_parallel).result()


@pytest.mark.parametrize(("cores", "expected"), [(1, False), (2, False), (3, None), (16, None)])
def test_the_stages_encode_threads_use_the_calling_thread_on_two_cores_or_fewer(monkeypatch, cores, expected):
    monkeypatch.delenv(PARALLEL_ENV, raising=False)
    monkeypatch.setattr(encode_pool, "usable_cores", lambda: cores)
    assert _decided_in(thread_marked=True) is expected
    assert _decided_in(thread_marked=False) is None  # gigatoken's default: the pool
    assert encode_parallel() is None


@pytest.mark.parametrize(
    ("value", "marked", "other"), [("0", False, False), ("off", False, False), ("1", None, None), ("ON", None, None),
                                   ("auto", False, None)]
)  # fmt: skip
def test_the_setting_overrides_the_rule(monkeypatch, value, marked, other):
    monkeypatch.setattr(encode_pool, "usable_cores", lambda: 2)
    monkeypatch.setenv(PARALLEL_ENV, value)
    assert _decided_in(thread_marked=True) is marked
    assert _decided_in(thread_marked=False) is other


def test_the_pt_stages_encode_worker_is_marked(monkeypatch):
    monkeypatch.delenv(PARALLEL_ENV, raising=False)
    monkeypatch.setattr(encode_pool, "usable_cores", lambda: 2)
    with EncodeAhead(lambda _: encode_parallel(), range(3)) as done:
        assert [decided for _, decided in done] == [False, False, False]
    with EncodeAhead(lambda _: encode_parallel(), range(3), inline=True) as done:
        assert [decided for _, decided in done] == [None, None, None]  # sft/dpo: the caller's thread


def test_a_bad_setting_is_refused_when_the_backend_is_made(monkeypatch):
    require_fixtures()
    monkeypatch.setenv(PARALLEL_ENV, "sometimes")
    with pytest.raises(ConfigError, match=f"{PARALLEL_ENV}='sometimes'.*set it to 1.*0.*auto"):
        GigatokenBackend(GPT2.read_text(encoding="utf-8"))


@pytest.mark.parametrize("setting", ["0", "1"])
def test_the_same_ids_on_the_pool_and_on_the_calling_thread(monkeypatch, setting):
    require_fixtures()
    monkeypatch.setenv(PARALLEL_ENV, setting)
    tokenizer_json = GPT2.read_text(encoding="utf-8")
    texts = corpus_strings("c4_demo.jsonl")
    small = texts[:3]
    assert sum(map(len, small)) < SMALL_BATCH_CHARS < sum(map(len, texts))  # both of the backend's paths
    reference = TokenizersBackend(tokenizer_json)
    backend = GigatokenBackend(tokenizer_json)
    for batch in (texts, small):
        assert_same(backend.encode_batch(batch), reference.encode_batch(batch))


FORK_SCRIPT = textwrap.dedent(
    """
    import json, os, sys, threading
    os.environ["H5PIPE_GIGATOKEN_PARALLEL"] = "1"
    os.environ["OPENBLAS_NUM_THREADS"] = "1"  # as in the warm process: numpy's import starts no thread
    from pipeline_core.tokenizer import encode_pool
    from pipeline_core.tokenizer.gigatoken import GigatokenBackend

    backend = GigatokenBackend(open(sys.argv[1], encoding="utf-8").read())
    texts = json.loads(open(sys.argv[2], encoding="utf-8").read())
    big = texts * 30  # ~20 MB: spread over the pool (a small batch is encoded serially whatever is asked)
    if sys.argv[3] == "thread":
        threading.Thread(target=threading.Event().wait, daemon=True).start()
    if sys.argv[3] == "pool":
        backend.encode_batch(big)  # gigatoken's pool now exists here, and a fork loses its threads


    def child(depth):
        if depth > 1:
            pid = os.fork()
            if pid:
                _, status = os.waitpid(pid, 0)
                os._exit(os.waitstatus_to_exitcode(status))
            depth -= 1
        decided = encode_pool.encode_parallel()
        backend.encode_batch(big)  # would wait forever on a pool lost in the fork
        ids = backend.encode_batch(texts)
        main = open("/proc/self/comm").read()  # gigatoken's pool threads keep the process's name
        threads = sum(open(f"/proc/self/task/{t}/comm").read() == main for t in os.listdir("/proc/self/task"))
        print(json.dumps({"decided": decided, "threads": threads, "values": ids.values.tolist(),
                          "offsets": ids.offsets.tolist()}), flush=True)
        os._exit(0)


    pid = os.fork()
    if pid == 0:
        child(int(sys.argv[4]))
    _, status = os.waitpid(pid, 0)
    sys.exit(os.waitstatus_to_exitcode(status))
    """
)


@pytest.fixture(scope="module")
def fork_texts(tmp_path_factory) -> tuple[Path, list[str]]:
    require_fixtures()
    texts = corpus_strings("c4_demo.jsonl")
    path = tmp_path_factory.mktemp("texts") / "texts.json"
    path.write_text(json.dumps(texts), encoding="utf-8")
    return path, texts


def _in_forked_child(fork_texts, setup: str, depth: int = 1) -> dict:
    path, _ = fork_texts
    script = subprocess.Popen(
        [sys.executable, "-c", FORK_SCRIPT, str(GPT2), str(path), setup, str(depth)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, start_new_session=True,
    )  # fmt: skip
    try:
        out, err = script.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        os.killpg(script.pid, signal.SIGKILL)  # the forked children too
        script.communicate()
        pytest.fail(f"the forked child's encode hung ({setup!r} before the fork)")
    assert script.returncode == 0, err
    return json.loads(out)


@pytest.mark.parametrize("depth", [1, 2])
def test_a_child_forked_from_one_thread_encodes_on_the_pool(fork_texts, depth):
    """The warm process's case: it forks each run with one thread, so no pool was lost."""
    reported = _in_forked_child(fork_texts, "none", depth)
    assert reported["decided"] is True
    assert reported["threads"] > 1  # gigatoken's pool was built in the child (awkward's thread is named)
    _assert_reference_ids(reported, fork_texts)


@pytest.mark.parametrize("setup", ["thread", "pool"])
def test_a_child_forked_from_several_threads_leaves_it_to_gigatoken(fork_texts, setup):
    """A parent with threads may have had gigatoken's pool, which a fork leaves without threads: forcing
    the pool in the child would hang its first call (the subprocess's timeout fails the test then)."""
    reported = _in_forked_child(fork_texts, setup)
    assert reported["decided"] is None  # gigatoken's own rule: the calling thread in a forked child
    assert reported["threads"] == 1
    _assert_reference_ids(reported, fork_texts)


def test_a_worker_process_leaves_it_to_gigatoken(monkeypatch):
    monkeypatch.setenv(PARALLEL_ENV, "1")
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        assert pool.apply(encode_parallel) is None


def _assert_reference_ids(reported: dict, fork_texts) -> None:
    expected = TokenizersBackend(GPT2.read_text(encoding="utf-8")).encode_batch(fork_texts[1])
    np.testing.assert_array_equal(np.array(reported["offsets"]), expected.offsets)
    np.testing.assert_array_equal(np.array(reported["values"]), expected.values)


@pytest.mark.parametrize("pack_size", [0, 2048])
def test_the_stage_writes_the_same_bytes_on_the_pool_and_on_the_calling_thread(
    monkeypatch, gpt2, llamafactory, tmp_path, pack_size
):
    from pipeline_core import ProcessorFactory, cache_jsonl

    assert gpt2.backend_name == "gigatoken"
    source = tmp_path / "c4.jsonl"
    source.write_bytes((llamafactory / "c4_demo.jsonl").read_bytes() * 20)  # 6,000 rows, 15 MB
    digests = {}
    for setting in ("0", "1"):
        monkeypatch.setenv(PARALLEL_ENV, setting)
        processor = ProcessorFactory.create("pt", gpt2)
        out_dir = str(tmp_path / setting)
        [out] = cache_jsonl(str(source), out_dir, processor, pack_size, gpt2.eos_token_id, batch_size=500)
        digests[setting] = hashlib.sha256(Path(out).read_bytes()).hexdigest()
    assert digests["0"] == digests["1"]
