"""The commit record: what a stage published, and whether it still stands.

Owns the manifest written last in every output folder (``manifest``), the cheap file stamps that
let a rerun trust an unchanged file without re-reading it (``stamps``), the sweep of temporary
files a killed run left (``sweep``), the quarantine log of rejected rows (``quarantine``),
the one rule deciding whether a published output may be reused (``standing``), the one-writer
lock of an output folder (``lock``), the removal of a folder a run's settings no longer make
(``retire``) and ``verify``, which checks a folder against its manifest with that same rule. The whole protocol is described in docs/commit-protocol.md.

Kept apart from ``storage`` (below ``formats``) because ``verify`` opens HDF5 files: the record
sits above the formats it checks, plain file access below them.

May import: ``errors``, ``version``, ``storage``, ``formats``.
"""
