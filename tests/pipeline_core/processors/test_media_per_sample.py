"""A sample's ``media`` lists the media of the messages it holds, no more.

Before, every sample of a row listed the whole row's media: each ``rewritten="per_turn"`` sample
(which renders the messages up to its turn) and a sample truncated to ``max_length`` (whose later
turns are cut away). Expectations come from the row itself: which message each image is in, and
which messages a sample renders.
"""

from __future__ import annotations

import json

import pytest

from pipeline_core import AutoTokenizer, ProcessorFactory
from pipeline_core.converters.dataset_info import converter_from_dataset_info
from pipeline_core.processors.media import decode_media
from tests.pipeline_core.chat.families import family_folder


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict:
    return {"role": "assistant", "content": text}


ROW = {
    "messages": [user("<image>Who?"), assistant("Kane."), user("Where?<image>"), assistant("Munich.")],
    "images": ["1.jpg", "2.jpg"],
}
FIRST, SECOND = (
    {"type": "image_url", "value": "1.jpg", "message": 0},
    {"type": "image_url", "value": "2.jpg", "message": 2},
)


@pytest.fixture(scope="module")
def converter(llamafactory):
    return converter_from_dataset_info(json.loads((llamafactory / "dataset_info.json").read_text())["mllm_demo"])


def processed(folder, strategy: str, converter, rows, **options):
    tok = AutoTokenizer.from_file(folder)
    kwargs = {"converter": converter, "media": "keep", **options.pop("processor", {})}
    p = ProcessorFactory.create_with_strategy_name("sft", tok, strategy, **options, processor_kwargs=kwargs)
    batch = p.process_batch(rows)
    return batch, tok, [decode_media(batch.samples["media"][k]) for k in range(batch.n_samples)]


def test_each_per_turn_sample_lists_the_media_of_its_messages(converter, tmp_path):
    batch, tok, media = processed(family_folder("qwen3", tmp_path), "template", converter, [ROW], rewritten="per_turn")
    assert batch.rows.tolist() == [0, 0]
    assert "Where?" not in tok.decode(batch.samples["sequence"][0].tolist())  # the first renders turn one only
    assert media == [[FIRST], [FIRST, SECOND]]


def test_a_truncated_sample_drops_the_media_of_the_turns_cut_away(converter, tmp_path):
    options = {"processor": {"max_length": 14, "overflow": "truncate"}}
    batch, tok, media = processed(family_folder("qwen2.5", tmp_path), "chatml", converter, [ROW], **options)
    assert batch.truncated == 1 and "Where?" not in tok.decode(batch.samples["sequence"][0].tolist())
    assert media == [[FIRST]]
    full, _, media = processed(family_folder("qwen2.5", tmp_path / "full"), "chatml", converter, [ROW])
    assert media == [[FIRST, SECOND]]


def test_a_cut_the_template_strategy_cannot_place_media_in_is_refused_and_counted(converter, tmp_path):
    """The template strategy marks only trained turns' pieces. Qwen2.5's trains both answers (from
    token 32 and 48 here): a cut at 40 falls before the second, and whether the user turn between
    (holding 2.jpg) stays cannot be told, so the sample is refused (media_cut), not written with a guess."""
    options = {"processor": {"max_length": 40, "overflow": "truncate"}}
    batch, _, _ = processed(family_folder("qwen2.5", tmp_path), "template", converter, [ROW], **options)
    assert [(i, e.reason) for i, e in batch.errors] == [(0, "media_cut")]
    assert batch.n_samples == 0 and batch.truncated == 0


def test_a_cut_inside_the_last_trained_turn_keeps_the_media_before_it(converter, tmp_path):
    """Qwen3 trains the last answer only (from token 27): a cut at 32 is inside it, after both user turns."""
    options = {"processor": {"max_length": 32, "overflow": "truncate"}}
    batch, tok, media = processed(family_folder("qwen3", tmp_path), "template", converter, [ROW], **options)
    assert not batch.errors and batch.truncated == 1
    assert "Where?" in tok.decode(batch.samples["sequence"][0].tolist())
    assert media == [[FIRST, SECOND]]


def test_a_pair_cut_away_from_some_of_its_media_is_refused(tmp_path):
    """A pair stores one media list for both sides; a cut that leaves its sides different media
    (the long chosen answer pushes the last user turn past max_length) cannot be written as one."""
    tok = AutoTokenizer.from_file(family_folder("qwen2.5", tmp_path))

    def side(answer: str) -> list[dict]:
        def ask(text: str, image: str) -> dict:
            return {"role": "user", "content": [{"type": "text", "value": text}, {"type": "image_url", "value": image}]}

        answer_turn = {"role": "assistant", "content": [{"type": "text", "value": answer}]}
        return [ask("look", "a.png"), answer_turn, ask("and this", "b.png")]

    row = {"chosen_messages": side("word " * 40), "rejected_messages": side("no")}
    whole = ProcessorFactory.create("dpo", tok, media="keep").process_batch([row])
    assert [len(decode_media(whole.samples["media"][0]))] == [2] and not whole.errors
    cut = ProcessorFactory.create("dpo", tok, media="keep", max_length=24, overflow="truncate").process_batch([row])
    assert [(i, e.reason) for i, e in cut.errors] == [(0, "media_cut")] and cut.truncated == 0
