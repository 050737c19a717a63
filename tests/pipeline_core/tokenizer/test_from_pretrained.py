"""AutoTokenizer.from_pretrained: transformers' name for a local folder; a hub id is refused with the fix."""

from __future__ import annotations

import pytest

from pipeline_core import AutoTokenizer


def test_from_pretrained_reads_a_local_folder_like_from_file(gpt2_path):
    folder = gpt2_path.parent
    by_alias, by_file = AutoTokenizer.from_pretrained(folder), AutoTokenizer.from_file(folder)
    assert by_alias.fingerprint == by_file.fingerprint
    assert by_alias.encode("hello world") == by_file.encode("hello world") == [31373, 995]


def test_from_pretrained_refuses_a_hub_id_with_how_to_download():
    with pytest.raises(FileNotFoundError, match="h5pipe reads local tokenizers only.*huggingface-cli download gpt2"):
        AutoTokenizer.from_pretrained("gpt2")
