"""``h5pipe server start|stop|status``: the local Prefect server kept between runs (flows/local_server.py)."""

from __future__ import annotations

from typing import Annotated

import typer

server_app = typer.Typer(
    no_args_is_help=True,
    help="The local Prefect server h5pipe keeps between runs (UI and API on 127.0.0.1); stops when idle.",
)


def _fail(message: str) -> None:
    typer.secho(message, err=True, fg=typer.colors.RED)
    raise typer.Exit(1)


@server_app.command()
def start(
    idle_minutes: Annotated[float | None, typer.Option(help="stop after this long without a run [default: 30]")] = None,
    port: Annotated[int | None, typer.Option(help="default: PREFECT_SERVER_API_PORT (4200) when free")] = None,
) -> None:
    """Start the kept server (or show the one running); later runs use it."""
    from flows import local_server

    if idle_minutes is not None and idle_minutes <= 0:
        _fail("--idle-minutes must be > 0; stop the server with `h5pipe server stop`")
    try:
        idle = 60 * idle_minutes if idle_minutes else local_server.idle_seconds_from_env()
        local_server.start(idle, port)
    except local_server.ServerError as e:
        _fail(str(e))
    typer.echo(local_server.status())


@server_app.command()
def stop() -> None:
    """Stop the kept server, its keeper and the warm h5pipe processes."""
    from flows import local_server
    from flows.warm import control

    record = local_server.stop()
    typer.echo(f"stopped the local Prefect server at {record.url}" if record else local_server.status())
    for warm in control.stop_all():
        typer.echo(f"stopped the warm h5pipe process pid {warm['pid']} (served {warm.get('served', 0)} run(s))")


@server_app.command()
def status() -> None:
    """Where the kept server and the warm h5pipe processes run, and how long they have been idle."""
    from flows import local_server
    from flows.warm import control

    typer.echo("\n".join([local_server.status(), *control.status_lines()]))
