"""Sources: every kind open_source accepts, streaming and sized alike, errors that name the files,
and fingerprints that follow content, not paths. No network: the hub is switched off."""

from __future__ import annotations

import json
import shutil

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datasets import Dataset

from pipeline_core.errors import ConfigError
from pipeline_core.sources import DatasetSource, locate, open_source

pytestmark = pytest.mark.usefixtures("hf_offline")

ROWS = [{"id": i, "text": f"row {i} é"} for i in range(7)]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def write_format(folder, ext, rows=ROWS):
    """ROWS in one file of the given format."""
    path = folder / f"data{ext}"
    table = pa.Table.from_pylist(rows)
    if ext == ".jsonl":
        write_jsonl(path, rows)
    elif ext == ".json":
        path.write_text(json.dumps(rows, ensure_ascii=False), encoding="utf-8")
    elif ext == ".csv":
        path.write_text("id,text\n" + "".join(f"{r['id']},{r['text']}\n" for r in rows), encoding="utf-8")
    elif ext == ".parquet":
        pq.write_table(table, path)
    elif ext == ".arrow":
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
    return path


def rows_of(source):
    return list(source)


# --- kinds ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("ext", [".json", ".jsonl", ".csv", ".parquet", ".arrow"])
@pytest.mark.parametrize("streaming", [False, True])
def test_local_file_of_each_format(tmp_path, ext, streaming):
    source = open_source(write_format(tmp_path, ext), streaming=streaming)
    # a CSV cell is text: read as written (never a number, never missing), see test_csv_cells_are_their_text
    expected = [{k: str(v) for k, v in r.items()} for r in ROWS] if ext == ".csv" else ROWS
    assert rows_of(source) == expected
    assert source.num_rows == (None if streaming else len(ROWS))
    assert source.name == "data"


@pytest.mark.parametrize("streaming", [False, True])
def test_csv_cells_are_their_text(tmp_path, streaming):
    """pandas' defaults (what datasets reads CSV with) made NA, null, nan and empty cells missing
    and 02134 the number 2134.0; every cell now comes back as the text the file holds."""
    import csv

    cells = [["NA", "null"], ["nan", ""], ["02134", "1e3"], ["N/A", "-"]]
    path = tmp_path / "c.csv"
    with open(path, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([["a", "b"], *cells])
    assert rows_of(open_source(path, streaming=streaming)) == [{"a": a, "b": b} for a, b in cells]


@pytest.mark.parametrize("streaming", [False, True])
def test_a_dataset_formatted_to_some_columns_gives_those_columns(streaming):
    """``set_format(columns=[...])`` hides the others from ``dataset[i]``: the export follows it
    (the Arrow reads ignored the format and wrote the hidden columns)."""
    ds = Dataset.from_dict({"id": [0, 1, 2], "secret": ["a", "b", "c"]})
    ds.set_format(type=None, columns=["id"])
    expected = [ds[i] for i in range(len(ds))]
    assert expected == [{"id": 0}, {"id": 1}, {"id": 2}]
    assert rows_of(open_source(ds, streaming=streaming)) == expected
    ds.set_format(type=None, columns=["id"], output_all_columns=True)
    assert rows_of(open_source(ds, streaming=streaming)) == [ds[i] for i in range(len(ds))]


def test_txt_is_one_text_per_line(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("first line\nsecond é line\n", encoding="utf-8")
    assert rows_of(open_source(path)) == [{"text": "first line"}, {"text": "second é line"}]
    assert rows_of(open_source(str(path), streaming=True)) == [{"text": "first line"}, {"text": "second é line"}]


def test_dataset_and_iterable_dataset():
    ds = Dataset.from_list(ROWS)
    sized = open_source(ds)
    assert sized.num_rows == 7 and rows_of(sized) == ROWS
    assert list(sized.iter_rows(2, 4)) == ROWS[2:4]
    assert [(r.dataset, r.index) for r in sized.records(5)] == [("dataset", 5), ("dataset", 6)]
    streamed = open_source(ds.to_iterable_dataset())
    assert streamed.num_rows is None and rows_of(streamed) == ROWS
    assert [r.index for r in streamed.records(5)] == [5, 6]
    with pytest.raises(TypeError, match="streaming"):
        streamed.iter_rows(0, 2)
    as_stream = open_source(ds, streaming=True)
    assert as_stream.num_rows is None and rows_of(as_stream) == ROWS


def test_dataset_dict_takes_the_split():
    from datasets import DatasetDict

    dd = DatasetDict({"train": Dataset.from_list(ROWS[:3]), "test": Dataset.from_list(ROWS[3:])})
    assert rows_of(open_source(dd, split="test")) == ROWS[3:]
    with pytest.raises(ValueError, match="no split 'dev'.*available splits"):
        open_source(dd, split="dev")


def test_list_of_dicts():
    source = open_source(ROWS, name="mine")
    assert rows_of(source) == ROWS and source.num_rows == 7 and source.name == "mine"
    with pytest.raises(TypeError, match="row dicts"):
        open_source(["a.jsonl", "b.jsonl"])


def test_folder_is_taken_in_natural_order_and_skips_hidden_files(tmp_path):
    for i in (10, 2, 1):
        write_jsonl(tmp_path / f"part_{i}.jsonl", [{"part": i}])
    (tmp_path / "README.md").write_text("# notes\n")
    (tmp_path / ".hidden.txt").write_text("x\n")
    (tmp_path / "_SUCCESS").write_text("")
    sub = tmp_path / "more"
    sub.mkdir()
    write_jsonl(sub / "part_99.jsonl", [{"part": 99}])
    assert rows_of(open_source(tmp_path)) == [{"part": 99}, {"part": 1}, {"part": 2}, {"part": 10}]  # more/ < part_
    assert rows_of(open_source(str(tmp_path / "part_*.jsonl"))) == [{"part": 1}, {"part": 2}, {"part": 10}]


def test_memory_url_file_and_folder():
    fs = fsspec.filesystem("memory")
    fs.pipe("/srcs/a/p1.jsonl", b'{"x": 1}\n{"x": 2}\n')
    fs.pipe("/srcs/a/p2.jsonl", b'{"x": 3}\n')
    assert rows_of(open_source("memory://srcs/a/p1.jsonl")) == [{"x": 1}, {"x": 2}]
    assert rows_of(open_source("memory://srcs/a")) == [{"x": 1}, {"x": 2}, {"x": 3}]
    assert rows_of(open_source("memory://srcs/a", streaming=True)) == [{"x": 1}, {"x": 2}, {"x": 3}]
    with pytest.raises(FileNotFoundError, match="memory://srcs/missing"):
        open_source("memory://srcs/missing")
    options = {"skip_instance_cache": False}
    for streaming in (False, True):
        source = open_source("memory://srcs/a", storage_options=options, streaming=streaming)
        assert len(rows_of(source)) == 3 and len(source.fingerprint) == 64
    assert options == {"skip_instance_cache": False}  # datasets adds keys to what it is given: not to ours


def test_remote_files_are_copied_once_and_refreshed_when_they_change():
    fs = fsspec.filesystem("memory")
    fs.pipe("/srcs/b/data.jsonl", b'{"x": 1}\n')
    first = open_source("memory://srcs/b/data.jsonl")
    assert rows_of(first) == [{"x": 1}]
    assert rows_of(open_source("memory://srcs/b/*.jsonl")) == [{"x": 1}]
    fs.pipe("/srcs/b/data.jsonl", b'{"x": 2}\n')
    again = open_source("memory://srcs/b/data.jsonl")
    assert rows_of(again) == [{"x": 2}]
    assert again.fingerprint != first.fingerprint
    assert again.fingerprint == open_source("memory://srcs/b/data.jsonl", streaming=True).fingerprint


def make_repo(folder):
    """A dataset repository as on the hub: data files plus a README whose YAML names the splits."""
    (folder / "data").mkdir(parents=True)
    write_jsonl(folder / "data" / "train.jsonl", ROWS[:4])
    write_jsonl(folder / "data" / "test.jsonl", ROWS[4:])
    card = "---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n    path: data/train.jsonl\n"
    card += "  - split: test\n    path: data/test.jsonl\n---\n# A dataset\n"
    (folder / "README.md").write_text(card)
    return folder


@pytest.mark.parametrize("streaming", [False, True])
def test_repository_folder_goes_through_load_dataset(tmp_path, streaming):
    repo = make_repo(tmp_path / "owner_ds")
    assert locate(repo).kind == "repo"
    assert rows_of(open_source(repo, streaming=streaming)) == ROWS[:4]
    assert rows_of(open_source(str(repo), split="test", streaming=streaming)) == ROWS[4:]


def test_an_edited_repository_is_read_again_and_keyed_anew(tmp_path):
    """Its data behind a symlinked folder (os.walk skipped it: the fingerprint never changed), and
    the data edited in place between two runs (datasets' own Arrow cache served the old rows)."""
    real = make_repo(tmp_path / "real")
    repo = tmp_path / "owner_ds"
    repo.mkdir()
    (repo / "README.md").write_text((real / "README.md").read_text())
    (repo / "data").symlink_to(real / "data", target_is_directory=True)
    first = open_source(repo)
    assert rows_of(first) == ROWS[:4]
    before = first.fingerprint
    edited = [{**ROWS[0], "text": "edited in place"}, *ROWS[1:4]]
    write_jsonl(real / "data" / "train.jsonl", edited)
    again = open_source(repo)
    assert again.fingerprint != before
    assert rows_of(again) == edited


def test_saved_dataset_folder(tmp_path):
    Dataset.from_list(ROWS).save_to_disk(str(tmp_path / "saved"))
    assert locate(tmp_path / "saved").kind == "saved"
    assert rows_of(open_source(tmp_path / "saved")) == ROWS
    assert rows_of(open_source(tmp_path / "saved", streaming=True)) == ROWS


def test_hub_id_is_loaded_from_the_hub_and_never_guessed_as_a_file(tmp_path):
    assert locate("someone/some-dataset").kind == "hub"
    with pytest.raises(ConnectionError, match="someone/some-dataset"):  # offline in tests
        open_source("someone/some-dataset")
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        open_source("missing.jsonl")
    with pytest.raises(FileNotFoundError, match="owner/name"):
        open_source(str(tmp_path / "no" / "such" / "dir"))


def test_dataset_info_is_recognised_by_content_not_name(tmp_path):
    assert locate(write_format(tmp_path, ".json")).kind == "files"
    for name in ("mix.yaml", "mix.yml"):
        (tmp_path / name).write_text("{}")
        assert locate(tmp_path / name).kind == "dataset_info"
    info = json.dumps({"a": {"file_name": "a.json"}, "b": {"hf_hub_url": "o/b", "columns": {"prompt": "t"}}})
    for name in ("dataset_info.json", "my_mix.json", "data.json"):
        (tmp_path / name).write_text(info)
        assert locate(tmp_path / name).kind == "dataset_info"
    data = {"dataset_info.json": '[{"text": "a"}]', "dataset_info_v2.json": '{"text": "a"}\n{"text": "b"}\n'}
    for name, text in data.items():  # named like one, holding rows: data
        (tmp_path / name).write_text(text)
        assert locate(tmp_path / name).kind == "files"
    (tmp_path / "rows.json").write_text(info)
    assert locate(tmp_path / "rows.json", dataset_info=False).kind == "files"
    (tmp_path / "forced.txt").write_text(info)
    assert locate(tmp_path / "forced.txt", dataset_info=True).kind == "dataset_info"


# --- errors ---------------------------------------------------------------------------------------


def test_unknown_extension_names_the_file(tmp_path):
    (tmp_path / "data.xlsx").write_text("x")
    with pytest.raises(ValueError, match=r"unsupported file type.*data\.xlsx.*\.jsonl"):
        open_source(tmp_path / "data.xlsx")


def test_folder_with_mixed_formats_names_the_files(tmp_path):
    write_jsonl(tmp_path / "a.jsonl", ROWS)
    write_format(tmp_path, ".csv")
    (tmp_path / "b.json").write_text("[]")
    with pytest.raises(ValueError, match=r"mixes data formats \(csv: .*data\.csv; json: .*a\.jsonl, .*b\.json\)"):
        open_source(tmp_path)
    (tmp_path / "notes.md").write_text("x")
    with pytest.raises(ValueError, match=r"unsupported file type.*notes\.md"):
        open_source(tmp_path)


def test_empty_folder(tmp_path):
    with pytest.raises(ValueError, match="no data files"):
        open_source(tmp_path)


def test_bad_options_say_what_to_change(tmp_path):
    path = write_format(tmp_path, ".jsonl")
    with pytest.raises(TypeError, match="shuffle"):
        open_source(path, shuffle=True)
    with pytest.raises(ConfigError, match="total only applies to a dataset_info"):
        open_source(path, total=5)
    with pytest.raises(ConfigError, match="split='test' only applies to dataset repositories"):
        open_source(path, split="test")
    with pytest.raises(ConfigError, match="seed must be a non-negative integer"):
        open_source(path, seed=-1)
    with pytest.raises(ConfigError, match="unknown converter 'nope'"):
        open_source(path, converter="nope")
    source = open_source(path)
    assert open_source(source) is source
    with pytest.raises(ConfigError, match="pass them to open_source"):
        open_source(source, seed=3)


def test_unsupported_object():
    with pytest.raises(TypeError, match="cannot read rows from a int"):
        open_source(42)


# --- fingerprints ---------------------------------------------------------------------------------


def test_fingerprint_follows_content_not_path(tmp_path):
    a = write_jsonl(tmp_path / "a.jsonl", ROWS)
    first = open_source(a).fingerprint
    assert open_source(a).fingerprint == first  # stable across opens
    copy = tmp_path / "elsewhere" / "copy.jsonl"
    copy.parent.mkdir()
    shutil.copy(a, copy)
    assert open_source(copy).fingerprint == first
    assert open_source(copy, streaming=True).fingerprint == first
    write_jsonl(copy, [*ROWS[:-1], {"id": 6, "text": "changed"}])
    assert open_source(copy).fingerprint != first
    assert open_source(a, converter="text").fingerprint != first  # options that shape the rows count


def test_fingerprint_of_folders_repositories_and_objects(tmp_path):
    (tmp_path / "d1").mkdir()
    write_jsonl(tmp_path / "d1" / "x.jsonl", ROWS)
    shutil.copytree(tmp_path / "d1", tmp_path / "d2")
    assert open_source(tmp_path / "d1").fingerprint == open_source(tmp_path / "d2").fingerprint
    repo = make_repo(tmp_path / "repo")
    shutil.copytree(repo, tmp_path / "repo_copy")
    assert open_source(repo).fingerprint == open_source(tmp_path / "repo_copy").fingerprint
    assert open_source(repo).fingerprint != open_source(repo, split="test").fingerprint
    assert open_source(ROWS).fingerprint == open_source([dict(r) for r in ROWS]).fingerprint
    ds = Dataset.from_list(ROWS)
    assert open_source(ds).fingerprint == open_source(ds).fingerprint
    iterable = ds.to_iterable_dataset()
    assert open_source(iterable).fingerprint == open_source(Dataset.from_list(ROWS).to_iterable_dataset()).fingerprint


def test_fingerprint_is_lazy(tmp_path):
    source = open_source(write_jsonl(tmp_path / "a.jsonl", ROWS))
    assert isinstance(source, DatasetSource) and source._fingerprint is None
    assert len(source.fingerprint) == 64


@pytest.mark.parametrize("streaming", [False, True])
def test_csv_cells_are_their_text_after_blank_lines_too(tmp_path, streaming):
    """pandas skips blank lines before the header: the header there still reads every cell as text
    (the header check saw no header and let pandas read 02134 as 2134)."""
    path = tmp_path / "c.csv"
    path.write_text("\n\nid,note\n02134,NA\n", encoding="utf-8")
    assert rows_of(open_source(path, streaming=streaming)) == [{"id": "02134", "note": "NA"}]


@pytest.mark.parametrize("streaming", [False, True])
def test_csv_lines_of_spaces_before_the_header_are_blank_lines(tmp_path, streaming):
    """pandas skips them as it skips empty lines; the header check took one as the header."""
    import pandas

    path = tmp_path / "c.csv"
    path.write_text("\n  \n\t\nid,note\n02134,NA\n", encoding="utf-8")
    assert list(pandas.read_csv(path, dtype=str, keep_default_na=False).columns) == ["id", "note"]
    assert rows_of(open_source(path, streaming=streaming)) == [{"id": "02134", "note": "NA"}]


def test_a_csv_header_that_repeats_a_name_is_refused_naming_it(tmp_path):
    path = tmp_path / "c.csv"
    path.write_text("id,id,note\n02134,7,NA\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"c\.csv: the CSV header repeats the column name\(s\) \['id'\]"):
        rows_of(open_source(path))


@pytest.mark.parametrize("streaming", [False, True])
def test_a_csv_header_with_an_unnamed_column_is_refused_naming_it(tmp_path, streaming):
    """It failed with "An error occurred while generating the dataset" (sized) or a KeyError (streamed)."""
    path = tmp_path / "c.csv"
    path.write_text("a,,b\n1,2,3\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"c\.csv: the CSV header has no name for column 2 of 3"):
        rows_of(open_source(path, streaming=streaming))
