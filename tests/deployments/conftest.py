"""A real Prefect server, the deployments of prefect.yaml and a process worker, once per session.

None of this uses the session's ``prefect_test_harness``: the server is ``prefect server start`` in a
subprocess with its own PREFECT_HOME (SQLite inside it), the CLI calls and the worker get its
PREFECT_API_URL in their environment, and the test process talks to it through ``real_client``,
which pins PREFECT_API_URL with ``temporary_settings`` whatever else the session has set.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from deployments.spec import REPO_ROOT, DeploymentSpec, load_specs
from tests.conftest import free_port
from tests.deployments.processes import PREFECT, Service, prefect_env, run, start, wait_for

SERVER_STARTUP_SECONDS = 300  # a cold server on a busy 2-core machine takes over a minute
RUN_SECONDS = 600


@dataclass
class RealServer:
    api_url: str
    home: Path
    logs: Path
    service: Service

    def env(self, **extra: str) -> dict[str, str]:
        return prefect_env(self.home, self.api_url, **extra)


@contextmanager
def real_client(server: RealServer):
    """A sync client of ``server``, whatever PREFECT_API_URL the session holds otherwise."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: server.api_url}), get_client(sync_client=True) as client:
        yield client


def healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="session")
def real_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("prefect-server")
    home, logs = root / "home", root / "logs"
    home.mkdir()
    logs.mkdir()
    port = free_port()
    api_url = f"http://127.0.0.1:{port}/api"
    args = [*PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)]
    service = start("server", args, prefect_env(home), logs)
    try:
        wait_for(lambda: healthy(api_url), SERVER_STARTUP_SECONDS, f"{api_url}/health", service)
        yield RealServer(api_url, home, logs, service)
    finally:
        service.stop()


@pytest.fixture(scope="session")
def sample_dir(tmp_path_factory) -> Path:
    from flows.sample import write_sample

    folder = tmp_path_factory.mktemp("h5pipe-data")
    write_sample(folder)
    return folder


@pytest.fixture(scope="session")
def specs(sample_dir) -> list[DeploymentSpec]:
    """prefect.yaml as deployed: ``{{ $H5PIPE_DATA }}`` is the session's sample folder."""
    return load_specs(environ={"H5PIPE_DATA": str(sample_dir)})


@pytest.fixture(scope="session")
def work_pool(real_server, specs) -> str:
    (pool,) = {s.work_pool for s in specs}
    run([*PREFECT, "work-pool", "create", pool, "--type", "process", "--overwrite"], real_server.env())
    return pool


@pytest.fixture(scope="session")
def deployed(real_server, work_pool, sample_dir) -> str:
    """``prefect deploy --all`` from the repository root, as a user would run it."""
    args = [*PREFECT, "--no-prompt", "deploy", "--prefect-file", "deployments/prefect.yaml", "--all"]
    return run(args, real_server.env(H5PIPE_DATA=str(sample_dir)), cwd=REPO_ROOT)


@pytest.fixture(scope="session")
def worker(real_server, work_pool, deployed, tmp_path_factory):
    """A process worker started outside the repository: the pull step must find it via H5PIPE_HOME."""
    cwd = tmp_path_factory.mktemp("worker-cwd")
    env = real_server.env(H5PIPE_HOME=str(REPO_ROOT), PREFECT_WORKER_QUERY_SECONDS="2")
    service = start("worker", [*PREFECT, "worker", "start", "--pool", work_pool], env, real_server.logs, cwd)
    try:
        with real_client(real_server) as client:
            wait_for(lambda: client.read_workers_for_work_pool(work_pool), 180, "a worker polling the pool", service)
        yield service
    finally:
        service.stop()


def wait_for_runs(server: RealServer, run_ids: list, service: Service, timeout: float = RUN_SECONDS) -> list:
    """The flow runs once every one is in a final state; fails with the worker's log otherwise."""
    deadline = time.monotonic() + timeout
    with real_client(server) as client:
        while time.monotonic() < deadline:
            runs = [client.read_flow_run(i) for i in run_ids]
            if all(r.state and r.state.is_final() for r in runs):
                return runs
            service.check_alive()
            time.sleep(2)
    states = {str(r.id): r.state.name if r.state else None for r in runs}
    raise TimeoutError(f"runs not finished within {timeout:.0f} s: {states}\n{service.tail()}")
