"""A tokenizer folder as transformers lays it out: where ``tokenizer.json`` is, what
``tokenizer_config.json`` says, and every chat template the folder holds, by name.

Every path is an fsspec URL, so a folder on S3 reads as a local one.
"""

from __future__ import annotations

import json

import fsspec

from pipeline_core.errors import ConfigError


def locate(path: str) -> tuple[str | None, str]:
    """(folder holding the tokenizer or None, URL of tokenizer.json)."""
    fs, root = fsspec.core.url_to_fs(path)
    protocol = path.split("://")[0] + "://" if "://" in path else ""
    if fs.isdir(root):
        if not fs.exists(f"{root}/tokenizer.json"):
            raise FileNotFoundError(f"{path} is a folder without tokenizer.json")
        return f"{protocol}{root}", f"{protocol}{root}/tokenizer.json"
    if not fs.exists(root):
        raise FileNotFoundError(f"no tokenizer at {path}; give a tokenizer.json or a folder holding one")
    folder = root.rsplit("/", 1)[0] if "/" in root else "."
    has_config = fs.exists(f"{folder}/tokenizer_config.json")
    return (f"{protocol}{folder}" if has_config else None), f"{protocol}{root}"


def read_config(folder: str) -> dict:
    """tokenizer_config.json, with the named tokens of a legacy ``special_tokens_map.json`` over it
    as transformers reads them: only when the config has no ``added_tokens_decoder`` (then the map's
    ``eos_token`` etc. win over the config's)."""
    config = _read_json(f"{folder}/tokenizer_config.json") or {}
    legacy = None if "added_tokens_decoder" in config else _read_json(f"{folder}/special_tokens_map.json")
    named = {k: v for k, v in (legacy or {}).items() if k.endswith("_token")}
    return config | named


def _read_json(url: str) -> dict | None:
    fs, root = fsspec.core.url_to_fs(url)
    if not fs.exists(root):
        return None
    with fs.open(root, "r", encoding="utf-8") as f:
        return json.load(f)


def token_content(value) -> str | None:
    """tokenizer_config.json stores a role as a string or as an AddedToken dict."""
    if isinstance(value, dict):
        return value.get("content")
    return value


# transformers' folder of named templates (``CHAT_TEMPLATE_DIR``): it saves every template but the
# default there, ``{name}.jinja``, and reads no other folder
TEMPLATE_DIR = "additional_chat_templates"
OLD_TEMPLATE_DIR = "chat_templates"  # read by h5pipe before; transformers never reads it


def chat_templates_of(folder: str, config: dict) -> dict[str, str]:
    """Every chat template of the folder by name, as transformers loads them: ``chat_template.jinja``
    (the default) and ``additional_chat_templates/*.jinja`` beside tokenizer_config.json win over
    its ``chat_template`` entry (a string, or a list of ``{"name", "template"}``)."""
    files = template_files(folder)
    if files:
        return files
    template = config.get("chat_template")
    if isinstance(template, list):
        return {t.get("name"): t.get("template") for t in template if t.get("template")}
    return {"default": template} if template else {}


def template_files(folder: str) -> dict[str, str]:
    fs, root = fsspec.core.url_to_fs(folder)
    found: dict[str, str] = {}
    if fs.exists(f"{root}/chat_template.jinja"):
        found["default"] = read_text(fs, f"{root}/chat_template.jinja")
    for path in named_template_paths(fs, root):
        found[path.rsplit("/", 1)[-1].removesuffix(".jinja")] = read_text(fs, path)
    return found


def named_template_paths(fs, root: str) -> list[str]:
    """The named templates' files; refuses a ``chat_templates/`` folder of them, which transformers
    ignores (rendering them would make data the model's own tokenizer never formats)."""
    old = sorted(fs.glob(f"{root}/{OLD_TEMPLATE_DIR}/*.jinja")) if fs.isdir(f"{root}/{OLD_TEMPLATE_DIR}") else []
    if old:
        raise ConfigError(
            f"{root}/{OLD_TEMPLATE_DIR}/ holds named chat templates ({', '.join(p.rsplit('/', 1)[-1] for p in old)}), "
            f"a folder transformers does not read: it loads and saves them in {TEMPLATE_DIR}/. Move them there "
            "(or save the tokenizer again with transformers) so h5pipe and your trainer render the same templates"
        )
    return sorted(fs.glob(f"{root}/{TEMPLATE_DIR}/*.jinja")) if fs.isdir(f"{root}/{TEMPLATE_DIR}") else []


def read_text(fs, path: str) -> str:
    with fs.open(path, "r", encoding="utf-8") as f:
        return f.read()
