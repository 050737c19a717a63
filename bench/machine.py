"""What the benchmark ran on: CPU, cores, memory, Python, library versions, load."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path

import psutil

LIBRARIES = (
    "h5pipe",
    "tokenizers",
    "gigatoken",
    "datasets",
    "datatrove",
    "pyarrow",
    "h5py",
    "numpy",
    "orjson",
    "prefect",
)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def versions() -> dict[str, str]:
    found = {}
    for name in LIBRARIES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def git_revision() -> str:
    root = Path(__file__).resolve().parents[1]
    try:
        rev = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain"], capture_output=True, text=True)
    except OSError:
        return "unknown"
    return rev.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def describe() -> dict:
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cpu": cpu_model(),
        "cores": f"{usable} usable of {os.cpu_count()}",
        "ram_gib": round(psutil.virtual_memory().total / (1 << 30), 1),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "versions": versions(),
        "revision": git_revision(),
        "load_start": load(),
    }
