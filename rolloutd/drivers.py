"""Building the router, metrics source and deploy executor a plan names, once per rollout.

Each is built on a rollout's first tick and kept until its plan changes or the daemon stops
driving it (``forget``), so a thousand rollouts cost a thousand sets of drivers while they
run, not one per tick, and none once they have ended.

The daemon asks a :class:`Drivers` for them, so tests and the demo can hand in twins
(an in-memory router, a metrics twin, a memory executor) while production builds the real
drivers.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Protocol, TypeVar

from rolloutd.core.plan import FileRouterSpec, LiteLLMRouterSpec, MemoryRouterSpec, Plan
from rolloutd.deploy.base import Executor
from rolloutd.errors import PermanentError
from rolloutd.gates.base import MetricsSource
from rolloutd.metrics.sources import FileMetrics, MemoryMetrics
from rolloutd.routers.base import MemoryRouter, Router
from rolloutd.routers.filedriver import FileRouter

T = TypeVar("T")


class Drivers(Protocol):
    """Where a rollout's router and metrics source come from."""

    def router(self, rollout_id: int, plan: Plan) -> Router:
        """The router for ``plan``.

        :raises PermanentError: when the plan's driver cannot be built here.
        """

    def metrics(self, rollout_id: int, plan: Plan) -> MetricsSource:
        """The metrics source for ``plan``.

        :raises PermanentError: when the plan's source cannot be built here.
        """

    def executor(self, rollout_id: int, plan: Plan) -> Executor:
        """The deploy executor for ``plan``.

        :raises BadInput: when the plan's executor section does not fit its pools.
        """

    def forget(self, rollout_id: int) -> None:
        """Drop what was built for ``rollout_id``: the daemon no longer drives it."""


class PlanDrivers:
    """Builds the drivers a plan names; memory twins live until their rollout is forgotten."""

    def __init__(self) -> None:
        self._routers: dict[int, tuple[Plan, Router]] = {}
        self._metrics: dict[int, tuple[Plan, MetricsSource]] = {}
        self._executors: dict[int, tuple[Plan, Executor]] = {}
        # One reader a metrics file, however many rollouts read it: each keeps the parsed
        # document (some 5 KB for the file the bench writes), not each rollout's copy of it.
        self._files: weakref.WeakValueDictionary[str, FileMetrics] = weakref.WeakValueDictionary()
        self._lock = threading.Lock()

    def router(self, rollout_id: int, plan: Plan) -> Router:
        return self._kept(self._routers, rollout_id, plan, self._build_router)

    def metrics(self, rollout_id: int, plan: Plan) -> MetricsSource:
        return self._kept(self._metrics, rollout_id, plan, self._build_metrics)

    def executor(self, rollout_id: int, plan: Plan) -> Executor:
        from rolloutd.deploy.executors import build_executor

        return self._kept(self._executors, rollout_id, plan, build_executor)

    def forget(self, rollout_id: int) -> None:
        with self._lock:
            for built in (self._routers, self._metrics, self._executors):
                built.pop(rollout_id, None)

    def _kept(
        self,
        built: dict[int, tuple[Plan, T]],
        rollout_id: int,
        plan: Plan,
        build: Callable[[Plan], T],
    ) -> T:
        """What ``build`` made of ``plan`` for ``rollout_id``, built again if the plan changed
        (the same plan is the same object while its parse is cached, so this is seldom
        more than an identity check)."""
        with self._lock:
            found = built.get(rollout_id)
            if found is None or (found[0] is not plan and found[0] != plan):
                found = built[rollout_id] = (plan, build(plan))
            return found[1]

    def _build_router(self, plan: Plan) -> Router:
        spec = plan.router
        if isinstance(spec, MemoryRouterSpec):
            return MemoryRouter()
        if isinstance(spec, FileRouterSpec):
            return FileRouter(spec.path, session_header=spec.session_header)
        from rolloutd.core.plan import HAProxyRouterSpec, NginxRouterSpec

        if isinstance(spec, HAProxyRouterSpec):
            from rolloutd.routers.haproxy import HAProxyRouter

            return HAProxyRouter(
                spec.socket,
                backend=spec.backend,
                stable=spec.servers["stable"],
                canary=spec.servers["canary"],
                config_path=spec.config_path,
                state_file=spec.state_file,
                session_header=spec.session_header,
            )
        if isinstance(spec, NginxRouterSpec):
            from rolloutd.routers.nginx import NginxRouter

            # The spec names each option as the driver does.
            same = "config_path pid_file nginx_binary prefix variable session_header verify_url"
            same += " command_prefix"
            return NginxRouter(
                spec.include_path,
                stable_upstream=spec.upstreams["stable"],
                canary_upstream=spec.upstreams["canary"],
                **{name: getattr(spec, name) for name in same.split()},
            )
        if isinstance(spec, LiteLLMRouterSpec):
            return _litellm_router(spec)
        raise PermanentError(f"router driver {spec.driver!r} is not available in this rolloutd")

    def _build_metrics(self, plan: Plan) -> MetricsSource:
        spec = plan.metrics
        if spec.source == "memory":
            return MemoryMetrics()
        if spec.source == "file" and spec.path:
            found = self._files.get(spec.path)  # under the lock (``_kept``)
            if found is None:
                found = self._files[spec.path] = FileMetrics(spec.path)
            return found
        if spec.source == "prometheus" and spec.url:
            if spec.templates is None:
                raise PermanentError(
                    "metrics.templates is required with source 'prometheus': a template file "
                    "name in gates/ (vllm, triton-trtllm) or a path to one"
                )
            # Imported here: the Prometheus client is the daemon's business, not the CLI's.
            from rolloutd.errors import BadInput
            from rolloutd.metrics.prometheus import PrometheusMetrics
            from rolloutd.metrics.templates import Labels, load_templates

            try:
                templates = load_templates(spec.templates).with_overrides(spec.overrides)
                return PrometheusMetrics(
                    spec.url,
                    templates,
                    labels=Labels(spec.pool_label, spec.gateway_pool_label, spec.model),
                    scrape_interval=spec.scrape_interval,
                    timeout=spec.timeout,
                    disable_ssl=not spec.tls_verify,
                )
            except (BadInput, ValueError) as exc:
                # The plan was accepted, but its templates cannot serve it: every gate of
                # this rollout is inconclusive with this message until the file is fixed.
                raise PermanentError(f"metrics templates: {exc}") from None
        raise PermanentError(f"metrics source {spec.source!r} is not available in this rolloutd")


def _litellm_router(spec: LiteLLMRouterSpec) -> Router:
    """The LiteLLM driver, with the master key from the environment (a secret from then on)."""
    import os

    from rolloutd.redact import register_secret
    from rolloutd.routers.litellm_proxy import LiteLLMRouter

    key = os.environ.get(spec.master_key_env) if spec.master_key_env else None
    register_secret(key)
    return LiteLLMRouter(
        spec.weights_path,
        model_group=spec.model_group,
        state_url=spec.state_url,
        session_header=spec.session_header,
        master_key=key,
    )
