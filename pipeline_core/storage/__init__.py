"""Storage: every byte h5pipe reads or writes goes through here.

Owns fsspec access to local disk and object stores (``fs``: URLs, listing, publish-by-rename or
upload, staging names), content hashing (``hashing``), the small per-machine JSON records kept
between processes (``records``) and the masking of credentials in log lines (``redact``).

May import: ``errors`` only. Everything else in the core may import it.
"""
