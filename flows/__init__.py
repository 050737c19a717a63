"""Prefect flows composing the tasks: export, cache and the two together."""
