"""The REST server (``mindpalace serve``): FastAPI over the facade, one tenant per API key.

Needs the ``server`` extra: ``pip install 'mindpalace[server]'`` (fastapi, uvicorn, httpx).
"""

from __future__ import annotations

from mindpalace.rest.app import create_app

__all__ = ["create_app"]
