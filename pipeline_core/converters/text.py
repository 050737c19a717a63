"""Pretraining rows: the text column passes through as ``{"text": ...}``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipeline_core.converters.fields import as_row, required_str
from pipeline_core.converters.registry import ConverterFactory
from pipeline_core.converters.sample import TextSample
from pipeline_core.errors import RowError


@ConverterFactory.register("text")
@dataclass(frozen=True, slots=True)
class TextConverter:
    column: str = "text"

    def __call__(self, row: Mapping[str, Any]) -> TextSample:
        text = required_str(as_row(row), self.column)
        if not text.strip():
            raise RowError("empty_text", f"{self.column} is empty; expected document text", self.column)
        return {"text": text}
