"""Processors: rows in, token sequences with their masks out.

Owns the processor protocol and registry (``base``), the built-in processors (``pt`` pretraining
text, ``sentences`` split-sentence text, ``sft`` and ``dpo`` conversations, with the shared
``conversation``, ``messages``, ``fast_pairs``, ``media`` and ``length`` helpers), the
``TextNormalizer`` applied before tokenizing (``normalize``) and building a processor from plain
settings (``build``).

Importing this package registers the built-ins with ``ProcessorFactory``.

May import: ``errors``, ``formats``, ``tokenizer``, ``converters``, ``chat``.
"""

from pipeline_core.processors import dpo, pt, sft  # noqa: F401  (registration)
from pipeline_core.processors.base import ProcessedBatch, Processor, ProcessorFactory

__all__ = ["ProcessedBatch", "Processor", "ProcessorFactory"]
