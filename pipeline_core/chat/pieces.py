"""A rendered conversation: the runs of one token sequence, before encoding.

A strategy renders a conversation as a list of ``Piece`` s, in order. A piece is either *user text*
(``text``, encoded later as plain text, in one tokenizer call for the whole batch) or *format
tokens* (``ids``, already encoded as markup so ``<｜im▁start｜>`` is its special id). Each piece
names the message it belongs to and whether it is part of that message's training ``target``
(an assistant turn's content and end tokens). The processor turns targets into loss weights::

    pieces   <｜im▁start｜>user\\n | hi | <｜im▁end｜>\\n<｜im▁start｜>assistant\\n | hello | <｜im▁end｜>\\n
    message  0                 | 0  | 0                                  | 1     | 1
    target   False             | F  | False                              | True  | True
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class Piece:
    text: str = ""  # user text, encoded as text; ignored when ids is set
    ids: np.ndarray | None = None  # format tokens, already encoded (int32)
    message: int = -1  # index of the owning message, -1 for none
    target: bool = False  # inside the owner's trained span (its loss weight applies)

    @property
    def is_markup(self) -> bool:
        return self.ids is not None
