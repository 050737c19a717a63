"""Thin Prefect tasks over pipeline_core: retries, cache policy and logging, nothing else."""
