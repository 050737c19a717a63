"""AutoTokenizer: a HuggingFace `tokenizers` tokenizer plus the roles a pipeline needs.

Roles (bos/eos/pad) name tokens of the vocabulary; they come from ``tokenizer_config.json`` when
the folder has one and can be overridden by keyword. Two encoders are kept:

- ``encode`` / ``encode_batch`` / ``encode_ragged`` for *user text*: special-token strings in the
  text are encoded as plain text (see backends.py), so data cannot smuggle in control tokens;
- ``encode_markup`` for *format strings and rendered templates* written by the pipeline itself,
  where ``<｜im▁start｜>`` must become its single special id.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import fsspec
import numpy as np
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

from pipeline_core.formats.ragged import Ragged
from pipeline_core.tokenizer.backends import create_backend
from pipeline_core.tokenizer.chat_template import render_chat_template
from pipeline_core.tokenizer.derived import fingerprint as derived_fingerprint
from pipeline_core.tokenizer.folder import chat_templates_of, locate, read_config, token_content
from pipeline_core.tokenizer.protocol import EncodeBackend

ROLES = ("bos", "eos", "pad")
# transformers' other named special tokens: passed to chat templates as {name}_token (as its
# special_tokens_map is), no role in h5pipe's processing
TEMPLATE_TOKENS = ("unk", "sep", "cls", "mask")
BOS_TOKEN = "<｜begin▁of▁sentence｜>"
EOS_TOKEN = "<｜end▁of▁sentence｜>"
PAD_TOKEN = "<｜▁pad▁｜>"
IM_START = "<｜im▁start｜>"
IM_END = "<｜im▁end｜>"
TRAINED_SPECIAL_TOKENS = (BOS_TOKEN, EOS_TOKEN, PAD_TOKEN, IM_START, IM_END)


class AutoTokenizer:
    """A HuggingFace ``tokenizer.json`` with its roles and chat template, encoding through the fastest exact backend.

        tok = AutoTokenizer.from_file("tokenizer.json")      # tokenizer_config.json beside it is read too
        tok.encode_ragged(["hello", "world"])                # Ragged int32 ids (encode_batch: lists)
        tok.encode_markup("<|im_start|>user\\n")            # format text: special tokens become their ids
        tok.eos_token_id, tok.pad_token_id, tok.chat_template

    Two encoders sit behind one interface: user text goes through ``encode_ragged`` (special-token
    strings in data are encoded as ordinary text, so data can never smuggle in a control token) and
    strategies' markup through ``encode_markup``. ``backend="auto"`` serves user text with gigatoken
    when it reproduces the ``tokenizers`` library id for id on the probe texts (see
    ``tokenizer.backends``), else with ``tokenizers`` itself; ``fingerprint`` names the vocabulary
    and roles and keys every cache built with this tokenizer.
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        roles: dict[str, str | None] | None = None,
        chat_template: str | None = None,
        backend: str = "auto",
        source: str = "(built in memory)",
    ) -> None:
        self.source = source  # where it was loaded from, for messages
        self._markup = tokenizer
        self._json = tokenizer.to_str()
        self._backend_choice = backend
        self._backend: EncodeBackend = create_backend(self._json, backend)
        self._roles: dict[str, str] = {}
        self._fingerprint: str | None = None
        self._user_text_offsets: Tokenizer | None = None  # built by encode_with_starts when asked
        self.chat_template = chat_template
        # named templates ({"default": ..., "tool_use": ...}) when the model ships several
        self.named_chat_templates: dict[str, str] = {}
        # tokenizer_config.json's unk/sep/cls/mask tokens ({"sep_token": "<sep>"}), for chat templates
        self.template_tokens: dict[str, str] = {}
        for role, token in (roles or {}).items():
            self._set_role(role, token)

    # ---- construction -------------------------------------------------------------------
    @classmethod
    def from_file(cls, path: str | Path, backend: str = "auto", **roles: str) -> AutoTokenizer:
        """Load ``tokenizer.json`` (or a folder holding it, with optional tokenizer_config.json)."""
        folder, json_url = locate(str(path))
        with fsspec.open(json_url, "r", encoding="utf-8") as f:
            tokenizer = Tokenizer.from_str(f.read())
        config = read_config(folder) if folder else {}
        merged = {r: token_content(config.get(f"{r}_token")) for r in ROLES}
        merged.update({_role_name(k): v for k, v in roles.items()})
        named = chat_templates_of(folder, config) if folder else {}
        default = named.get("default") if len(named) != 1 else next(iter(named.values()))
        tok = cls(tokenizer, merged, default, backend, source=str(path))
        tok.named_chat_templates = named if len(named) > 1 else {}
        tok.template_tokens = _template_tokens(config)
        return tok

    @classmethod
    def from_pretrained(cls, path: str | Path, backend: str = "auto", **roles: str) -> AutoTokenizer:
        """transformers' name for ``from_file``: a local folder (or fsspec URL) holding ``tokenizer.json``
        and optionally ``tokenizer_config.json``. Nothing is downloaded: a hub id is refused with the fix."""
        text = str(path)
        if "://" not in text and not os.path.exists(os.path.expanduser(text)):
            raise FileNotFoundError(
                f"no tokenizer folder at {text!r}; h5pipe reads local tokenizers only: download it first "
                f"(huggingface-cli download {text} tokenizer.json tokenizer_config.json --local-dir DIR) and pass DIR"
            )
        return cls.from_file(path, backend, **roles)

    @classmethod
    def train(
        cls, texts_or_files: Iterable[str] | str | Path, vocab_size: int, min_frequency: int = 2
    ) -> AutoTokenizer:
        """Train a byte-level BPE with the built-in control and ChatML tokens."""
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        special = [AddedToken(t, special=True, normalized=False) for t in TRAINED_SPECIAL_TOKENS]
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=special,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        if isinstance(texts_or_files, (str, Path)):
            tok.train([str(texts_or_files)], trainer)
        else:
            tok.train_from_iterator(texts_or_files, trainer)
        return cls(tok, {"bos": BOS_TOKEN, "eos": EOS_TOKEN, "pad": PAD_TOKEN})

    def save(self, folder: str | Path) -> None:
        fs, root = fsspec.core.url_to_fs(str(folder))
        fs.makedirs(root, exist_ok=True)
        with fs.open(f"{root}/tokenizer.json", "w", encoding="utf-8") as f:
            f.write(self._json)
        config = {f"{r}_token": self._roles.get(r) for r in ROLES} | self.template_tokens
        if self.chat_template:
            config["chat_template"] = self.chat_template
        with fs.open(f"{root}/tokenizer_config.json", "w", encoding="utf-8") as f:
            json.dump(config, f, ensure_ascii=False, indent=2)

    # ---- encoding -----------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        return self._backend.encode_batch([text])[0].tolist()

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return self.encode_ragged(texts).to_lists()

    def encode_ragged(self, texts: Sequence[str]) -> Ragged:
        """The hot path: a whole batch in one backend call, as flat ids plus offsets."""
        return self._backend.encode_batch(list(texts))

    def encode_with_starts(self, texts: Sequence[str]) -> tuple[Ragged, Ragged]:
        """User texts as ``encode_ragged`` encodes them (by ``tokenizers``, the reference), and the
        first character of each token in its text: where a text can be cut between its tokens."""
        if self._user_text_offsets is None:
            self._user_text_offsets = Tokenizer.from_str(self._json)
            self._user_text_offsets.encode_special_tokens = True  # data is text, as in every backend
        encodings = self._user_text_offsets.encode_batch(list(texts), add_special_tokens=False)
        starts = Ragged.from_lists(([start for start, _ in e.offsets] for e in encodings), dtype=np.int64)
        return Ragged.from_lists(e.ids for e in encodings), starts

    def encode_markup(self, text: str) -> list[int]:
        """Encode pipeline-written text: special-token strings become their special ids."""
        return self._markup.encode(text, add_special_tokens=False).ids

    def encode_markup_with_offsets(self, text: str) -> tuple[list[int], list[int]]:
        """``encode_markup(text)`` and the start character of each token in ``text``."""
        encoding = self._markup.encode(text, add_special_tokens=False)
        return encoding.ids, [start for start, _ in encoding.offsets]

    def encode_markup_batch_with_offsets(self, texts: Sequence[str]) -> list[tuple[np.ndarray, list[tuple[int, int]]]]:
        """Per text: ``encode_markup(text)`` as int32 ids and each token's (start, end) character in
        it; one call for the whole batch (the tokenizer's own threads)."""
        encodings = self._markup.encode_batch(list(texts), add_special_tokens=False)
        return [(np.asarray(e.ids, dtype=np.int32), e.offsets) for e in encodings]

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        return self._markup.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    @property
    def backend_name(self) -> str:
        return self._backend.name

    @property
    def vocab_size(self) -> int:
        return self._markup.get_vocab_size(with_added_tokens=True)

    def token_to_id(self, token: str) -> int | None:
        return self._markup.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self._markup.id_to_token(token_id)

    @property
    def tokenizer_json(self) -> str:
        """The tokenizer.json text this tokenizer was built from."""
        return self._json

    @property
    def added_tokens(self) -> dict:
        """Every added token (special or not) by id, as ``tokenizers.AddedToken`` s."""
        return dict(self._markup.get_added_tokens_decoder())

    @property
    def special_tokens(self) -> list[str]:
        return [t.content for t in self._markup.get_added_tokens_decoder().values() if t.special]

    # ---- roles --------------------------------------------------------------------------
    def _set_role(self, role: str, token: str | None) -> None:
        if role not in ROLES:
            raise ValueError(f"unknown tokenizer role {role!r}; roles are {', '.join(ROLES)}")
        self._fingerprint = None
        if token is None:
            self._roles.pop(role, None)
            return
        if self._markup.token_to_id(token) is None:
            raise ValueError(
                f"{role}_token {token!r} is not in the tokenizer's vocabulary; roles that can be "
                f"set: {', '.join(r + '_token' for r in ROLES)}; special tokens of this "
                f"tokenizer: {self.special_tokens}"
            )
        self._roles[role] = token

    def __getattr__(self, name: str):
        role, _, kind = name.partition("_")
        if name == "pad_id":
            role, kind = "pad", "token_id"
        if role in ROLES and kind in ("token", "token_id") and not name.startswith("__"):
            token = self.__dict__.get("_roles", {}).get(role)
            if token is None:
                raise AttributeError(
                    f"this tokenizer has no {role}_token; pass {role}_token=... to "
                    f"AutoTokenizer.from_file or set it in tokenizer_config.json"
                )
            return token if kind == "token" else self._markup.token_to_id(token)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def has_role(self, role: str) -> bool:
        return role in self._roles

    @property
    def roles(self) -> dict[str, str]:
        return dict(self._roles)

    @property
    def stop_ids(self) -> list[int]:
        """Ids that end a generation: eos, plus the ChatML end tokens the vocabulary has (either spelling)."""
        ids = [self.eos_token_id]
        for token in ("<|im_end|>", IM_END):
            found = self._markup.token_to_id(token)
            if found is not None and found not in ids:
                ids.append(found)
        return ids

    # ---- chat templates -----------------------------------------------------------------
    def set_chat_template(self, jinja_source: str) -> None:
        self.chat_template = jinja_source
        self.named_chat_templates = {}

    def select_chat_template(self, tools) -> str | None:
        """The template transformers' ``get_chat_template`` picks: with named templates, ``tool_use``
        when tools are given (not None) and it exists, else ``default``; else the one template."""
        named = self.named_chat_templates
        if not named:
            return self.chat_template
        if tools is not None and "tool_use" in named:
            return named["tool_use"]
        if "default" in named:
            return named["default"]
        raise ValueError(
            f"this tokenizer has named chat templates {sorted(named)} and none is 'default'; pass template=..."
        )

    def apply_chat_template(
        self,
        messages: list[dict],
        add_generation_prompt: bool = False,
        tokenize: bool = True,
        tools: list[dict] | None = None,
        **variables,
    ) -> str | list[int]:
        if not self.chat_template:
            raise ValueError(
                "this tokenizer has no chat_template; call set_chat_template(...) or add "
                "'chat_template' to tokenizer_config.json"
            )
        text = render_chat_template(
            self.chat_template, messages, add_generation_prompt, tools, **self.template_variables(), **variables
        )
        return self.encode_markup(text) if tokenize else text

    def template_variables(self) -> dict[str, str]:
        """What a chat template gets besides the messages, as from transformers (its
        ``special_tokens_map``): every named special token the tokenizer has, ``bos_token`` to ``mask_token``."""
        return self.template_tokens | {f"{role}_token": token for role, token in self._roles.items()}

    # ---- identity -----------------------------------------------------------------------
    @property
    def fingerprint(self) -> str:
        """sha256 of the canonical tokenizer.json plus the roles: the tokenizer part of cache keys.

        Recorded per tokenizer.json and roles (tokenizer_derived.py); roles are fixed after construction.
        """
        if self._fingerprint is None:
            self._fingerprint = derived_fingerprint(self._json, json.dumps(self._roles, sort_keys=True))
        return self._fingerprint

    def __repr__(self) -> str:
        return f"AutoTokenizer(vocab_size={self.vocab_size}, roles={self._roles}, backend={self.backend_name})"


def _template_tokens(config: dict) -> dict[str, str]:
    """The TEMPLATE_TOKENS tokenizer_config.json names, as ``{"sep_token": "<sep>"}``."""
    found = {f"{name}_token": token_content(config.get(f"{name}_token")) for name in TEMPLATE_TOKENS}
    return {key: str(token) for key, token in found.items() if token is not None}


def _role_name(keyword: str) -> str:
    if not keyword.endswith("_token"):
        raise TypeError(f"unexpected keyword {keyword!r}; roles are {', '.join(r + '_token' for r in ROLES)}")
    return keyword[: -len("_token")]
