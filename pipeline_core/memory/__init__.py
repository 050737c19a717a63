"""Process memory: giving freed heap pages back to the OS between batches (``heap``).

A package of its own because both the tokenizer (gigatoken rebuilds) and the cache stage use it,
and it belongs to neither.

May import: nothing else in the core.
"""
