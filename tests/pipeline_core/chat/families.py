"""Test tokenizers for real model families: GPT-2 plus each family's control tokens (fixtures README).

``family_folder(name, tmp)`` writes tokenizer.json (GPT-2 with the family's special tokens added)
and tokenizer_config.json (its template, bos/eos/pad) to a folder that both h5pipe's
``AutoTokenizer.from_file`` and transformers' ``PreTrainedTokenizerFast`` load: the reference.
``metaspace_folder`` builds a small SentencePiece-style (Metaspace, ``▁``) BPE for Mistral.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from tests.pipeline_core.tokenizer.backend_corpora import FIXTURES, GPT2, corpus_strings, require_fixtures

TEMPLATES = FIXTURES / "chat_templates"
FAMILY_NAMES = ("qwen2.5", "qwen3", "llama3.1", "gemma", "mistral", "phi3.5")


def families() -> dict:
    require_fixtures()
    return json.loads((TEMPLATES / "families.json").read_text(encoding="utf-8"))


def template_text(name: str) -> str:
    return (TEMPLATES / families()[name]["template"]).read_text(encoding="utf-8")


def family_folder(name: str, folder: Path, template: str | None = None, base: Tokenizer | None = None) -> Path:
    family = families()[name]
    tok = base or Tokenizer.from_file(str(GPT2))
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in family["special_tokens"]])
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    config = {f"{r}_token": family[f"{r}_token"] for r in ("bos", "eos", "pad")}
    config["chat_template"] = template if template is not None else template_text(name)
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    (folder / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False), encoding="utf-8")
    return folder


def metaspace_tokenizer() -> Tokenizer:
    """A Llama-2/Mistral-style BPE: Metaspace pre-tokenizer (``▁`` for spaces, prepended), trained on c4."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tok.decoder = decoders.Sequence(
        [decoders.Metaspace(replacement="▁", prepend_scheme="first"), decoders.ByteFallback()]
    )
    alphabet = [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=["<unk>", *alphabet], show_progress=False)
    tok.train_from_iterator(corpus_strings("c4_demo.jsonl"), trainer)
    return tok


def legacy_llama2_tokenizer() -> Tokenizer:
    """The older Llama-2 layout: no pre-tokenizer, a normalizer that prepends ``▁`` and replaces spaces."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    steps = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    tok.decoder = decoders.Sequence(steps)
    alphabet = [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=["<unk>", *alphabet], show_progress=False)
    tok.train_from_iterator(corpus_strings("c4_demo.jsonl"), trainer)
    return tok


def reference(folder: Path):
    """transformers' tokenizer for the folder: the independent reference."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(str(folder))
