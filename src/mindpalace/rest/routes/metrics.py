"""``GET /metrics``: the caller's tenant's counters and histograms in Prometheus text format.

Protected like every data route: the scraper sends an API key with ``read`` scope
(``Authorization: Bearer <key>``; Prometheus: ``authorization: {credentials_file: …}``) and
sees only its own tenant's series — each tenant handle has its own registry, so one tenant's
prompt sizes or recall latencies never reach another tenant's scrape (I10).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Response

from mindpalace.memory import Memory
from mindpalace.metrics import CONTENT_TYPE
from mindpalace.rest.body import StrictRoute
from mindpalace.rest.deps import reader

router = APIRouter(route_class=StrictRoute, tags=["meta"])


@router.get("/metrics", response_class=Response,
            responses={200: {"content": {CONTENT_TYPE: {}}, "description": "Prometheus text format."}})
def metrics(memory: Annotated[Memory, Depends(reader)]) -> Response:
    """Prompt tokens vs budget, compactions, summary gate rejections, consolidation and dream
    token spend against their caps, recall latency, ledger replays and unknown outcomes,
    constraint refusals — counted by this server process for the caller's tenant."""
    return Response(content=memory.metrics.exposition(), media_type=CONTENT_TYPE)
