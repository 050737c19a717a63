"""url_to_fs gives what fsspec gives, with or without its shortcut for plain local paths."""

from __future__ import annotations

import fsspec
import pytest
from fsspec.implementations.local import LocalFileSystem

from pipeline_core.storage.fs import url_to_fs

PLAIN = ["a/b.jsonl", "/tmp/x/", ".", "", "~/x.h5", "./rel/../x", "a b/ü.h5", "/", "//double/slash", "a/./b/"]
OTHERS = ["file:///tmp/x.h5", "file:/tmp/x.h5", "memory://bucket/x", "memory:/x", "data:text/plain,hello"]


@pytest.mark.parametrize("url", PLAIN + OTHERS)
def test_the_filesystem_and_path_are_fsspecs(url):
    fs, path = url_to_fs(url)
    theirs, their_path = fsspec.core.url_to_fs(url)
    assert type(fs) is type(theirs)
    assert path == their_path


def test_storage_options_still_reach_fsspec():
    fs, _ = url_to_fs("/tmp/x", {"auto_mkdir": True})
    assert fs.auto_mkdir is True
    plain, _ = url_to_fs("/tmp/x")
    assert isinstance(plain, LocalFileSystem) and plain.auto_mkdir is False
