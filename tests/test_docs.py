"""The README stays a quick start: short, linking to docs/ pages that exist, naming no commits."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_readme_is_short():
    assert len(README.splitlines()) <= 150, "README.md is a quick start: move reference material to docs/"


def test_readme_starts_with_the_two_commands():
    first_block = README.split("```bash", 1)[1].split("```", 1)[0]
    assert "make run" in first_block and "make test" in first_block


def test_every_link_of_the_readme_exists():
    links = re.findall(r"\]\(([^)#]+)\)", README)
    local = [link for link in links if not link.startswith("http")]
    assert any(link.startswith("docs/") for link in local)
    missing = [link for link in local if not (ROOT / link).exists()]
    assert missing == []


def test_every_docs_page_is_linked_from_the_readme():
    pages = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))
    assert [p for p in pages if p not in README] == [], "link each docs/ page from README's 'Read more'"


def test_readme_names_no_commit():
    # Upgrade notes that name commits belong in CHANGELOG.md.
    hashes = re.findall(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b", README)
    assert hashes == []


README_MODELS = {"Qwen3-8B": "qwen3", "Llama-3.1-8B-Instruct": "llama3.1", "gemma-2-9b-it": "gemma"}


def real_model_commands() -> list[list[str]]:
    """The ``h5pipe`` commands of the README's "Train a real model" section, continuations joined."""
    import shlex

    section = README.split("## Train a real model", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash", 1)[1].split("```", 1)[0].replace("\\\n", " ")
    lines = [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [shlex.split(line) for line in lines]


def test_the_readme_real_model_examples_run_as_transformers_renders(tmp_path, monkeypatch, prefect_harness):
    """Each command, unchanged, in a folder holding models/<name> (GPT-2 plus the family's control tokens
    and template) and data/sft (v1 messages: multi-turn, reasoning, tools, system): every row the
    template renders is written, as many tokens as transformers' apply_chat_template gives, the rows
    whose render raises in transformers (Gemma has no system role) are the skipped ones."""
    from typer.testing import CliRunner

    from flows.cli import app
    from pipeline_core import read_attrs
    from tests.conftest import load_json_or_jsonl
    from tests.pipeline_core.chat.families import FIXTURES, family_folder, reference
    from tests.pipeline_core.chat.test_real_templates import raw_reference, reasoning_rows

    monkeypatch.chdir(tmp_path)
    rows = reasoning_rows() + load_json_or_jsonl(FIXTURES / "llamafactory" / "v1_sft_demo.jsonl")[:30]
    (tmp_path / "data" / "sft").mkdir(parents=True)
    (tmp_path / "data" / "sft" / "train_chunk_0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    commands = real_model_commands()
    models = [c[c.index("--tokenizer") + 1] for c in commands]
    assert sorted(m.split("/")[-1] for m in models) == sorted(README_MODELS)
    for command, model in zip(commands, models):
        assert command[:2] == ["h5pipe", "cache"] and "template" in command
        folder = family_folder(README_MODELS[model.split("/")[-1]], tmp_path / model)
        result = CliRunner().invoke(app, command[1:])
        assert result.exit_code == 0, result.output
        ref, expected, raised = reference(folder), 0, 0
        for row in rows:
            messages, tools = raw_reference(row)
            try:
                expected += len(ref.apply_chat_template(messages, tools=tools, tokenize=True)["input_ids"])
            except Exception:  # noqa: BLE001 - the template itself refuses the conversation
                raised += 1
        attrs = read_attrs(str(tmp_path / command[command.index("--output") + 1] / "train_chunk_0.h5"))
        assert (attrs["samples_written"], attrs["tokens_written"]) == (len(rows) - raised, expected), model
        assert raised == (2 if "gemma" in model else 0), model  # Gemma refuses the system row and the tool row
        assert attrs["rows_skipped"] == raised and set(attrs["skipped_by_reason"]) <= {"template_error"}
