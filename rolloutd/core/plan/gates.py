"""Gates: thresholds, event counts, pool comparisons, latency, capacity and the suite."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated, Literal, Self

from pydantic import BeforeValidator, ConfigDict, Field, model_validator

from rolloutd.core.plan.base import Duration, Fraction, HttpUrl, Name, _duration, _Spec

if TYPE_CHECKING:
    from rolloutd.core.plan.model import Limits


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


#: Signals the agent gateway counts at most once per session, whose exposure is sessions:
#: sessions go to a pool independently, so their events cannot cluster.
ONCE_PER_SESSION = frozenset(
    {
        "escalations",
        "escalation_rate",
        "session_timeouts",
        "session_timeout_rate",
        "session_schema_violations",
        "session_schema_violation_rate",
    }
)


class Detect(_Spec):
    """The regression a compare gate is meant to see: its rate on stable (``from``) and on
    a canary it must catch (``to``), with the chance of catching it at its final look that
    the plan asks for. With the plan's ``traffic``, ``plan validate`` says when the gate's
    steps are too short for it (``rolloutd.core.power``)."""

    model_config = ConfigDict(populate_by_name=True)

    baseline: float = Field(alias="from", gt=0.0, lt=1.0)
    regressed: float = Field(alias="to", gt=0.0, lt=1.0)
    power: float = Field(default=0.8, gt=0.0, lt=1.0)
    dispersion: float = Field(default=1.0, ge=1.0)
    """How many times a binomial's variance the canary's count has (sessions whose requests
    share a fate): the ``dispersion`` a rollout's evidence reports. 1 (independent) for the
    once-per-session signals; a request-level signal on agent traffic is usually above it."""

    @model_validator(mode="after")
    def _rises(self) -> Self:
        if self.regressed <= self.baseline:
            raise ValueError(
                f"'to' ({self.regressed:g}) must be above 'from' ({self.baseline:g}): the gate "
                "detects a canary rate above stable's"
            )
        return self


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
    waits for four blocks. Default: not for the once-per-session signals (``escalations``,
    ``session_timeouts``, ``session_schema_violations`` and their ``_rate``s), clustered
    otherwise."""
    min_load_ratio: float | None = Field(default=None, ge=0.0)
    """The canary's load per replica, as a share of stable's, below which the gate may fail
    but not pass. Default: 0.7 on a queue-timeout signal (a short queue times out less),
    none otherwise."""
    detect: Detect | None = None
    """The smallest regression the gate should catch, for ``plan validate``'s power check."""

    def live_pools(self) -> frozenset[Literal["canary", "stable"]]:
        return frozenset({"canary", "stable"})

    def events_cluster(self) -> bool:
        """Whether the gate's events may come several to a session (see ``clustered``)."""
        if self.clustered is not None:
            return self.clustered
        return self.signal not in ONCE_PER_SESSION

    def load_floor(self) -> float:
        """The effective ``min_load_ratio`` (0: a pass at any load)."""
        if self.min_load_ratio is not None:
            return self.min_load_ratio
        return DEFAULT_MIN_LOAD_RATIO if self.signal in QUEUE_TIMEOUT_SIGNALS else 0.0


class MatchLoad(_Spec):
    """Judge the canary against stable at the same concurrency (``rolloutd.core.stats.matched``):
    per replica and ``slice``, the latency histogram's increase and the mean requests in
    flight, compared within the load ``bands`` both pools carried."""

    slice: Duration = timedelta(seconds=30)
    """How finely the window is cut: a few scrapes, shorter than load changes."""
    bands: list[float] | None = None
    """Load-band edges in requests in flight per replica, from 0 (default: 0, 1, 2, 3, 4, 6,
    8, 12, ... 96)."""
    min_requests: int = Field(default=20, ge=1)
    """Requests a band needs on each pool before it is compared."""
    edge_quantile: float = Field(default=0.7, gt=0.0, lt=1.0)
    """Where a band's "slow" edge sits: the histogram edge nearest this quantile of stable's
    requests in the band, with at most half of them above it."""
    detect_ratio: float = Field(default=2.0, gt=1.0)
    """No pass before the requests compared could show a canary whose share of slow requests
    is this many times stable's (a pass on less is a test that could not have failed)."""

    @model_validator(mode="after")
    def _sane(self) -> Self:
        if self.slice <= timedelta(0):
            raise ValueError("slice must be longer than 0s")
        if self.bands is not None:
            edges = self.bands
            if len(edges) < 2 or edges[0] != 0 or edges != sorted(set(edges)):
                raise ValueError(
                    f"bands must be increasing edges starting at 0 (e.g. [0, 1, 2, 4, 8]), "
                    f"not {edges!r}"
                )
        return self


def _match_load(value: object) -> object:
    # `match_load: true` takes every default; `false` is no matching at all.
    if value is True:
        return MatchLoad()
    if value is False:
        return None
    return value


class LatencyGate(_Gate):
    """A latency quantile against an absolute target and against stable."""

    kind: Literal["latency"]
    signal: Name
    target_seconds: float = Field(gt=0)
    max_ratio: float | None = Field(default=None, gt=1.0)
    min_samples: int = Field(default=0, ge=0)
    min_load_ratio: float | None = Field(default=None, ge=0.0)
    """The canary's load per replica, as a share of stable's, below which the gate may fail
    but not pass: an underloaded canary's short queue flatters its latency. Default 0.7
    (none with ``match_load``, which compares at the load the canary carries); 0 accepts a
    pass at any load."""
    match_load: Annotated[MatchLoad | None, BeforeValidator(_match_load)] = None
    """Compare with stable at matched concurrency (needs ``max_ratio``): the gate can pass
    at 5% on a one-to-one fleet, and names the load bands it could not judge."""

    @model_validator(mode="after")
    def _matching_compares(self) -> Self:
        if self.match_load is not None and self.max_ratio is None:
            raise ValueError(
                "match_load compares the canary with stable: set max_ratio too (e.g. 1.25: "
                "the canary's share of slow requests at most 1.25x stable's at the same load)"
            )
        return self

    def live_pools(self) -> frozenset[Literal["canary", "stable"]]:
        # At 100% the ratio to stable is dropped and the target alone is judged.
        return frozenset({"canary"})

    def load_floor(self) -> float:
        """The effective ``min_load_ratio`` (0: a pass at any load)."""
        if self.min_load_ratio is not None:
            return self.min_load_ratio
        return 0.0 if self.match_load is not None else DEFAULT_MIN_LOAD_RATIO


class CapacityGate(_Gate):
    """Prompt+output length and KV-cache occupancy against the capacity assumption."""

    kind: Literal["capacity"]
    margin: Fraction = 0.0
    kv_usage_max: Fraction = 0.95

    def live_pools(self) -> frozenset[Literal["canary", "stable"]]:
        return frozenset({"canary"})


class SampledSource(_Spec):
    """Live traffic as a suite: each run samples what the agent gateway captured over the
    ``window`` before it (OpenAI Batch JSONL, ``rolloutd.gateway.Capture``) into ``cases``
    cases whose reference is the stable pool's answer, and replays them to both pools."""

    capture: str = Field(min_length=1)
    """The directory the gateway's capture writes (one ``YYYY-MM-DD`` pair of files a day)."""
    cases: int = Field(default=300, ge=10, le=20_000)
    """How many cases a run samples (stratified by tool; fewer when fewer were captured)."""
    window: Duration = timedelta(hours=24)
    """How far back a run samples from: a day, so a daily run sees each request once."""
    min_cases: int = Field(default=50, ge=1)
    """Fewer usable captured cases than this and the run is inconclusive (too little)."""

    @model_validator(mode="after")
    def _sane(self) -> Self:
        if self.window <= timedelta(0):
            raise ValueError("window must be longer than 0s")
        if self.min_cases > self.cases:
            raise ValueError(f"min_cases ({self.min_cases}) is more than cases ({self.cases})")
        return self


DEFAULT_JUDGE_PROMPT = """Question and conversation:
{question}

Retrieved context:
{context}

Reference answer:
{reference}

Answer to grade:
{answer}"""
"""The judge's user message; ``{question}``, ``{context}``, ``{reference}`` and ``{answer}``
are filled in (the answer is required)."""

DEFAULT_RUBRIC = (
    "You grade a customer-support answer for faithfulness: every claim it makes must be "
    "supported by the retrieved context, and it must agree with the reference answer. "
    "1 means fully faithful and correct; 0 means unsupported or contradicting; use values "
    "between for partly supported answers."
)


class JudgeSpec(_Spec):
    """An LLM judge on an OpenAI-compatible endpoint, asked at temperature 0.

    It must answer with a JSON object holding a number ``score`` in ``scale`` (anything else
    is refused as garbage); scores are mapped onto [0, 1]. ``api_key_env`` names the
    environment variable that holds the API key: the key itself never goes in a plan.
    """

    url: HttpUrl
    model: str = Field(min_length=1)
    prompt: str = Field(default=DEFAULT_JUDGE_PROMPT, min_length=1)
    rubric: str = Field(default=DEFAULT_RUBRIC, min_length=1)
    scale: list[float] = Field(default_factory=lambda: [0.0, 1.0], min_length=2, max_length=2)
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    timeout: float = Field(default=60.0, gt=0.0, le=3600.0)
    retries: int = Field(default=2, ge=0, le=10)
    concurrency: int = Field(default=4, ge=1, le=64)
    max_errors: Fraction = 0.05
    """The share of cases the judge may fail to score (errors, timeouts, garbage) before the
    run counts as too little measured: inconclusive, never passed."""

    @model_validator(mode="after")
    def _usable(self) -> Self:
        if "{answer}" not in self.prompt:
            raise ValueError("the judge's prompt must contain {answer}")
        low, high = self.bounds
        if not (math.isfinite(low) and math.isfinite(high) and low < high):
            raise ValueError(f"scale must be [low, high] with low < high, got {self.scale}")
        return self

    @property
    def bounds(self) -> tuple[float, float]:
        """The scale's (low, high)."""
        return (self.scale[0], self.scale[1])


class SuiteGate(_Gate):
    """The suite: per-field regressions or exactness against the baseline, or for a suite
    of reference answers, the mean score per case against the baseline's (``scorer``).

    Runs at the step's entry (``at_entry``) and then every ``every``. ``suite`` names a fixed
    suite file; ``sampled_suite`` a second file (sampled live cases, same format); ``sampled``
    live traffic the gateway captured, sampled afresh at each run. Each is run on both pools
    and judged the same way; a gate names at least one. The canary and baseline endpoints
    default to the first replica of each pool.
    """

    kind: Literal["suite"]
    suite: str | None = Field(default=None, min_length=1)
    rule: Literal["no_regression", "at_least_baseline", "max_drop"]
    max_drop_points: float = Field(default=1.0, ge=0.0)
    alpha: float = Field(default=0.05, gt=0.0, lt=1.0)
    every: Duration | None = None
    at_entry: bool = True
    sampled_suite: str | None = Field(default=None, min_length=1)
    sampled: SampledSource | None = None
    endpoint: HttpUrl | None = None
    baseline_endpoint: HttpUrl | None = None
    concurrency: int = Field(default=8, ge=1, le=256)
    max_request_errors: Fraction = 0.05
    scorer: Literal["exact", "token_f1", "judge"] | None = None
    """How a reference suite's answers are scored (a call suite ignores it)."""
    judge: JudgeSpec | None = None

    @model_validator(mode="after")
    def _judge_named(self) -> Self:
        if self.scorer == "judge" and self.judge is None:
            raise ValueError("scorer 'judge' needs a 'judge' section (url, model)")
        if self.judge is not None and self.scorer != "judge":
            raise ValueError("a 'judge' section needs scorer: judge")
        return self

    @model_validator(mode="after")
    def _names_cases(self) -> Self:
        if self.suite is None and self.sampled_suite is None and self.sampled is None:
            raise ValueError(
                "a suite gate needs cases: 'suite' (a file), 'sampled_suite' (a file) or "
                "'sampled' ({capture: DIR}: live traffic the gateway captured)"
            )
        return self


GateSpec = Annotated[
    ThresholdGate | EventsGate | CompareGate | LatencyGate | CapacityGate | SuiteGate,
    Field(discriminator="kind"),
]
