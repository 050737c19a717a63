"""Many small chunks each pad a tail: the run summary counts the packs it costs and the utilisation
one stream would reach (checked by caching the same rows as one chunk), and the flow warns."""

from __future__ import annotations

from flows.cache_flow import cache_flow
from flows.reporting import tail_warning
from tests.conftest import load_json_or_jsonl
from tests.flows.test_cache_flow import params, write_chunks


def test_small_chunks_count_their_tails_against_one_stream(gpt2_path, llamafactory, tmp_path):
    rows = load_json_or_jsonl(llamafactory / "c4_demo.jsonl")
    small = write_chunks(tmp_path / "small", rows, 30)
    whole = write_chunks(tmp_path / "whole", rows, 1)
    pack = {"pack_size": 256, "pad_value": 0}
    apart = cache_flow(params(gpt2_path, small, tmp_path / "o_small", **pack))["summary"]
    one = cache_flow(params(gpt2_path, whole, tmp_path / "o_whole", **pack))["summary"]
    assert one["chunk_tail_packs"] == 0 and tail_warning(one) is None
    assert apart["chunk_tail_packs"] == apart["packs"] - one["packs"] > 0  # concat: exactly the extra packs
    assert apart["one_stream_pack_utilisation"] == one["pack_utilisation"] > apart["pack_utilisation"]
    warning = tail_warning(apart)
    assert warning and f"{apart['chunk_tail_packs']} of {apart['packs']} packs are chunk tails" in warning
    assert "chunk_size" in warning
