"""Rollout plans: what an operator writes down before a rollout may start.

A plan is frozen data. It names the service and environment, the two engine pools
and how the router reaches them, where metrics come from, the pinned artefact sets,
the ordered steps with their gates, the rollback triggers evaluated at every step,
and the limits. Loading and the error messages live in ``rolloutd.planfile``; this
module holds only the shape and the rules that tie fields together.
"""

from __future__ import annotations

import math
import re
import string
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Annotated, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    model_validator,
)

from rolloutd.durations import format_duration, parse_duration


def _duration(value: object) -> object:
    # Plans write durations as text ('48h'); a bare number is ambiguous (seconds? hours?).
    if isinstance(value, timedelta):
        return value
    if isinstance(value, str):
        return parse_duration(value)
    raise ValueError(f"expected a duration such as '30s', '90m' or '48h', got {value!r}")


# Written back in the plan's own notation, so a dumped plan loads again.
Duration = Annotated[
    timedelta,
    BeforeValidator(_duration),
    PlainSerializer(format_duration, return_type=str, when_used="json"),
]
Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")]
Percent = Annotated[int, Field(ge=0, le=100)]
Fraction = Annotated[float, Field(ge=0.0, le=1.0)]


class _Spec(BaseModel):
    """Plan sections reject unknown keys and do not coerce types ('5' is not 5)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


# --- pools and router -------------------------------------------------------------------


class Replica(_Spec):
    """One engine replica: a name the router and deploy executors know it by, and its URL."""

    name: Name
    url: str = Field(pattern=r"^https?://\S+$")


class Pool(_Spec):
    """A set of replicas that serve one build."""

    replicas: list[Replica] = Field(min_length=1)


class Pools(_Spec):
    """The build users have now (stable) and the one being rolled out (canary)."""

    stable: Pool
    canary: Pool


class MemoryRouter(_Spec):
    """An in-process router: for tests and the demo."""

    driver: Literal["memory"]
    session_header: str = "X-Session-Id"


class FileRouter(_Spec):
    """Desired weights written atomically as JSON, for load balancers fed by a templater."""

    driver: Literal["file"]
    path: str = Field(min_length=1)
    session_header: str = "X-Session-Id"


class HAProxyRouter(_Spec):
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


class NginxRouter(_Spec):
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
    verify_url: str | None = Field(default=None, pattern=r"^https?://\S+$")
    command_prefix: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _two_distinct_upstreams(self) -> Self:
        for pool in ("stable", "canary"):
            if pool not in self.upstreams:
                raise ValueError(f"upstreams.{pool} must name an nginx upstream block")
        if self.upstreams["stable"] == self.upstreams["canary"]:
            raise ValueError("upstreams.stable and upstreams.canary must differ")
        return self


RouterSpec = Annotated[
    MemoryRouter | FileRouter | HAProxyRouter | NginxRouter, Field(discriminator="driver")
]


class MetricsSpec(_Spec):
    """Where gate signals come from and which signal templates apply."""

    source: Literal["prometheus", "simulator", "memory", "file"]
    url: str | None = None
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

    num_layers: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    weights_gb: float = Field(gt=0)
    gpus: int = Field(gt=0)
    gpu_memory_gb: float = Field(gt=0)
    tensor_parallel: int = Field(gt=0)
    kv_dtype: Literal["fp16", "bf16", "fp8", "int8", "fp32"] = "fp16"
    memory_fraction: Fraction = 0.9


class Capacity(_Spec):
    """The capacity assumption the change was planned on, watched at steady state.

    ``target_concurrency`` counts sessions; ``active_share`` is the share of them with a
    request in flight at once (agents think between turns). With ``engine`` given,
    validation checks that the canary pool can hold that many sequences at ``max_seq_len``.
    """

    max_seq_len: int = Field(gt=0)
    target_concurrency: int = Field(gt=0)
    active_share: float = Field(default=1.0, gt=0.0, le=1.0)
    engine: EngineShape | None = None


# --- gates --------------------------------------------------------------------------------


class RollbackAfter(_Spec):
    """Hold first; roll back once the gate has gone ``rollback_after`` without data."""

    rollback_after: Duration

    @model_validator(mode="after")
    def _positive(self) -> Self:
        if self.rollback_after <= timedelta(0):
            raise ValueError("rollback_after must be longer than 0s")
        return self


NoData = Literal["hold", "rollback"] | RollbackAfter


def _no_data(value: object) -> object:
    # One message for the three spellings, instead of one per branch of the union.
    if value is None or value in ("hold", "rollback") or isinstance(value, RollbackAfter):
        return value
    if isinstance(value, dict) and set(value) == {"rollback_after"}:
        after = _duration(value["rollback_after"])
        if isinstance(after, timedelta) and after > timedelta(0):
            return RollbackAfter(rollback_after=after)
    raise ValueError(
        f"expected 'hold', 'rollback' or {{rollback_after: DURATION}} (e.g. "
        f"{{rollback_after: 30m}}, longer than 0s), got {value!r}"
    )


class _Gate(_Spec):
    """Fields every gate kind shares."""

    description: str = ""
    window: Duration = timedelta(minutes=5)
    on_no_data: Annotated[NoData | None, BeforeValidator(_no_data)] = None
    """What the gate's missing data does to the rollout: ``hold`` (pause until data returns),
    ``rollback``, or ``{rollback_after: 30m}`` (hold, then roll back once the gate has gone
    that long without data, the hold included). Default: ``limits.on_inconclusive``."""

    def no_data(self, limits: Limits) -> NoData:
        """This gate's rule for missing data, the plan's limit standing in when it has none."""
        if self.on_no_data is not None:
            return self.on_no_data
        return "rollback" if limits.on_inconclusive == "rollback" else "hold"

    def live_pools(self) -> frozenset[Literal["canary", "stable"]]:
        """The pools whose live requests this gate needs: it does not apply at a step where
        one of them serves none (the canary at 0% unmirrored, stable at 100%)."""
        return frozenset()


class ThresholdGate(_Gate):
    """A signal against an absolute bound; needs ``min_samples`` before it may pass."""

    kind: Literal["threshold"]
    signal: Name
    pool: Literal["canary", "stable"] = "canary"
    max: float | None = None
    min: float | None = None
    min_samples: int = Field(default=0, ge=0)

    def live_pools(self) -> frozenset[Literal["canary", "stable"]]:
        return frozenset({self.pool})

    @model_validator(mode="after")
    def _has_bound(self) -> Self:
        if self.max is None and self.min is None:
            raise ValueError("a threshold gate needs 'max' or 'min'")
        if self.max is not None and self.min is not None and self.min > self.max:
            raise ValueError("'min' is greater than 'max'")
        return self


class EventsGate(_Gate):
    """Counts events (OOMs, restarts) on the canary; more than ``max_events`` is a breach."""

    kind: Literal["events"]
    signal: Name
    max_events: int = Field(default=0, ge=0)


DEFAULT_MIN_LOAD_RATIO = 0.7
"""The canary's load per replica, as a share of stable's, below which a latency or
queue-timeout gate may fail but not pass (its short queue flatters it)."""
QUEUE_TIMEOUT_SIGNALS = frozenset({"queue_timeouts", "queue_timeout_rate"})
"""Signals that count queue timeouts: like latency, they look better on an underloaded canary."""


def planned_load_ratio(weight: int, canary_replicas: int, stable_replicas: int) -> float:
    """One canary replica's share of sessions over one stable replica's, at ``weight`` percent
    (1-99): ``(w / nc) / ((1 - w) / ns)``."""
    return (weight / canary_replicas) / ((100 - weight) / stable_replicas)


class CompareGate(_Gate):
    """Canary vs stable rates with an anytime-valid sequential test at level ``alpha``."""

    kind: Literal["compare"]
    signal: Name
    alpha: float = Field(default=0.05, gt=0.0, lt=1.0)
    min_events: int | None = Field(default=None, ge=0)
    """Events (both pools) before the gate may pass. Default: as many as the test needs to be
    able to fail at all (all of them on the canary would reject), so a pass is never a test
    that could not have failed."""
    final_look: bool = True
    """Also test once, when the bake of the last step carrying the gate has passed, over
    all of its steps: a fixed-horizon test, for regressions too small to show early.
    (A rollback trigger has no last step: it keeps the every-tick test alone.)"""
    sequential_share: float = Field(default=0.2, gt=0.0, lt=1.0)
    """The share of ``alpha`` the every-tick test spends; the final look gets the rest."""
    clustered: bool | None = None
    """Whether one session can cause several of the signal's events (timeouts, schema
    violations: its turns share a fate). Clustered events are judged with the dispersion
    that blocks of ``window`` (each longer than a session) show, and the every-tick test
    waits for four blocks. Default: not for ``escalations`` and ``escalation_rate`` (once
    per session), clustered otherwise."""
    min_load_ratio: float | None = Field(default=None, ge=0.0)
    """The canary's load per replica, as a share of stable's, below which the gate may fail
    but not pass. Default: 0.7 on a queue-timeout signal (a short queue times out less),
    none otherwise."""

    def live_pools(self) -> frozenset[Literal["canary", "stable"]]:
        return frozenset({"canary", "stable"})

    def load_floor(self) -> float:
        """The effective ``min_load_ratio`` (0: a pass at any load)."""
        if self.min_load_ratio is not None:
            return self.min_load_ratio
        return DEFAULT_MIN_LOAD_RATIO if self.signal in QUEUE_TIMEOUT_SIGNALS else 0.0


class LatencyGate(_Gate):
    """A latency quantile against an absolute target and against stable."""

    kind: Literal["latency"]
    signal: Name
    target_seconds: float = Field(gt=0)
    max_ratio: float | None = Field(default=None, gt=1.0)
    min_samples: int = Field(default=0, ge=0)
    min_load_ratio: float | None = Field(default=None, ge=0.0)
    """The canary's load per replica, as a share of stable's, below which the gate may fail
    but not pass: an underloaded canary's short queue flatters its latency. Default 0.7;
    0 accepts a pass at any load."""

    def live_pools(self) -> frozenset[Literal["canary", "stable"]]:
        # At 100% the ratio to stable is dropped and the target alone is judged.
        return frozenset({"canary"})

    def load_floor(self) -> float:
        """The effective ``min_load_ratio`` (0: a pass at any load)."""
        return DEFAULT_MIN_LOAD_RATIO if self.min_load_ratio is None else self.min_load_ratio


class CapacityGate(_Gate):
    """Prompt+output length and KV-cache occupancy against the capacity assumption."""

    kind: Literal["capacity"]
    margin: Fraction = 0.0
    kv_usage_max: Fraction = 0.95

    def live_pools(self) -> frozenset[Literal["canary", "stable"]]:
        return frozenset({"canary"})


class SuiteGate(_Gate):
    """The tool-argument suite: per-field regressions or exactness against the baseline.

    Runs at the step's entry (``at_entry``) and then every ``every``; ``sampled_suite`` names
    a second suite (sampled live cases, same format) that is run and judged the same way.
    The canary and baseline endpoints default to the first replica of each pool.
    """

    kind: Literal["suite"]
    suite: str = Field(min_length=1)
    rule: Literal["no_regression", "at_least_baseline", "max_drop"]
    max_drop_points: float = Field(default=1.0, ge=0.0)
    alpha: float = Field(default=0.05, gt=0.0, lt=1.0)
    every: Duration | None = None
    at_entry: bool = True
    sampled_suite: str | None = Field(default=None, min_length=1)
    endpoint: str | None = Field(default=None, pattern=r"^https?://\S+$")
    baseline_endpoint: str | None = Field(default=None, pattern=r"^https?://\S+$")
    concurrency: int = Field(default=8, ge=1, le=256)
    max_request_errors: Fraction = 0.05


GateSpec = Annotated[
    ThresholdGate | EventsGate | CompareGate | LatencyGate | CapacityGate | SuiteGate,
    Field(discriminator="kind"),
]


# --- steps --------------------------------------------------------------------------------


class _Step(_Spec):
    """Fields every step kind shares."""

    name: str | None = None
    gates: list[Name] = Field(default_factory=list)
    min_samples: dict[Name, Annotated[int, Field(ge=1)]] = Field(default_factory=dict)
    """Per gate of the step, the samples its newest evaluation must rest on for the step to
    complete; short of them when the bake ends, the bake is extended (``max_extension``)."""
    max_extension: Duration | None = None
    """How much longer than its bake the step may wait for ``min_samples``; default: the
    bake's own length. Then the short gate's ``on_no_data`` applies."""

    def hold_for(self) -> timedelta:
        """How long the step must run (paused time excluded) before it may complete."""
        return timedelta(0)

    def extension(self) -> timedelta:
        """How long past its bake the step may wait for its gates' ``min_samples``."""
        return self.hold_for() if self.max_extension is None else self.max_extension

    def title(self) -> str:
        """The step's name as shown to operators."""
        return self.name or self.default_title()

    def default_title(self) -> str:
        """A name derived from the step's kind."""
        raise NotImplementedError


class ShadowStep(_Step):
    """Mirrored traffic: the canary sees copies of requests, users see only stable."""

    kind: Literal["shadow"]
    weight: Literal[0] = 0
    duration: Duration = timedelta(0)
    mirror: bool = True
    """False: no traffic is mirrored (HAProxy cannot); the gates exercise the canary directly."""

    def hold_for(self) -> timedelta:
        return self.duration

    def default_title(self) -> str:
        return "shadow"


class CanaryStep(_Step):
    """A share of sessions (1-99%) on the canary for a bake period."""

    kind: Literal["canary"]
    weight: int = Field(ge=1, le=99)
    bake: Duration

    def hold_for(self) -> timedelta:
        return self.bake

    def default_title(self) -> str:
        return f"canary {self.weight}%"


class PauseStep(_Step):
    """Holds the current weight until an operator promotes, or ``duration`` passes."""

    kind: Literal["pause"]
    duration: Duration | None = None

    def hold_for(self) -> timedelta:
        return self.duration or timedelta(0)

    def default_title(self) -> str:
        return "awaiting promotion" if self.duration is None else "pause"


class FullStep(_Step):
    """All new sessions on the canary build."""

    kind: Literal["full"]
    weight: Literal[100] = 100
    duration: Duration = timedelta(0)

    def hold_for(self) -> timedelta:
        return self.duration

    def default_title(self) -> str:
        return "full 100%"


class SteadyStep(_Step):
    """The post-promotion watch: capacity and health at 100% for ``duration``."""

    kind: Literal["steady"]
    weight: Literal[100] = 100
    duration: Duration = timedelta(hours=24)

    def hold_for(self) -> timedelta:
        return self.duration

    def default_title(self) -> str:
        return "steady"


Step = Annotated[
    ShadowStep | CanaryStep | PauseStep | FullStep | SteadyStep, Field(discriminator="kind")
]


# --- deploy executors -------------------------------------------------------------------

# What an argv template or ``files_path`` may name; each is filled per replica and set.
TEMPLATE_FIELDS = frozenset({"replica", "url", "set", "digest", "root", "engine", "manifest"})
Role = Literal["stable", "canary"]


def _template_fields(template: str) -> set[str]:
    try:
        return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as exc:
        raise ValueError(f"{template!r} is not a valid template: {exc}") from None


def _check_template(template: str, where: str) -> None:
    unknown = _template_fields(template) - TEMPLATE_FIELDS
    if unknown:
        known = ", ".join("{" + name + "}" for name in sorted(TEMPLATE_FIELDS))
        raise ValueError(f"{where} names {sorted(unknown)}; known placeholders: {known}")


class NoExecutor(_Spec):
    """No deploys: operators put artefacts on replicas themselves; rollback moves traffic only."""

    kind: Literal["none"] = "none"


class _Executor(_Spec):
    """What every executor shares: how long a replica may take to become healthy after a
    deploy, how often to poll it, and optionally where the ops host can read the files a
    replica serves (``{replica}`` and the other placeholders), for the digest check."""

    health_deadline: Duration = timedelta(minutes=5)
    poll_interval: Duration = timedelta(seconds=2)
    files_path: str | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _known_placeholders(self) -> Self:
        if self.files_path is not None:
            _check_template(self.files_path, "files_path")
        return self


class CommandExecutor(_Executor):
    """Runs the operator's own deploy command once per replica (``argv`` is a template).

    The artefact set's name, root, engine, config, digests and a manifest file are in the
    environment as ``ROLLOUTD_*``; nothing else of rolloutd's environment is passed on.
    ``health`` picks the health endpoint (``auto``: from the set's engine).
    """

    kind: Literal["command"]
    argv: list[str] = Field(min_length=1)
    timeout: Duration = timedelta(minutes=15)
    env: dict[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")], str] = Field(
        default_factory=dict
    )
    health: Literal["auto", "vllm", "triton"] = "auto"

    @model_validator(mode="after")
    def _known_argv_placeholders(self) -> Self:
        for i, part in enumerate(self.argv):
            _check_template(part, f"argv[{i}]")
        reserved = sorted(name for name in self.env if name.startswith("ROLLOUTD_"))
        if reserved:
            raise ValueError(f"env may not set {', '.join(reserved)}: rolloutd sets ROLLOUTD_*")
        return self


class TritonExecutor(_Executor):
    """Triton model control (``--model-control-mode=explicit``): load ``model`` with the set's
    engine config as the override, wait until the version is ready, unload the models in
    ``unload`` that it replaces. ``versions`` pins the repository version each role's set
    is served as; ``urls`` maps a replica name to its Triton HTTP URL when that is not the
    replica URL the router uses."""

    kind: Literal["triton"]
    model: Name
    versions: dict[Role, Annotated[int, Field(ge=1)]] = Field(default_factory=dict)
    unload: list[Name] = Field(default_factory=list)
    urls: dict[Name, Annotated[str, Field(pattern=r"^https?://\S+$")]] = Field(default_factory=dict)
    load_timeout: Duration = timedelta(minutes=10)


ExecutorSpec = Annotated[NoExecutor | CommandExecutor | TritonExecutor, Field(discriminator="kind")]


# --- alerts -------------------------------------------------------------------------------

# What the daemon alerts about; a route names one of these.
AlertTopic = Literal[
    "rollback_started",
    "rolled_back",
    "action_stuck",
    "awaiting_promotion",
    "inconclusive_limit",
    "step_extended",
    "capacity_invalid",
    "drill_result",
    "skip_drill",
    "preflight_forced",
    "completed",
    "aborted",
    "failed",
    "leadership",
]
AlertSeverity = Literal["info", "warning", "critical"]
_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]{0,99}$")


def _environment_variable(value: str) -> str:
    # Never echo the value: someone who pasted the webhook URL here has written a secret.
    if not _ENV_NAME.match(value):
        raise ValueError(
            "must name an environment variable such as SLACK_WEBHOOK_OPS (upper case, digits, "
            "underscores); the webhook URL is a secret and belongs in rolloutd's environment"
        )
    return value


class AlertChannel(_Spec):
    """A Slack incoming webhook, named by the environment variable that holds its URL.

    The URL is a secret, so a plan (stored in the database, printed by ``rolloutctl``)
    only names the variable; the daemon reads it from its environment or env file.
    """

    webhook_env: Annotated[str, AfterValidator(_environment_variable)]
    min_severity: AlertSeverity = "info"


class AlertRoute(_Spec):
    """Where one topic goes, and at which severity (default: the daemon's own choice)."""

    channels: list[Name] = Field(min_length=1)
    severity: AlertSeverity | None = None


class Alerts(_Spec):
    """Slack channels, which topics go where, and where to link the evidence.

    Topics without a route go to ``default``. ``prometheus_url`` is the base of the
    graph links in a message; without it, a plan on a Prometheus source links there.
    """

    channels: dict[Name, AlertChannel] = Field(min_length=1)
    default: list[Name] = Field(default_factory=list)
    routes: dict[AlertTopic, AlertRoute] = Field(default_factory=dict)
    prometheus_url: str | None = Field(default=None, pattern=r"^https?://\S+$")

    @model_validator(mode="after")
    def _routes_name_channels(self) -> Self:
        named = [("default", c) for c in self.default]
        named += [(f"routes.{t}.channels", c) for t, r in self.routes.items() for c in r.channels]
        for where, channel in named:
            if channel not in self.channels:
                defined = ", ".join(sorted(self.channels))
                raise ValueError(
                    f"{where}: channel {channel!r} is not one of alerts.channels ({defined})"
                )
        return self


# --- the plan -----------------------------------------------------------------------------


class Limits(_Spec):
    """When to stop trusting a rollout that makes no progress. ``on_inconclusive`` is the
    ``on_no_data`` of every gate that does not name its own (pause: ``hold``)."""

    max_inconclusive: int = Field(default=5, ge=1)
    on_inconclusive: Literal["pause", "rollback"] = "pause"
    progress_deadline: Duration | None = None


class Rollback(_Spec):
    """Gates evaluated at every tick of every step; any breach rolls back at once."""

    triggers: list[Name] = Field(default_factory=list)


class Plan(_Spec):
    """A whole rollout plan. Structure only: :func:`plan_problems` checks how fields relate."""

    name: Name
    service: Name
    environment: Literal["staging", "production"]
    description: str = ""
    pools: Pools
    router: RouterSpec
    metrics: MetricsSpec
    artefacts: Artefacts
    capacity: Capacity | None = None
    interval: Duration = timedelta(seconds=30)
    trigger_interval: Duration = timedelta(seconds=5)
    limits: Limits = Limits()
    gates: dict[Name, GateSpec] = Field(default_factory=dict)
    steps: list[Step] = Field(min_length=1)
    rollback: Rollback = Rollback()
    alerts: Alerts | None = None
    executor: ExecutorSpec = NoExecutor()

    def step_weight(self, index: int) -> int:
        """The canary weight in force at step ``index`` (a pause keeps the one before it)."""
        for step in reversed(self.steps[: index + 1]):
            if not isinstance(step, PauseStep):
                return step.weight
        return 0

    def step_mirrors(self, index: int) -> bool:
        """Whether traffic is mirrored at step ``index`` (a pause after shadow keeps mirroring)."""
        for step in reversed(self.steps[: index + 1]):
            if not isinstance(step, PauseStep):
                return isinstance(step, ShadowStep) and step.mirror
        return False

    def idle_pool(self, index: int) -> Literal["canary", "stable"] | None:
        """The pool that serves no live requests at step ``index``: the canary at 0% without
        mirroring, stable at 100%; a gate that needs that pool's traffic cannot apply there."""
        weight = self.step_weight(index)
        if weight == 0 and not self.step_mirrors(index):
            return "canary"
        return "stable" if weight == 100 else None

    def gates_of(self, index: int) -> tuple[str, ...]:
        """The gate names that must pass for step ``index`` to complete."""
        return tuple(self.steps[index].gates)


def plan_warnings(
    plan: Plan, latency_edges: Mapping[str, tuple[str, Sequence[float]]] | None = None
) -> list[tuple[str, str]]:
    """Things that are legal but probably wrong: a target concurrency that cannot fit, and
    step gates that cannot pass at their step's load (``rolloutd.loadmatch``).
    ``latency_edges``: per latency signal, where its static bucket edges come from and the
    edges, when the plan's templates state them."""
    from rolloutd.loadmatch import load_warnings

    return [*_capacity_warnings(plan), *load_warnings(plan, latency_edges)]


def _capacity_warnings(plan: Plan) -> list[tuple[str, str]]:
    from rolloutd.capacity import CapacityError, deployment_of, max_seq_len_for, resident_sequences

    capacity = plan.capacity
    if capacity is None or capacity.engine is None:
        return []
    replicas = len(plan.pools.canary.replicas)
    needed = math.ceil(capacity.target_concurrency * capacity.active_share)
    try:
        deployment = deployment_of(capacity.engine)
        per_replica = resident_sequences(deployment, capacity.max_seq_len)
        fits = max_seq_len_for(deployment, -(-needed // replicas))
    except CapacityError as exc:
        return [("capacity.engine", str(exc))]
    if per_replica * replicas >= needed:
        return []
    return [
        (
            "capacity",
            f"{capacity.target_concurrency} sessions x {capacity.active_share:g} active need "
            f"{needed} resident sequences, but {replicas} canary replica(s) hold "
            f"{per_replica * replicas} at max_seq_len {capacity.max_seq_len}; requests will "
            f"queue (max_seq_len {fits} would fit)",
        )
    ]


def plan_problems(plan: Plan) -> list[tuple[str, str]]:
    """Every broken cross-field rule of ``plan`` as (field path, what was expected)."""
    return [
        *_dangling_gate_references(plan),
        *_steps_out_of_order(plan),
        *_intervals(plan),
        *_metrics_source(plan),
        *_mirroring(plan),
        *_capacity(plan),
        *_gates_without_traffic(plan),
        *_step_min_samples(plan),
    ]


def _step_min_samples(plan: Plan) -> list[tuple[str, str]]:
    """A step may ask for samples only from its own gates, of kinds that count samples, and
    only where it judges its gates at all (a pause step does not)."""
    problems = []
    for i, step in enumerate(plan.steps):
        if isinstance(step, PauseStep):
            for field in ("min_samples", "max_extension"):
                if getattr(step, field):
                    problems.append((f"steps[{i}].{field}", "a pause step judges no gates"))
            continue
        for name in step.min_samples:
            where = f"steps[{i}].min_samples.{name}"
            gate = plan.gates.get(name)
            if name not in step.gates:
                listed = ", ".join(step.gates) or "none"
                problems.append((where, f"{name!r} is not one of this step's gates ({listed})"))
            elif isinstance(gate, EventsGate):
                problems.append((where, f"gate {name!r} counts events, not samples"))
    return problems


def _gates_without_traffic(plan: Plan) -> list[tuple[str, str]]:
    """Step gates that need live requests from a pool that serves none at their step: they
    could never pass, so the step could never complete. (Triggers are fine: they are not
    judged where they do not apply.)"""
    problems = []
    for i, step in enumerate(plan.steps):
        idle = plan.idle_pool(i)
        for j, name in enumerate(step.gates):
            gate = plan.gates.get(name)
            if gate is None or idle not in gate.live_pools():
                continue
            why = (
                "the canary serves no live requests at 0% without mirroring (judge it there "
                "with a suite gate, or mirror traffic with the nginx driver)"
                if idle == "canary"
                else "stable serves no live requests at 100% to compare with"
            )
            problems.append((f"steps[{i}].gates[{j}]", f"gate {name!r} cannot apply here: {why}"))
    return problems


def _capacity(plan: Plan) -> list[tuple[str, str]]:
    if plan.capacity is not None:
        return []
    return [
        (f"gates.{name}", "a capacity gate needs the plan's 'capacity' section (max_seq_len)")
        for name, gate in plan.gates.items()
        if isinstance(gate, CapacityGate)
    ]


def _mirroring(plan: Plan) -> list[tuple[str, str]]:
    if not isinstance(plan.router, HAProxyRouter):
        return []
    return [
        (
            f"steps[{i}].mirror",
            "HAProxy cannot mirror traffic: set 'mirror: false' (the shadow gates then exercise "
            "the canary directly, e.g. the tool-argument suite) or use the nginx driver",
        )
        for i, step in enumerate(plan.steps)
        if isinstance(step, ShadowStep) and step.mirror
    ]


def _metrics_source(plan: Plan) -> list[tuple[str, str]]:
    metrics = plan.metrics
    if metrics.source == "prometheus" and not metrics.url:
        return [
            ("metrics.url", "required when source is 'prometheus' (e.g. http://prometheus:9090)")
        ]
    if metrics.source == "prometheus" and not metrics.templates:
        return [
            (
                "metrics.templates",
                "required when source is 'prometheus': a template file name in gates/ "
                "(vllm, triton-trtllm) or a path to one",
            )
        ]
    if metrics.source == "file" and not metrics.path:
        return [("metrics.path", "required when source is 'file' (a JSON file of signal values)")]
    return []


def _dangling_gate_references(plan: Plan) -> list[tuple[str, str]]:
    defined = ", ".join(sorted(plan.gates)) or "none"
    problems = []
    for i, step in enumerate(plan.steps):
        for j, gate in enumerate(step.gates):
            if gate not in plan.gates:
                problems.append((f"steps[{i}].gates[{j}]", _undefined(gate, defined)))
    for j, gate in enumerate(plan.rollback.triggers):
        if gate not in plan.gates:
            problems.append((f"rollback.triggers[{j}]", _undefined(gate, defined)))
    return problems


def _undefined(gate: str, defined: str) -> str:
    return f"gate {gate!r} is not defined under 'gates' (defined: {defined})"


def _steps_out_of_order(plan: Plan) -> list[tuple[str, str]]:
    problems = []
    previous_weight = -1
    seen_full = False
    for i, step in enumerate(plan.steps):
        where = f"steps[{i}].kind"
        if seen_full and not isinstance(step, SteadyStep):
            problems.append((where, f"only 'steady' may follow 'full', got {step.kind!r}"))
            continue
        if isinstance(step, SteadyStep) and not seen_full:
            problems.append((where, "'steady' must come after a 'full' step"))
            continue
        if isinstance(step, PauseStep):
            if i == 0:
                problems.append((where, "a plan cannot start with 'pause'"))
            continue
        if isinstance(step, ShadowStep) and previous_weight > 0:
            problems.append((where, "'shadow' must come before any step that shifts traffic"))
        if isinstance(step, CanaryStep) and step.weight <= previous_weight:
            problems.append(
                (
                    f"steps[{i}].weight",
                    "weights must increase from step to step: "
                    f"{step.weight} after {previous_weight}",
                )
            )
        seen_full = seen_full or isinstance(step, FullStep)
        previous_weight = max(previous_weight, step.weight)
    return problems


def _intervals(plan: Plan) -> list[tuple[str, str]]:
    problems = []
    if plan.interval <= timedelta(0):
        problems.append(("interval", "must be longer than 0s"))
    if plan.trigger_interval <= timedelta(0):
        problems.append(("trigger_interval", "must be longer than 0s"))
    elif plan.trigger_interval > plan.interval:
        problems.append(("trigger_interval", "must not be longer than 'interval'"))
    return problems
