"""h5pipe as a service: Prefect deployments of the three flows.

``prefect.yaml`` is the one source of truth (names, entrypoints, schedules, tags, concurrency,
parameters); ``prefect deploy`` reads it for a work pool, and ``serve.py`` reads the same file to
serve the same deployments from one long-running process, without a work pool.
"""
