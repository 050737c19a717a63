"""The conversation prelude: a system message from the `system` column, carrying the tools block."""

from __future__ import annotations

from pipeline_core.converters.sample import Message, block, message, text_message

# how a system column meets a conversation that starts with a system turn (LLaMA-Factory's rule); in
# the repr of the converters that read a system column beside turns, so outputs made before it
# (both were kept, as two system messages) get other cache keys
LEADING_SYSTEM = "turn_over_column"


def with_system(messages: list[Message], system: str | None, tools: str | None) -> list[Message]:
    """Prepend the system text, then add the tools block to the leading system message.

    A conversation that starts with a system turn keeps it and the system column is not read, as
    LLaMA-Factory's converters do (it takes that turn as the system prompt). When the conversation
    has no leading system message, the tools get one of their own.
    """
    if system and not (messages and messages[0]["role"] == "system"):
        messages = [text_message("system", system), *messages]
    if tools:
        messages = _with_tools(messages, tools)
    return messages


def _with_tools(messages: list[Message], tools: str) -> list[Message]:
    tools_block = block("tools", tools)
    if messages and messages[0]["role"] == "system":
        first = messages[0]
        return [{**first, "content": [*first["content"], tools_block]}, *messages[1:]]
    return [message("system", [tools_block]), *messages]
