"""Ad hoc runs (flows.runs): no flow-run heartbeats unless the user chose a frequency.

Each case runs in a fresh interpreter with its own PREFECT_HOME, so the settings Prefect loads
come only from the environment (and files) the case gives it.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = """
from prefect.settings import get_current_settings
from flows.runs import ad_hoc_settings
before = get_current_settings().flows.heartbeat_frequency
with ad_hoc_settings():
    inside = get_current_settings().flows.heartbeat_frequency
after = get_current_settings().flows.heartbeat_frequency
print(before, inside, after)
"""


def heartbeat_seconds(tmp_path, **env) -> list[str]:
    clean = {k: v for k, v in os.environ.items() if "HEARTBEAT" not in k and not k.startswith("PREFECT_")}
    clean.update(PREFECT_HOME=str(tmp_path / "prefect-home"), **env)
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=tmp_path, env=clean, capture_output=True, text=True, check=True
    )
    return out.stdout.split()


def test_ad_hoc_runs_switch_heartbeats_off_by_default(tmp_path):
    # Prefect's default (180 s) outside the block, none inside, restored after
    assert heartbeat_seconds(tmp_path) == ["180", "None", "180"]


@pytest.mark.parametrize("variable", ["PREFECT_FLOWS_HEARTBEAT_FREQUENCY", "PREFECT_RUNNER_HEARTBEAT_FREQUENCY"])
def test_a_frequency_the_user_set_is_kept(tmp_path, variable):
    assert heartbeat_seconds(tmp_path, **{variable: "45"}) == ["45", "45", "45"]


def test_a_frequency_from_prefect_toml_is_kept(tmp_path):
    (tmp_path / "prefect.toml").write_text("[flows]\nheartbeat_frequency = 90\n", encoding="utf-8")
    assert heartbeat_seconds(tmp_path) == ["90", "90", "90"]
