"""Run the REST app with uvicorn, deciding whether it may run without API keys.

Auth is required unless the server binds a loopback address AND auth was explicitly turned
off: ``--no-auth`` on any other host is refused before anything listens, so a mistyped
``--host 0.0.0.0`` can never expose a workspace unauthenticated.
"""

from __future__ import annotations

import ipaddress
import os

from mindpalace.errors import ConfigError
from mindpalace.settings import ServerSettings


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``; a name or 0.0.0.0 is not loopback."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_auth(host: str, auth: bool) -> None:
    """Refuse to serve without auth anywhere but loopback.

    Raises:
        ConfigError: `auth` is False and `host` is not a loopback address.
    """
    if not auth and not is_loopback(host):
        raise ConfigError("command line", "--no-auth",
                          f"refused on host {host!r}: without API keys the server may only bind "
                          "loopback (127.0.0.1, ::1); create a key with `mindpalace keys create`")


def serve(
    workspace: str | os.PathLike[str],
    settings: ServerSettings,
    *,
    auth: bool = True,
    tenant: str = "default",
    log_level: str = "info",
    access_log: bool = True,
) -> None:
    """Serve the workspace until interrupted (blocks).

    Args:
        workspace: an existing workspace folder.
        settings: host, port and limits (``[server]``, overridden by the command line).
        auth: require API keys; False only on loopback (see :func:`check_auth`).
        tenant: the tenant of every request when `auth` is False.
        log_level / access_log: uvicorn's logging (one line per request when `access_log`).

    Raises:
        ConfigError: --no-auth off loopback. WorkspaceError: not a workspace.
    """
    import uvicorn

    from mindpalace.rest.app import create_app

    check_auth(settings.host, auth)
    app = create_app(workspace, settings, auth=auth, tenant=tenant)
    uvicorn.run(app, host=settings.host, port=settings.port, log_level=log_level,
                access_log=access_log, server_header=False)
