"""Megatron's and MindSpeed's names and layouts, read back by megatron-core's own IndexedDataset:
``--json-keys`` (default ``text``, several keys one dataset each), ``_sentence`` with split
sentences, MindSpeed-LLM's instruction layout unpacked and packed (checked by a reader written
here from MindSpeed's format), and ``h5pipe merge`` over a cache output folder."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from pipeline_core import CacheOptions, ProcessorFactory, cache_file, load_h5
from pipeline_core.commit.manifest import Manifest, ManifestEntry, save_manifest
from pipeline_core.commit.verify import verify_output
from pipeline_core.errors import ConfigError
from pipeline_core.stages.merge import merge_output
from tests.conftest import load_json_or_jsonl
from tests.pipeline_core.formats.test_megatron import _megatron_indexed_dataset

runner = CliRunner()


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def read(prefix) -> tuple[list[list[int]], list[int], np.dtype]:
    dataset = _megatron_indexed_dataset()(str(prefix))
    return [dataset[i].tolist() for i in range(len(dataset))], dataset.document_indices.tolist(), dataset.index.dtype


def test_several_json_keys_give_one_dataset_each(gpt2, tmp_path):
    rows = [{"title": f"Title {i}", "text": f"Body number {i}. " * (i + 1)} for i in range(12)]
    processor = ProcessorFactory.create("pt", gpt2, text_keys=["text", "title"])
    stats = cache_file(
        write_jsonl(tmp_path / "c.jsonl", rows), str(tmp_path / "o"), processor, CacheOptions(output_format="megatron")
    )
    assert stats.megatron_prefixes == {k: str(tmp_path / "o" / f"c_{k}_document") for k in ("text", "title")}
    eos = gpt2.eos_token_id
    for key in ("text", "title"):
        seqs, documents, _ = read(stats.megatron_prefixes[key])
        assert seqs == [gpt2.encode(r[key]) + [eos] for r in rows] and documents == list(range(13))
    bad = [{"text": "only text"}, *rows[:2]]
    stats = cache_file(
        write_jsonl(tmp_path / "d.jsonl", bad), str(tmp_path / "o"), processor, CacheOptions(output_format="megatron")
    )
    assert stats.rows_skipped == 1 and len(read(stats.megatron_prefixes["title"])[0]) == 2  # aligned keys
    with pytest.raises(ConfigError, match="split_sentences splits one text"):
        cache_file(
            write_jsonl(tmp_path / "e.jsonl", rows), str(tmp_path / "o"), processor, CacheOptions(split_sentences=True)
        )


def test_split_sentences_are_named_sentence(gpt2, tmp_path):
    rows = [{"text": "One sentence. Two sentences. Three."}, {"text": "Alone."}]
    options = CacheOptions(output_format="megatron", split_sentences=True)
    stats = cache_file(
        write_jsonl(tmp_path / "s.jsonl", rows), str(tmp_path / "o"), ProcessorFactory.create("pt", gpt2), options
    )
    assert stats.megatron_prefixes == {"text": str(tmp_path / "o" / "s_text_sentence")}
    seqs, documents, _ = read(stats.megatron_prefixes["text"])
    assert len(documents) == 3 and documents[1] == 3 and len(seqs) == 4


def mindspeed_read(prefix: str) -> list[dict[str, list[int]]]:
    """MindSpeed-LLM's fine-tuning loader, as its format says: three aligned int32 datasets under
    ``{prefix}_packed_{key}_document``, item i of each belonging together."""
    IndexedDataset = _megatron_indexed_dataset()
    sets = {k: IndexedDataset(f"{prefix}_packed_{k}_document") for k in ("input_ids", "attention_mask", "labels")}
    assert len({len(s) for s in sets.values()}) == 1
    assert all(np.dtype(s.index.dtype) == np.int32 for s in sets.values())
    return [{k: s[i].tolist() for k, s in sets.items()} for i in range(len(sets["input_ids"]))]


@pytest.fixture(scope="module")
def alpaca(llamafactory):
    return [
        {"query": r["instruction"], "response": r["output"]}
        for r in load_json_or_jsonl(llamafactory / "alpaca_en_demo.json")[:60]
    ]


def test_mindspeed_instruction_layout_unpacked(trained, alpaca, tmp_path):
    processor = ProcessorFactory.create("sft", trained)
    stats = cache_file(
        write_jsonl(tmp_path / "a.jsonl", alpaca),
        str(tmp_path / "o"),
        processor,
        CacheOptions(output_format="mindspeed"),
    )
    assert sorted(stats.megatron_prefixes) == ["packed_attention_mask", "packed_input_ids", "packed_labels"]
    expected = processor.process_batch(alpaca).samples
    items = mindspeed_read(str(tmp_path / "o" / "a"))
    assert len(items) == 60
    for i, item in enumerate(items):
        ids, mask = expected["sequence"][i].tolist(), expected["loss_mask"][i].tolist()
        assert item["input_ids"] == ids and item["attention_mask"] == [1] * len(ids)
        assert item["labels"] == [t if m else -100 for t, m in zip(ids, mask)]
    assert not (tmp_path / "o" / "a.h5").exists()


def test_mindspeed_packed_rows_have_pack_size_and_ignored_padding(trained, alpaca, tmp_path):
    processor = ProcessorFactory.create("sft", trained)
    options = CacheOptions(output_format="mindspeed", pack_size=512, pad_value=0, packing="bfd")
    cache_file(write_jsonl(tmp_path / "p.jsonl", alpaca), str(tmp_path / "o"), processor, options)
    both = cache_file(
        write_jsonl(tmp_path / "q.jsonl", alpaca),
        str(tmp_path / "h"),
        processor,
        CacheOptions(pack_size=512, pad_value=0, packing="bfd"),
    )
    packed = load_h5(both.output_url)
    items = mindspeed_read(str(tmp_path / "o" / "p"))
    assert len(items) == len(packed["sequence"])
    for item, ids, mask in zip(items, packed["sequence"], packed["loss_mask"]):
        assert len(item["input_ids"]) == 512 and item["input_ids"] == ids.tolist()
        assert item["labels"] == [int(t) if m else -100 for t, m in zip(ids, mask)]


def test_mindspeed_refuses_what_its_layout_cannot_hold(trained, tmp_path):
    pairs = [{"query": "q", "chosen": "yes", "rejected": "no"}]
    with pytest.raises(ConfigError, match="use sft or messages"):
        cache_file(
            write_jsonl(tmp_path / "d.jsonl", pairs),
            str(tmp_path / "o"),
            ProcessorFactory.create("dpo", trained),
            CacheOptions(output_format="mindspeed"),
        )


def recorded(manifest: Manifest, stats) -> None:
    """The chunk's entry as the cache task records a Megatron-only chunk: its first key's .idx
    stands for it, every other .bin/.idx is one of its parts."""
    files = [stats.megatron_prefixes[k] + ext for k in sorted(stats.megatron_prefixes) for ext in (".idx", ".bin")]
    result = {"input_url": stats.input_url, "output_url": files[0], "parts": [{"url": u} for u in files[1:]]}
    name = files[0].rsplit("/", 1)[-1]
    manifest.entries[name] = ManifestEntry(name, "x", 0, extra={"result": result})


def cache_folder(gpt2, llamafactory, folder, output_format="megatron"):
    """A cache output folder as the flow leaves it: chunks plus a manifest naming their inputs."""
    rows = load_json_or_jsonl(llamafactory / "c4_demo.jsonl")[:60]
    manifest = Manifest("cache", "cfg")
    folder.parent.mkdir(parents=True, exist_ok=True)
    stats = []
    for i in (0, 1, 10):  # natural order: chunk_10 last
        url = write_jsonl(folder.parent / f"train_chunk_{i}.jsonl", rows[i : i + 20])
        stats.append(
            cache_file(url, str(folder), ProcessorFactory.create("pt", gpt2), CacheOptions(output_format=output_format))
        )
        recorded(manifest, stats[-1])
    save_manifest(str(folder), manifest.to_json())
    return stats


def test_merge_command_streams_chunks_into_a_new_folder(gpt2, llamafactory, tmp_path):
    from flows.cli import app

    stats = cache_folder(gpt2, llamafactory, tmp_path / "in" / "out")
    result = runner.invoke(
        app, ["merge", "--input", str(tmp_path / "in" / "out"), "--output", str(tmp_path / "merged" / "deep" / "all")]
    )
    assert result.exit_code == 0, result.output
    prefix = str(tmp_path / "merged" / "deep" / "all_text_document")
    assert json.loads(result.stdout) == {"text": prefix}
    seqs, documents, _ = read(prefix)
    expected = [s for st in stats for s in read(st.megatron_prefixes["text"])[0]]
    assert seqs == expected and documents == list(range(len(expected) + 1))
    assert verify_output(str(tmp_path / "merged" / "deep")).ok  # listed in its folder's manifest
    same = runner.invoke(
        app, ["merge", "--input", str(tmp_path / "in" / "out"), "--output", str(tmp_path / "in" / "out" / "all")]
    )
    assert same.exit_code == 2 and "another folder" in same.output
    with pytest.raises(ConfigError, match="no cache manifest"):
        merge_output(str(tmp_path / "merged" / "deep"), str(tmp_path / "x" / "all"))


def test_merge_keeps_mindspeed_names(trained, alpaca, tmp_path):
    processor = ProcessorFactory.create("sft", trained)
    out = tmp_path / "out"
    manifest = Manifest("cache", "cfg")
    for i in range(2):
        url = write_jsonl(tmp_path / f"c_{i}.jsonl", alpaca[i * 30 : (i + 1) * 30])
        recorded(manifest, cache_file(url, str(out), processor, CacheOptions(output_format="mindspeed")))
    save_manifest(str(out), manifest.to_json())
    merged = merge_output(str(out), str(tmp_path / "m" / "alpaca"))
    assert set(merged) == {"packed_input_ids", "packed_attention_mask", "packed_labels"}
    assert len(mindspeed_read(str(tmp_path / "m" / "alpaca"))) == 60  # MindSpeed's --data-path: the prefix


@pytest.mark.parametrize("packing", ["concat", "bfd"])
def test_several_json_keys_are_never_packed_into_one_sequence(gpt2, tmp_path, packing):
    """Each key is its own dataset; bfd packed them as one sequence (a text and its title as
    neighbouring documents, nothing saying which is which), so packing is refused for both packers."""
    processor = ProcessorFactory.create("pt", gpt2, text_keys=["text", "title"])
    path = write_jsonl(tmp_path / "c.jsonl", [{"title": "T", "text": "Body."}])
    options = CacheOptions(pack_size=64, pad_value=0, packing=packing)
    with pytest.raises(ConfigError, match="pack_size=0"):
        cache_file(path, str(tmp_path / "o"), processor, options)
    assert not (tmp_path / "o" / "c.h5").exists()


def test_merging_again_into_a_prefix_removes_the_keys_it_no_longer_writes(gpt2, tmp_path):
    """First merge: text and title; second, after the cache folder was rebuilt with text only: the
    prefix's title files go (files and manifest), another prefix's in the same folder stay."""
    rows = [{"title": f"Title {i}", "text": f"Body number {i}. " * (i + 1)} for i in range(8)]

    def cache_folder_of(keys: list[str], count: int) -> str:
        folder = tmp_path / "out"
        manifest = Manifest("cache", "cfg")
        url = write_jsonl(tmp_path / "train_chunk_0.jsonl", rows[:count])
        processor = ProcessorFactory.create("pt", gpt2, text_keys=keys)
        recorded(manifest, cache_file(url, str(folder), processor, CacheOptions(output_format="megatron")))
        save_manifest(str(folder), manifest.to_json())
        return str(folder)

    merged_dir = tmp_path / "merged"
    both = cache_folder_of(["text", "title"], 8)
    merge_output(both, str(merged_dir / "all"))
    merge_output(both, str(merged_dir / "all_x"))  # a prefix the first one's names start with
    text_only = cache_folder_of(["text"], 5)
    assert merge_output(text_only, str(merged_dir / "all")) == {"text": str(merged_dir / "all_text_document")}
    assert not (merged_dir / "all_title_document.bin").exists()
    assert not (merged_dir / "all_title_document.idx").exists()
    listed = set(json.loads((merged_dir / "h5pipe-manifest.json").read_text())["entries"])
    assert listed == {
        f"{p}_{k}_document.{e}"
        for p, k in [("all", "text"), ("all_x", "text"), ("all_x", "title")]
        for e in ("bin", "idx")
    }
    assert len(read(merged_dir / "all_text_document")[0]) == 5
    assert len(read(merged_dir / "all_x_title_document")[0]) == 8  # the other prefix is untouched
    assert verify_output(str(merged_dir)).ok


def test_merge_into_another_stages_folder_writes_nothing_there(gpt2, llamafactory, tmp_path):
    cache_folder(gpt2, llamafactory, tmp_path / "in" / "out")
    other = tmp_path / "other"
    other.mkdir()
    save_manifest(str(other), Manifest("cache", "cfg").to_json())
    with pytest.raises(ConfigError, match="holds cache outputs"):
        merge_output(str(tmp_path / "in" / "out"), str(other / "all"))
    assert sorted(p.name for p in other.iterdir()) == ["h5pipe-manifest.json"]
