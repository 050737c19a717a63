"""IOHandler: the design's facade over the io modules, for callers that want one entry point."""

from __future__ import annotations

from pipeline_core.formats import h5, h5_writer
from pipeline_core.storage import fs


class IOHandler:
    """The design's one entry point for file access: HDF5 save/load/attributes and fsspec listings.

    Each method is the module function of the same name (``formats.h5``, ``formats.h5_writer``, ``storage.fs``); use
    either.
    """

    save_h5 = staticmethod(h5_writer.save_h5)
    load_h5 = staticmethod(h5.load_h5)
    read_attrs = staticmethod(h5.read_attrs)
    fetch_files = staticmethod(fs.fetch_files)
    fetch_folders = staticmethod(fs.fetch_folders)
