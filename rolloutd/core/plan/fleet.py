"""The fleet a plan drives: the two pools, the router that splits traffic, the metrics
source, the pinned artefact sets and the engine shape for the capacity arithmetic."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Literal, Self

from pydantic import Field, field_validator, model_validator

from rolloutd.core.capacity import MAX_COUNT, MAX_GB, MAX_GPUS
from rolloutd.core.plan.base import Duration, Fraction, HttpUrl, Name, _Spec


class Replica(_Spec):
    """One engine replica: a name the router and deploy executors know it by, and its URL."""

    name: Name
    url: HttpUrl


class Pool(_Spec):
    """A set of replicas that serve one build."""

    replicas: list[Replica] = Field(min_length=1)


class Pools(_Spec):
    """The build users have now (stable) and the one being rolled out (canary)."""

    stable: Pool
    canary: Pool


_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}")


class MemoryRouterSpec(_Spec):
    """An in-process router: for tests and the demo."""

    driver: Literal["memory"]
    session_header: str = "X-Session-Id"


class FileRouterSpec(_Spec):
    """Desired weights written atomically as JSON, for load balancers fed by a templater."""

    driver: Literal["file"]
    path: str = Field(min_length=1)
    session_header: str = "X-Session-Id"


class HAProxyRouterSpec(_Spec):
    """HAProxy's runtime API; ``socket`` is a UNIX path or ``host:port``.

    ``config_path`` is the haproxy.cfg (or directory of ``*.cfg``) the running HAProxy was
    started from. The runtime API does not say whether a backend hashes consistently, and
    without ``hash-type consistent`` HAProxy ignores weight changes, so the driver reads the
    backend's ``balance`` and ``hash-type`` there and refuses to shift traffic without it.
    ``state_file`` is the global ``server-state-file``, rewritten after every change so a
    reload keeps the weights.
    """

    driver: Literal["haproxy"]
    socket: str = Field(min_length=1)
    backend: Name
    servers: dict[Literal["stable", "canary"], list[Name]]
    state_file: str | None = None
    config_path: str | None = None
    session_header: str = Field(default="X-Session-Id", pattern=r"^[A-Za-z0-9][A-Za-z0-9-]{0,99}$")

    @model_validator(mode="after")
    def _two_disjoint_pools(self) -> Self:
        for pool in ("stable", "canary"):
            if not self.servers.get(pool):
                raise ValueError(f"servers.{pool} must name at least one HAProxy server")
        stable, canary = self.servers["stable"], self.servers["canary"]
        repeated = sorted({s for s in stable + canary if (stable + canary).count(s) > 1})
        if repeated:
            raise ValueError(f"each server belongs to one pool, once: {', '.join(repeated)}")
        return self


class NginxRouterSpec(_Spec):
    """NGINX open source: a rendered ``split_clients`` include, tested and reloaded.

    The driver runs ``nginx -T`` and ``nginx -s reload`` with ``-c config_path`` (and
    ``-p prefix`` when set), prefixed by ``command_prefix`` (e.g. ``[sudo, -n]`` when the
    master runs as root), and reads the master's pid from ``pid_file``. ``variable`` names
    the split (``$rolloutd_pool``; ``proxy_pass http://$rolloutd_pool;`` follows it).
    ``verify_url``, when set, is a location answering ``$<variable>_state``: the only way to
    read back what the workers really loaded.
    """

    driver: Literal["nginx"]
    include_path: str = Field(min_length=1)
    upstreams: dict[Literal["stable", "canary"], Name]
    nginx_binary: str = "nginx"
    session_header: str = Field(default="X-Session-Id", pattern=r"^[A-Za-z0-9][A-Za-z0-9-]{0,99}$")
    config_path: str = Field(default="/etc/nginx/nginx.conf", min_length=1)
    pid_file: str = Field(default="/run/nginx.pid", min_length=1)
    prefix: str | None = None
    variable: str = Field(default="rolloutd_pool", pattern=r"^[a-z_][a-z0-9_]{0,62}$")
    verify_url: HttpUrl | None = None
    command_prefix: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _two_distinct_upstreams(self) -> Self:
        for pool in ("stable", "canary"):
            if pool not in self.upstreams:
                raise ValueError(f"upstreams.{pool} must name an nginx upstream block")
        if self.upstreams["stable"] == self.upstreams["canary"]:
            raise ValueError("upstreams.stable and upstreams.canary must differ")
        return self


class LiteLLMRouterSpec(_Spec):
    """A LiteLLM proxy running rolloutd's plugin (``config/litellm/``), no proxy database.

    The driver writes ``model_group``'s weights to ``weights_path``, a file in the directory
    the plugin reads (``ROLLOUTD_LITELLM_WEIGHTS_DIR``), and reads back what the plugin
    applies at ``state_url`` (the proxy's ``/rolloutd/weights``), sending the proxy's master
    key from the environment variable ``master_key_env`` when it is set there.
    """

    driver: Literal["litellm"]
    weights_path: str = Field(min_length=1)
    model_group: str = Field(min_length=1, max_length=200)
    state_url: HttpUrl
    master_key_env: str | None = "LITELLM_MASTER_KEY"
    session_header: str = Field(default="X-Session-Id", pattern=r"^[A-Za-z0-9][A-Za-z0-9-]{0,99}$")

    @field_validator("master_key_env")
    @classmethod
    def _a_variable_name(cls, value: str | None) -> str | None:
        # Whatever was written here may be the key itself, pasted in the wrong place: the
        # message never repeats it.
        if value is not None and not _VARIABLE.fullmatch(value):
            raise ValueError(
                "expected the name of an environment variable holding the master key "
                "(letters, digits, _), not the key itself; the value is not shown"
            )
        return value


RouterSpec = Annotated[
    MemoryRouterSpec | FileRouterSpec | HAProxyRouterSpec | NginxRouterSpec | LiteLLMRouterSpec,
    Field(discriminator="driver"),
]


class MetricsSpec(_Spec):
    """Where gate signals come from and which signal templates apply."""

    source: Literal["prometheus", "simulator", "memory", "file"]
    url: HttpUrl | None = None
    path: str | None = None
    templates: str | None = None
    pool_label: str = "pool"
    """The label the scrape config puts on every engine target (stable or canary)."""
    gateway_pool_label: str = "pool"
    """The label the agent gateway puts on its own series."""
    model: str | None = None
    """The model the gates select, for templates that select one (a Triton ensemble serves
    ``ensemble``, ``preprocessing``, ``tensorrt_llm``, ``postprocessing``: name one)."""
    scrape_interval: Duration = timedelta(seconds=15)
    """How often Prometheus scrapes the targets: a pool whose newest sample is older than two
    intervals is not being scraped, and its counts are not data."""
    timeout: Duration = timedelta(seconds=10)
    overrides: dict[Name, str | dict[str, str]] = Field(default_factory=dict)
    """Per signal, its replacement ``query``, or a mapping of query/samples/buckets/fresh."""
    tls_verify: bool = True
    """False: accept any certificate from an https Prometheus (a self-signed lab server)."""


class Artefacts(_Spec):
    """Names of the pinned artefact sets: what stable runs, what canary runs."""

    stable: Name
    canary: Name


class EngineShape(_Spec):
    """The model and GPU box behind one canary replica, for the KV-cache arithmetic."""

    # The bounds of rolloutd.core.capacity: past them the arithmetic means nothing.
    num_layers: int = Field(gt=0, le=MAX_COUNT)
    num_kv_heads: int = Field(gt=0, le=MAX_COUNT)
    head_dim: int = Field(gt=0, le=MAX_COUNT)
    weights_gb: float = Field(gt=0, le=MAX_GB, allow_inf_nan=False)
    gpus: int = Field(gt=0, le=MAX_GPUS)
    gpu_memory_gb: float = Field(gt=0, le=MAX_GB, allow_inf_nan=False)
    tensor_parallel: int = Field(gt=0, le=MAX_GPUS)
    kv_dtype: Literal["fp16", "bf16", "fp8", "int8", "fp32"] = "fp16"
    memory_fraction: Fraction = 0.9


class VllmServerFiles(_Spec):
    """A vLLM canary's own server YAML (``config``) and its model's config.json
    (``model_json``), paths relative to the plan file, with what neither file says: the
    weights' size and the GPU's memory."""

    config: str = Field(min_length=1)
    model_json: str = Field(min_length=1)
    weights_gb: float = Field(gt=0, le=MAX_GB, allow_inf_nan=False)
    gpu_memory_gb: float = Field(default=48.0, gt=0, le=MAX_GB, allow_inf_nan=False)
    cuda_graph_gb: float | None = Field(default=None, gt=0, le=MAX_GB, allow_inf_nan=False)
    """What CUDA graphs need outside the budget, from the engine's log; default ~3.2 GB."""


class Capacity(_Spec):
    """The capacity assumption the change was planned on, watched at steady state.

    ``target_concurrency`` counts sessions; ``active_share`` is the share of them with a
    request in flight at once (agents think between turns). With ``engine`` given,
    validation checks that the canary pool can hold that many sequences at ``max_seq_len``;
    with ``vllm`` given instead, the shape comes from the canary's vLLM server YAML
    (``rolloutd.vllmfile``), and its warnings (CUDA graph headroom) are the plan's.
    """

    max_seq_len: int = Field(gt=0, le=MAX_COUNT)
    target_concurrency: int = Field(gt=0, le=MAX_COUNT)
    active_share: float = Field(default=1.0, gt=0.0, le=1.0)
    engine: EngineShape | None = None
    vllm: VllmServerFiles | None = None

    @model_validator(mode="after")
    def _one_shape(self) -> Self:
        if self.engine is not None and self.vllm is not None:
            raise ValueError("give 'engine' or 'vllm', not both: they would be two shapes")
        return self
