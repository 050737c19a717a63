"""The flows' side of the manifest: refuse config drift, remember finished chunks, commit last."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from pipeline_core.commit.manifest import Manifest, ManifestEntry, entry_files, in_folder, open_for_run, save_manifest
from pipeline_core.storage.fs import remove_quietly

SAVE_EVERY = 1.0


@dataclass
class Committer:
    output_dir: str
    manifest: Manifest
    storage_options: dict
    stored: bytes = b""  # the manifest as this run last read or wrote it
    saved_at: float = field(default=float("-inf"), repr=False)  # time.monotonic() of the last rewrite
    save_seconds: float = field(default=0.0, repr=False)  # what the last rewrite cost
    # output name -> names of the part entries recorded for it, built from the manifest at first use
    parts_of: dict[str, list[str]] | None = field(default=None, repr=False)

    @classmethod
    def open(cls, output_dir: str, stage: str, config_hash: str, overwrite: bool, storage_options: dict) -> Committer:
        manifest = open_for_run(output_dir, stage, config_hash, overwrite, storage_options)
        committer = cls(output_dir, manifest, storage_options, manifest.to_json() if manifest.entries else b"")
        manifest.complete = False  # every save before the final commit says so (readers refuse it)
        return committer

    def begin(self) -> None:
        """Save the manifest as not complete before the run writes its first output: from then
        until the final commit readers (the cache stage, ``H5Dataset``, ``merge``, ``verify``)
        refuse the folder. Before, the earlier run's manifest said complete beside outputs this
        run had already replaced (another ``pack_size`` under ``--overwrite``), and was read so."""
        self._save()

    def previous(self) -> dict[str, dict]:
        """The descriptors earlier runs committed, by output file name (the plans and the tasks
        re-verify them)."""
        results = {name: entry.extra.get("result") for name, entry in self.manifest.entries.items()}
        return {name: r for name, r in results.items() if r}

    def previous_by_input(self) -> dict[str, dict]:
        """``previous()`` by input URL: a Megatron-only output's name is known only after it is written."""
        return {r["input_url"]: r for r in self.previous().values() if r.get("input_url")}

    def record(self, result, save: bool = True) -> None:
        """Add one finished output; the manifest is rewritten (atomically) soon after, see
        ``save_soon``, or later with ``save=False``."""
        name = result.output_url.rsplit("/", 1)[-1]
        known = self.manifest.entries.get(name)
        if known and known.extra.get("result") == result.model_dump():
            return  # already committed (a cache hit or a resumed chunk): no rewrite
        parts = self._parts_index()
        self._drop_parts(name, parts.pop(name, []))
        parts[name] = [part.url.rsplit("/", 1)[-1] for part in result.parts]
        for part, part_name in zip(result.parts, parts[name]):
            self.manifest.entries[part_name] = ManifestEntry(part_name, part.sha256, part.size, extra={"part_of": name})
        self.manifest.entries[name] = ManifestEntry(
            name=name,
            sha256=result.sha256,
            size=result.size,
            source_sha256=getattr(result, "source_sha256", ""),
            rows=getattr(result, "rows_read", getattr(result, "rows_in", 0)),
            samples=getattr(result, "samples_written", getattr(result, "rows_out", 0)),
            tokens=getattr(result, "tokens_written", 0),
            extra={"result": result.model_dump()},
        )
        if save:
            self.save_soon()

    def _parts_index(self) -> dict[str, list[str]]:
        """``parts_of``, built from the manifest at first use: an output's old part entries are found
        through it, not by a scan of every entry per record (that made recording 1,000 chunks
        quadratic)."""
        if self.parts_of is None:
            self.parts_of = {}
            for key, entry in self.manifest.entries.items():
                if owner := entry.extra.get("part_of"):
                    self.parts_of.setdefault(owner, []).append(key)
        return self.parts_of

    def _drop_parts(self, name: str, keys: list[str]) -> None:
        """Remove those of ``keys`` that are still entries of parts of ``name``; their files go under
        ``dropping``, so the final commit removes each one the new result does not list again (a
        Megatron pair of a key or level the chunk no longer writes must not stay to be found)."""
        for key in keys:
            entry = self.manifest.entries.get(key)
            if entry is not None and entry.extra.get("part_of") == name:
                del self.manifest.entries[key]
                self.manifest.dropping = sorted({*self.manifest.dropping, *entry_files(self.output_dir, entry)})

    def save_soon(self) -> None:
        """Rewrite the manifest when the last rewrite is SAVE_EVERY seconds and ten times its own cost
        ago. Rewriting after every chunk made 1,000 small chunks cost 1,000 rewrites of a growing
        file (78 ms each at 200 entries, most of the flow); now a crash loses at most the last
        second's finished chunks, which a rerun redoes or takes from Prefect's cache, verified."""
        if time.monotonic() - self.saved_at >= max(SAVE_EVERY, 10 * self.save_seconds):
            self.flush()

    def flush(self) -> None:
        """Rewrite the manifest now if anything changed since the last rewrite."""
        self._save()

    def commit(self, results: list, keep_inputs: set[str] | frozenset[str] = frozenset()) -> list[str]:
        """The final write: exactly this run's outputs, after everything else. The files of the
        outputs it drops (their input is gone, or a smaller export replaced the set) are removed
        after the manifest no longer lists them, and the manifest names them under ``dropping``
        until they are gone: a run killed in between leaves them to the next run's commit, which
        removes them too (unless it writes them again). ``keep_inputs``: inputs this run left
        alone (beyond a ``limit``) whose committed outputs stay as they are. Returns the URLs removed."""
        names = {f.url.rsplit("/", 1)[-1] for r in results for f in r.files()} | self._names_of(keep_inputs)
        dropped = [e for k, e in self.manifest.entries.items() if k not in names]
        # an earlier run's, killed midway, that this run did not write again
        left = [in_folder(self.output_dir, u) for u in self.manifest.dropping if u.rsplit("/", 1)[-1] not in names]
        urls = list(dict.fromkeys([url for entry in dropped for url in entry_files(self.output_dir, entry)] + left))
        self.manifest.entries = {k: v for k, v in self.manifest.entries.items() if k in names}
        self.manifest.complete = True
        self.manifest.dropping = urls
        self._save()
        for url in urls:
            remove_quietly(url, self.storage_options)
        self.manifest.dropping = []
        self._save()
        return urls

    def _names_of(self, inputs: set[str] | frozenset[str]) -> set[str]:
        """The entry names (outputs and their parts) committed for ``inputs``."""
        owners = {name for name, r in self.previous().items() if r.get("input_url") in inputs}
        parts = {key for owner in owners for key in self._parts_index().get(owner, [])}
        return owners | parts

    def _save(self) -> None:
        """Atomically, and not at all when nothing changed: a no-op rerun leaves the folder as it was."""
        started = time.monotonic()
        data = self.manifest.to_json()
        if data != self.stored:
            save_manifest(self.output_dir, data, self.storage_options)
            self.stored = data
        self.saved_at, self.save_seconds = time.monotonic(), time.monotonic() - started
