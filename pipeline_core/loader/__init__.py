"""The trainer's side: reading h5pipe's HDF5 output as a PyTorch dataset.

Owns ``H5Dataset`` (``dataset``; its files made local by ``downloads``) and ``h5_collate`` (``collate``: batches for a ``DataLoader``). Importing this package imports torch; the core's root package
loads it only when ``H5Dataset`` is first asked for.

May import: ``errors``, ``storage``, ``formats``, ``commit`` (a folder's manifest says which files it holds).
"""

from pipeline_core.loader.collate import IGNORE_INDEX, H5Collate, h5_collate
from pipeline_core.loader.dataset import H5Dataset

__all__ = ["IGNORE_INDEX", "H5Collate", "H5Dataset", "h5_collate"]
