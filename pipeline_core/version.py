"""Version of the on-disk output format; part of every cache key and of every HDF5 file."""


class FormatVersion(str):
    """The version of h5pipe's on-disk layout, a plain string (``"2"``).

    Written as the ``format_version`` attribute of every HDF5 file and into every manifest, and part
    of every cache key: a new layout gets a new version, so outputs of the old one are rebuilt, not
    misread.
    """


# 2: ids and position ids stored as uint16 where they fit, small datasets contiguous
FORMAT_VERSION = FormatVersion("2")
