"""IOHandler: the design's facade over the io modules, for callers that want one entry point."""

from __future__ import annotations

from pipeline_core.formats import h5
from pipeline_core.storage import fs


class IOHandler:
    save_h5 = staticmethod(h5.save_h5)
    load_h5 = staticmethod(h5.load_h5)
    read_attrs = staticmethod(h5.read_attrs)
    fetch_files = staticmethod(fs.fetch_files)
    fetch_folders = staticmethod(fs.fetch_folders)
