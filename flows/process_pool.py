"""The ``processes`` runner: Prefect's ProcessPoolTaskRunner, its forwarded logs sent to this run's API.

Worker processes do not ship their task runs' logs and events themselves: they queue them to the
parent, where a thread of the runner sends them on. That thread starts without the flow's
context, so it reads Prefect's settings as they were when Prefect was imported. A run pointed at
a server afterwards (h5pipe's kept server, flows/local_server.py, sets the API address in the
settings context and the environment once Prefect is loaded) then had its workers' logs go to a
temporary server that thread started for itself: the task runs' lines were missing from the
server the run reports to, and the run waited ~5 s for that throwaway server to start and stop.
Here the thread runs in a copy of the context the runner was entered in (the flow's settings).
"""

from __future__ import annotations

import contextvars

from prefect.task_runners import ProcessPoolTaskRunner


class ReportingProcessPool(ProcessPoolTaskRunner):
    """ProcessPoolTaskRunner whose forwarding thread sees the settings of the run that entered it."""

    def __enter__(self):
        self._entered_in = contextvars.copy_context()  # before the runner starts its thread
        return super().__enter__()

    def _forward_subprocess_messages(self) -> None:
        self._entered_in.run(super()._forward_subprocess_messages)
