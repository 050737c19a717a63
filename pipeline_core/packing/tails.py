"""What packing chunk by chunk costs: every chunk pads its own last pack.

The cache stage packs each input chunk into its own file, so a run of ``k`` chunks needs at
least ``sum(ceil(t_i / P))`` packs where one stream of all its tokens needs ``ceil(sum(t_i) / P)``
(``t_i``: real tokens of chunk ``i``, ``P``: pack size). The difference, ``tail_packs``, is at most
``k - 1`` packs; it is exactly the packs concat packing loses to chunk boundaries (concat fills
every pack but the last), and for bfd the part of its gap to the lower bound that chunks cause.
With many small chunks it is most of the padding (utilisation 0.90 at 1,000 chunks of ~9 packs),
so the run summary reports it and the flow warns (``TAIL_WARNING``); the cure is fewer, larger
chunks (docs/formats.md, "Packing and chunk size").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

TAIL_WARNING = 0.01  # warn when chunk tails are more than this share of the packs


@dataclass(frozen=True, slots=True)
class ChunkTails:
    """Packs a run spends on chunk tails, and the utilisation one stream would reach."""

    packs: int  # packs the run wrote
    tail_packs: int  # per-chunk lower bounds minus the one-stream lower bound
    one_stream_utilisation: float  # real tokens / (ceil(all tokens / P) * P)

    @property
    def share(self) -> float:
        return self.tail_packs / self.packs if self.packs else 0.0

    @property
    def worth_warning(self) -> bool:
        return self.share > TAIL_WARNING


def chunk_tails(tokens: Sequence[int], packs: int, pack_size: int) -> ChunkTails:
    """``tokens``: real (packed) tokens of each chunk; ``packs``: packs written over all of them."""
    if pack_size <= 0 or not tokens:
        return ChunkTails(packs, 0, 0.0)
    per_chunk = sum(math.ceil(t / pack_size) for t in tokens)
    one_stream = math.ceil(sum(tokens) / pack_size)
    utilisation = sum(tokens) / (one_stream * pack_size) if one_stream else 0.0
    return ChunkTails(packs, per_chunk - one_stream, utilisation)
