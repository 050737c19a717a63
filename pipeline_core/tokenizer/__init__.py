"""The tokenizer: ``AutoTokenizer`` and the encode backends behind it.

Owns loading a HuggingFace ``tokenizer.json`` (with its ``tokenizer_config.json`` roles and chat
template), training a small BPE, the two encode backends (``tokenizers``, the reference, and
gigatoken, the fast one) and the checks that let the fast one serve only where it agrees with the
reference id for id: the probe texts, the per-machine verdicts and the records derived from a
``tokenizer.json``.

Reading order: ``auto`` (the user-facing class), ``backends`` (which backend serves), ``probe`` and
``verdicts`` (why it may), ``gigatoken``, ``derived`` and ``encode_pool`` (the fast backend's own
needs: its JSON, and whether a batch uses gigatoken's thread pool).

The Jinja rendering of a chat template lives here (``chat_template``), not in ``chat``: the template
travels with the tokenizer, and ``AutoTokenizer.apply_chat_template`` renders it as transformers'
tokenizers do, so ``chat`` can build on the tokenizer without the tokenizer importing ``chat``.

May import: ``errors``, ``storage`` (the records folder), ``formats.ragged``, ``memory``.
"""

from pipeline_core.tokenizer.auto import AutoTokenizer

__all__ = ["AutoTokenizer"]
