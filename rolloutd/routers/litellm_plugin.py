"""The LiteLLM proxy plugin that keeps a session on one pool: loaded by the proxy, not rolloutd.

LiteLLM's router picks a deployment per *request* by weight, so the turns of one agent
session would bounce between stable and canary. This callback implements the router's
``async_filter_deployments`` hook (LiteLLM calls it for every request, after health checks
and cooldowns, before its routing strategy picks among what is left) and narrows a model
group's deployments to the pool of the request's session at the weight rolloutd last wrote
for that group (:class:`rolloutd.routers.litellm_pools.SessionPools`). Deployments join a
pool by ``model_info: {rolloutd_pool: stable|canary}`` in the proxy's config (untagged ones
count as stable); a group without a weights file sends nothing to its canary deployments.

The weights files live in ``$ROLLOUTD_LITELLM_WEIGHTS_DIR``. Mirroring is LiteLLM's own
(``silent_model``, see ``SessionPools.pick``). What the plugin applies is reported at
``GET /rolloutd/weights`` on the proxy (guarded by the proxy's master key when it has one)
and as the gauges ``rolloutd_litellm_canary_weight`` / ``rolloutd_litellm_mirror`` on the
proxy's ``/metrics``.

Checked against LiteLLM 1.106.12 (``CustomLogger.async_filter_deployments``,
``Router._silent_experiment_acompletion``); the proxy's config loads it through
``config/litellm/rolloutd_split.py``.
"""

from __future__ import annotations

import logging
import os
import secrets
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse
from litellm.integrations.custom_logger import CustomLogger

from rolloutd.routers.litellm_pools import SessionPools, WeightsDirectory
from rolloutd.routers.litellm_split import GroupWeights

DIRECTORY_VARIABLE = "ROLLOUTD_LITELLM_WEIGHTS_DIR"
DEFAULT_DIRECTORY = "/var/lib/rolloutd/litellm"
STATE_PATH = "/rolloutd/weights"

log = logging.getLogger("rolloutd.litellm")


class SessionSplit(CustomLogger):  # type: ignore[misc]
    """The callback the proxy's config names: narrows each request to its session's pool."""

    def __init__(self, directory: str | Path) -> None:
        super().__init__()
        self.pools = SessionPools(WeightsDirectory(directory, on_change=_applied))

    @classmethod
    def from_environment(cls) -> SessionSplit:
        """The plugin for ``$ROLLOUTD_LITELLM_WEIGHTS_DIR``, its read-back route mounted on
        the proxy's app."""
        plugin = cls(os.environ.get(DIRECTORY_VARIABLE, DEFAULT_DIRECTORY))
        plugin.mount()
        return plugin

    async def async_filter_deployments(
        self,
        model: str,
        healthy_deployments: list[dict[str, Any]],
        messages: object,
        request_kwargs: dict[str, Any] | None = None,
        parent_otel_span: object = None,
    ) -> list[dict[str, Any]]:
        """LiteLLM's hook: the deployments left for this request."""
        if not isinstance(healthy_deployments, list) or not self.pools.manages(
            model, healthy_deployments
        ):
            return healthy_deployments
        return self.pools.pick(model, healthy_deployments, request_kwargs)

    def mount(self) -> None:
        """Add ``GET /rolloutd/weights`` to the running proxy's app (once)."""
        from litellm.proxy import proxy_server

        app = proxy_server.app
        if any(getattr(r, "path", None) == STATE_PATH for r in app.router.routes):
            return

        async def weights_state(request: Request) -> JSONResponse:
            expected = getattr(proxy_server, "master_key", None)
            if expected:
                given = request.headers.get("authorization", "")
                token = given[7:] if given.lower().startswith("bearer ") else given
                if not secrets.compare_digest(token.encode(), str(expected).encode()):
                    return JSONResponse({"error": "the proxy's master key is required"}, 401)
            router = getattr(proxy_server, "llm_router", None)
            model_list = list(getattr(router, "model_list", None) or [])
            return JSONResponse(self.pools.state(model_list))

        app.add_api_route(STATE_PATH, weights_state, methods=["GET"], include_in_schema=False)
        # Starlette matches in order: put the route before any catch-all pass-through route.
        app.router.routes.insert(0, app.router.routes.pop())


def _applied(group: str, weights: GroupWeights, path: str) -> None:
    """Log and export the weights a group now has."""
    log.info("rolloutd: %s at %d%% canary (%s)", group, weights.canary_weight, path)
    try:
        _gauge("rolloutd_litellm_canary_weight", "Percent of sessions sent to the canary").labels(
            model_group=group
        ).set(weights.canary_weight)
        _gauge("rolloutd_litellm_mirror", "1 while requests are mirrored to the canary").labels(
            model_group=group
        ).set(1 if weights.mirror else 0)
    except ImportError:
        return


_GAUGES: dict[str, Any] = {}


def _gauge(name: str, documentation: str) -> Any:
    if name not in _GAUGES:
        from prometheus_client import Gauge

        _GAUGES[name] = Gauge(name, documentation, ["model_group"])
    return _GAUGES[name]
