"""The warm h5pipe process: a run command served by a process that has already imported
Prefect, the flows and pipeline_core, so a run does not pay ~2 s of imports.

- ``entry``-side (``flows/entry.py``, ``client``, ``fingerprint``, ``state``): import only the
  standard library's small modules; a run command connects to the warm process of its
  fingerprint over a Unix socket, or runs cold and leaves one for next time.
- warm side (``zygote``, ``loop``, ``child``): the waiting process, its serving loop and the
  fork that runs ``flows.cli.main`` in the client's environment, working directory and
  stdin/stdout/stderr.

docs/performance.md ("The warm process") says what it is, its memory and how to turn it off.
"""
