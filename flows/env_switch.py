"""A choice read from one environment variable, the same way for every switch h5pipe has
(``H5PIPE_SERVER``, ``H5PIPE_WARM``): case and surrounding spaces ignored, empty means the
default, anything else outside the choices is refused naming them.

Standard library only: the warm client (flows/warm/) imports this before anything heavy.
"""

from __future__ import annotations

import os


def env_choice(name: str, choices: tuple[str, ...], error: type[Exception] = ValueError, default: str = "auto") -> str:
    value = os.environ.get(name, default).strip().lower() or default
    if value not in choices:
        raise error(f"{name}={value!r} is not one of {', '.join(choices)}; unset it for {default!r}")
    return value
