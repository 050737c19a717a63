"""Converters: raw rows in LLaMA-Factory's dataset shapes -> the standard v1 messages sample.

    convert = ConverterFactory.create("sharegpt", tags={"role_tag": "role"})
    convert = converter_from_dataset_info(dataset_info["mllm_demo"])
    sample = convert(row)  # {"messages": [...]}; raises RowError(reason, message, field)

Registered converters: alpaca, sharegpt, openai, messages (v1, validated), pair (alias dpo) and
text (pretraining passthrough). Pure Python; no orchestration imports.

May import: ``errors`` only, so that sources, chat and processors can all build on the sample types.
"""

from pipeline_core.converters.alpaca import AlpacaColumns, AlpacaConverter
from pipeline_core.converters.dataset_info import (
    converter_from_dataset_info,
    converter_spec,
)
from pipeline_core.converters.media import MEDIA_KINDS, MediaKind
from pipeline_core.converters.messages import MessagesConverter, validate_message
from pipeline_core.converters.openai import OpenAIColumns, OpenAIConverter
from pipeline_core.converters.pair import PairColumns, PairConverter
from pipeline_core.converters.registry import Converter, ConverterFactory
from pipeline_core.converters.sample import (
    CONTENT_TYPES,
    MESSAGE_FIELDS,
    ROLES,
    ContentBlock,
    ContentType,
    Message,
    MessageFields,
    PairSample,
    Role,
    SFTSample,
    TextSample,
    default_loss_weight,
)
from pipeline_core.converters.sharegpt import (
    ShareGPTColumns,
    ShareGPTConverter,
    ShareGPTTags,
)
from pipeline_core.converters.text import TextConverter

__all__ = [
    "CONTENT_TYPES",
    "MEDIA_KINDS",
    "MESSAGE_FIELDS",
    "ROLES",
    "AlpacaColumns",
    "AlpacaConverter",
    "ContentBlock",
    "ContentType",
    "Converter",
    "ConverterFactory",
    "MediaKind",
    "Message",
    "MessageFields",
    "MessagesConverter",
    "OpenAIColumns",
    "OpenAIConverter",
    "PairColumns",
    "PairConverter",
    "PairSample",
    "Role",
    "SFTSample",
    "ShareGPTColumns",
    "ShareGPTConverter",
    "ShareGPTTags",
    "TextConverter",
    "TextSample",
    "converter_from_dataset_info",
    "converter_spec",
    "default_loss_weight",
    "validate_message",
]
