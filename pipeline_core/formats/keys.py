"""Which output keys are token-aligned, deferred or per-sample, derived from a processor.

A processor declares ``groups`` (a length key followed by the keys aligned with it, e.g.
``sequence, loss_mask``) and may declare ``deferred_keys`` (float keys such as ``loss_weight``,
aligned with a group, written only when they carry information beyond the mask). Every other key
a batch holds (e.g. ``media``, UTF-8 JSON per sample) is per-sample: one item per sample, not one
value per token.

A deferred key belongs to the group that lists it, else to the group whose length key prefixes its
name (``chosen_weight`` -> ``chosen``), else to the only group.

Packed outputs name the keys of every group by role, so a DPO pair packs as documents of one
layout: the length key becomes ``sequence`` and ``{length key}_{x}`` becomes ``loss_{x}``
(``chosen_mask`` -> ``loss_mask``). A single-group processor keeps its own names.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from pipeline_core.errors import ConfigError
from pipeline_core.formats.ragged import Ragged, offsets_from_lengths

# Split-sentence pt output: per document, how many tokens each of its sentences has.
SENTENCE_LENGTHS = "sentence_lengths"


@dataclass(frozen=True, slots=True)
class KeyLayout:
    groups: dict[str, tuple[str, ...]]  # length key -> aligned keys (length key first), deferred included
    deferred: tuple[str, ...]

    @classmethod
    def of(cls, processor) -> KeyLayout:
        groups = {length: tuple(keys) for length, keys in processor.groups.items()}
        deferred = tuple(getattr(processor, "deferred_keys", ()))
        for key in deferred:
            length = _group_of(key, groups)
            if key not in groups[length]:
                groups[length] = (*groups[length], key)
        return cls(groups, deferred)

    @property
    def aligned(self) -> tuple[str, ...]:
        return tuple(k for keys in self.groups.values() for k in keys)

    def per_sample(self, keys: Iterable[str]) -> list[str]:
        return [k for k in keys if k not in self.aligned]

    def pack_groups(self) -> list[dict[str, str]]:
        """Per group: packed output key -> processor key (see the module docstring)."""
        if len(self.groups) == 1:
            [keys] = self.groups.values()
            return [{k: k for k in keys}]
        packed = [{_role(k, length): k for k in keys} for length, keys in self.groups.items()]
        if len({frozenset(g) for g in packed}) > 1:
            raise ConfigError(
                f"groups {self.groups} do not share one layout; name the keys of every group "
                "'{length key}_mask', '{length key}_weight', ... so their documents can share packs"
            )
        return packed

    def packed_id_keys(self) -> list[str]:
        """The packed keys that hold token ids (each group's length key, under its packed name)."""
        return sorted({out for group in self.pack_groups() for out, source in group.items() if source in self.groups})

    def packed_name(self, key: str) -> str:
        for group in self.pack_groups():
            for out, source in group.items():
                if source == key:
                    return out
        return key


def _group_of(key: str, groups: dict[str, tuple[str, ...]]) -> str:
    listed = [length for length, keys in groups.items() if key in keys]
    named = [length for length in groups if key.startswith(length + "_")]
    found = listed or named or (list(groups) if len(groups) == 1 else [])
    if len(found) != 1:
        raise ConfigError(
            f"deferred key {key!r} matches no single group of {sorted(groups)}; "
            "list it in the processor's groups beside the sequence it is aligned with"
        )
    return found[0]


def _role(key: str, length: str) -> str:
    if key == length:
        return "sequence"
    if key.startswith(length + "_"):
        return "loss_" + key[len(length) + 1 :]
    raise ConfigError(f"key {key!r} of group {length!r} must be named '{length}_...' to be packed with other groups")


def sentence_items(samples: dict[str, Ragged]) -> tuple[Ragged, np.ndarray]:
    """(one token sequence per sentence, sentences per document) from SentenceProcessor samples."""
    per_doc = samples[SENTENCE_LENGTHS]
    return Ragged(samples["sequence"].values, offsets_from_lengths(per_doc.values)), per_doc.lengths
