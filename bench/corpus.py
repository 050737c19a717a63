"""The benchmark corpus, built without network: this Python's stdlib sources plus the shared
fixture texts, written as JSONL chunks in three shapes made from the same documents.

::

    pt/train_chunk_{i}.jsonl   {"text": doc}
    sft/train_chunk_{i}.jsonl  {"query": doc[:~1/3], "response": doc[~1/3:]}          (alpaca-style)
    dpo/train_chunk_{i}.jsonl  {"query": doc[:~1/5], "chosen": ..., "rejected": ...}  (1/5, 2/5, 2/5)

Documents are the stdlib ``.py`` files cut at line ends into pieces of at most DOC_CHARS, and
every fixture string of at least MIN_CHARS (C4 web text, Alpaca, ShareGPT chat, tool calls),
shuffled together once. When the requested size exceeds one pass (~35 MB), later passes repeat
the documents with a suffix line of pseudo-random words, so the encoders keep meeting new
pretokens instead of replaying a warm cache. ``manifest.json`` records what was built; a folder
whose manifest matches is reused.
"""

from __future__ import annotations

import json
import sysconfig
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import orjson

from bench.backend_corpus import _strings  # noqa: E402 - one walker of nested JSON strings for both corpora

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures"
GPT2 = FIXTURES / "tokenizers" / "gpt2" / "tokenizer.json"
GPT2_EOS = "<|endoftext|>"
FIXTURE_FILES = (
    "c4_demo.jsonl",
    "alpaca_en_demo.json",
    "dpo_en_demo.json",
    "glaive_toolcall_en_demo.json",
    "v1_sft_demo.jsonl",
    "identity.json",
)
DOC_CHARS = 8_000
MIN_CHARS = 32
MB = 1 << 20
SHAPES = ("pt", "sft", "dpo", "turns")
FORMAT = 1  # bump when the corpus recipe changes, so old folders are rebuilt


@dataclass(frozen=True)
class CorpusSpec:
    """``chunks > 0`` deals the rows round-robin into that many files instead of cutting every
    ``chunk_mb``."""

    size_mb: float
    chunk_mb: float
    seed: int = 0
    chunks: int = 0
    stationary: bool = False  # see documents()
    format: int = FORMAT

    @property
    def total_bytes(self) -> int:
        return int(self.size_mb * MB)


@dataclass
class Corpus:
    """A built corpus: its folder, the chunk files of each shape, and counts."""

    root: Path
    spec: CorpusSpec
    documents: int
    text_bytes: int

    def files(self, shape: str) -> list[Path]:
        return sorted((self.root / shape).glob("*.jsonl"), key=lambda p: int(p.stem.rsplit("_", 1)[1]))

    def folder(self, shape: str) -> Path:
        return self.root / shape


def stdlib_documents() -> Iterator[str]:
    """This Python's stdlib ``.py`` sources (not site-packages), cut at line ends."""
    root = Path(sysconfig.get_paths()["stdlib"])
    if not root.is_dir():
        raise FileNotFoundError(f"no stdlib sources at {root}; the corpus needs this Python's .py files")
    for path in sorted(root.rglob("*.py")):
        if "site-packages" in path.parts:
            continue
        yield from split_lines(path.read_bytes().decode("utf-8", "replace"), DOC_CHARS)


def split_lines(text: str, limit: int) -> Iterator[str]:
    """``text`` in pieces of at most ``limit`` characters, cut after a newline when there is one."""
    start = 0
    while start < len(text):
        stop = start + limit
        if stop < len(text):
            cut = text.rfind("\n", start, stop)
            stop = cut + 1 if cut > start else stop
        yield text[start:stop]
        start = stop


def fixture_documents(folder: Path = FIXTURES / "llamafactory") -> Iterator[str]:
    """Every string value of at least MIN_CHARS in the LLaMA-Factory demo files."""
    for name in FIXTURE_FILES:
        path = folder / name
        if not path.exists():
            continue
        raw = path.read_bytes()
        rows = (
            [orjson.loads(line) for line in raw.splitlines() if line.strip()]
            if name.endswith(".jsonl")
            else orjson.loads(raw)
        )
        yield from (s for s in _strings(rows) if len(s) >= MIN_CHARS)


def documents(total_bytes: int, seed: int = 0, stationary: bool = False) -> Iterator[str]:
    """About ``total_bytes`` of UTF-8 text: the shuffled base documents, then varied repeats.

    ``stationary``: every document, the first pass's too, gets its random suffix, so each stretch
    of the stream brings never-seen words at the same rate (without it the first pass has none).
    """
    base = list(fixture_documents()) + list(stdlib_documents())
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(base))
    sent, rep = 0, 0
    while True:
        for i in order:
            doc = base[i] + suffix(rng) if rep or stationary else base[i]
            yield doc
            sent += len(doc.encode("utf-8"))
            if sent >= total_bytes:
                return
        rep += 1


def suffix(rng: np.random.Generator, words: int = 8) -> str:
    """A comment line of random lowercase words: new pretokens for every repeated document."""
    lengths = rng.integers(3, 10, size=words)
    letters = rng.integers(ord("a"), ord("z") + 1, size=int(lengths.sum()), dtype=np.uint8).tobytes().decode()
    ends = np.cumsum(lengths)
    return "\n# " + " ".join(letters[e - n : e] for e, n in zip(ends, lengths)) + "\n"


def cut(text: str, fraction: float) -> int:
    """An index near ``fraction`` of ``text``, moved to the next whitespace when one is close."""
    at = int(len(text) * fraction)
    space = text.find(" ", at, at + 200)
    newline = text.find("\n", at, at + 200)
    found = [i for i in (space, newline) if i >= 0]
    return min(found) if found else at


def shape_row(shape: str, doc: str) -> dict:
    if shape == "pt":
        return {"text": doc}
    if shape == "sft":
        i = cut(doc, 1 / 3)
        return {"query": doc[:i], "response": doc[i:]}
    if shape == "dpo":
        i, j = cut(doc, 0.2), cut(doc, 0.6)
        return {"query": doc[:i], "chosen": doc[i:j], "rejected": doc[j:]}
    if shape == "turns":  # two user/assistant turns, in LLaMA-Factory v1's messages shape
        i, j, k = cut(doc, 1 / 6), cut(doc, 1 / 2), cut(doc, 2 / 3)
        texts = (doc[:i], doc[i:j], doc[j:k], doc[k:])
        return {"messages": [_message(role, t) for role, t in zip(("user", "assistant") * 2, texts)]}
    raise ValueError(f"no corpus shape {shape!r}; the shapes are {SHAPES}")


def _message(role: str, text: str) -> dict:
    return {"role": role, "content": [{"type": "text", "value": text}]}


class ChunkedJsonl:
    """Writes rows as ``{prefix}_chunk_{i}.jsonl`` files of about ``chunk_bytes`` each."""

    def __init__(self, folder: Path, chunk_bytes: int, prefix: str = "train") -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder, self.chunk_bytes, self.prefix = folder, chunk_bytes, prefix
        self.index, self.size, self._f = -1, 0, None

    def write(self, row: dict) -> None:
        if self._f is None or self.size >= self.chunk_bytes:
            self._next()
        line = orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE)
        self._f.write(line)
        self.size += len(line)

    def _next(self) -> None:
        self.close()
        self.index += 1
        self.size = 0
        name = self.folder / f"{self.prefix}_chunk_{self.index}.jsonl"
        self._f = open(name, "wb", buffering=1 << 20)  # noqa: SIM115 - rolls over; closed by close()

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None


class DealtJsonl:
    """Deals rows round-robin into ``{prefix}_chunk_{i}.jsonl`` for i < ``chunks``."""

    def __init__(self, folder: Path, chunks: int, prefix: str = "train") -> None:
        folder.mkdir(parents=True, exist_ok=True)
        names = [folder / f"{prefix}_chunk_{i}.jsonl" for i in range(chunks)]
        self._files = [open(n, "wb", buffering=1 << 16) for n in names]  # noqa: SIM115 - closed by close()
        self._next = 0

    def write(self, row: dict) -> None:
        self._files[self._next].write(orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE))
        self._next = (self._next + 1) % len(self._files)

    def close(self) -> None:
        for f in self._files:
            f.close()


def writer_for(folder: Path, spec: CorpusSpec):
    return DealtJsonl(folder, spec.chunks) if spec.chunks else ChunkedJsonl(folder, int(spec.chunk_mb * MB))


def build(root: Path, spec: CorpusSpec, shapes: Iterable[str] = SHAPES) -> Corpus:
    """Build (or reuse) the corpus in ``root``."""
    shapes = tuple(shapes)
    manifest = root / "manifest.json"
    wanted = {**asdict(spec), "shapes": list(shapes)}
    if manifest.exists():
        found = json.loads(manifest.read_text())
        if {k: found.get(k) for k in wanted} == wanted:
            return Corpus(root, spec, found["documents"], found["text_bytes"])
    for shape in SHAPES:
        for old in (root / shape).glob("*.jsonl"):
            old.unlink()
    writers = {s: writer_for(root / s, spec) for s in shapes}
    count = size = 0
    for doc in documents(spec.total_bytes, spec.seed, spec.stationary):
        for shape, writer in writers.items():
            writer.write(shape_row(shape, doc))
        count += 1
        size += len(doc.encode("utf-8"))
    for writer in writers.values():
        writer.close()
    manifest.write_text(json.dumps({**wanted, "documents": count, "text_bytes": size}, indent=2))
    return Corpus(root, spec, count, size)


def read_column(files: Iterable[Path], keys: tuple[str, ...]) -> list[str]:
    """The ``keys`` fields of every row, flattened row by row (reference encodes read this)."""
    texts: list[str] = []
    for path in files:
        with open(path, "rb") as f:
            for line in f:
                row = orjson.loads(line)
                texts.extend(row[k] for k in keys)
    return texts
