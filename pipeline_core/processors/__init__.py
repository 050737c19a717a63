"""Processors turn rows into token sequences; importing this package registers the built-ins."""

from pipeline_core.processors import dpo, pt, sft  # noqa: F401  (registration)
from pipeline_core.processors.base import ProcessedBatch, Processor, ProcessorFactory

__all__ = ["ProcessedBatch", "Processor", "ProcessorFactory"]
