"""Version of the on-disk output format; part of every cache key and of every HDF5 file."""

FORMAT_VERSION = "1"
