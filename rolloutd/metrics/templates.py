"""Signal templates: which PromQL answers a gate signal, per serving stack, in YAML.

A template file (``gates/vllm.yaml``, ``gates/triton-trtllm.yaml``, ...) maps signal names to
PromQL with these placeholders: ``{pool}`` (the pool's label value), ``{pool_label}`` (the
label the scrape config puts on each engine target), ``{gateway_pool_label}`` (the label the
agent gateway puts on its own series), ``{model}`` (the model the engine serves, for engines
that serve several, such as a Triton ensemble), ``{window}`` (a range) and
``{window_seconds}`` (the same window as a number of seconds, to compare a timestamp with,
e.g. a counter's ``_created``: a series born inside the window counts whole, see
``gates/litellm.yaml``). Operators add a signal by
adding an entry, and a plan may replace any signal's ``query``, ``samples`` or ``buckets``
through ``metrics.overrides`` (the kind stays the file's). Nothing else is substituted, and
every substituted value is escaped or validated first, so a hostile value cannot change the
shape of the query.

A signal may also name ``fresh``, the series whose newest sample shows that the pool is
still being scraped (default: the first series of its ``samples`` query, else of its value
query), and ``absent``, what it means when a series it selects does not exist (which engine
versions lack it), so an absent series is reported as such, never read as zero.

The kind says how a source reads a signal's answers:

* ``ratio``: events per exposure (``query``), ``samples`` = the exposure;
* ``events``: an event count (rounded), ``samples`` = the exposure, for canary-vs-stable tests;
* ``count``: a count of incidents (rounded), e.g. engine restarts;
* ``quantile``: ``histogram_quantile(q, ...)``, ``samples`` = observations and, if given,
  ``buckets`` (``sum by (le)`` of the window's bucket increases) for bounds at bucket edges;
* ``mean``: a sum per count (``samples`` = the count), where no histogram exists;
* ``gauge``: a level, e.g. KV-cache occupancy.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rolloutd.core.durations import parse_duration
from rolloutd.errors import BadInput, Problem
from rolloutd.userfiles import read_user_file, safe_yaml

GATES_DIR = Path(__file__).resolve().parents[2] / "gates"
"""The repository's ``gates/`` directory, where named template files live."""

Kind = Literal["ratio", "events", "count", "quantile", "mean", "gauge"]
PLACEHOLDERS = ("pool", "pool_label", "gateway_pool_label", "model", "window", "window_seconds")

_PLACEHOLDER = re.compile(r"\{(" + "|".join(PLACEHOLDERS) + r")\}")
# A brace pair around a bare word is not PromQL (matchers need an operator): a typo'd placeholder.
_UNKNOWN_PLACEHOLDER = re.compile(r"\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}")
_QUOTED_POOL = re.compile(r'(?<!=~)(?<!!~)"\{pool\}"')
_QUOTED_MODEL = re.compile(r'(?<!=~)(?<!!~)"\{model\}"')
_HISTOGRAM_QUANTILE = re.compile(r"histogram_quantile\(\s*([0-9]*\.?[0-9]+)\s*,")
_WINDOW = re.compile(r"^\d+(ms|s|m|h|d|w|y)$")
_LABEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SIGNAL_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"
MAX_TEMPLATE_BYTES = 256 * 1024


def escape_label_value(value: str) -> str:
    """``value`` as the inside of a double-quoted PromQL string: it cannot end the string."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def promql_duration(window: timedelta | str) -> str:
    """A window as a PromQL duration of one unit (``30s``, ``1500ms``, ``2h``).

    :raises ValueError: not positive, or (as text) not ``^\\d+(ms|s|m|h|d|w|y)$``.
    """
    if isinstance(window, str):
        if not _WINDOW.fullmatch(window):
            raise ValueError(f"window {window!r} is not a PromQL duration such as '30s' or '5m'")
        return window
    millis = window.total_seconds() * 1000
    if not math.isfinite(millis) or round(millis) < 1:
        raise ValueError(f"window {window} is not a positive duration of at least 1ms")
    millis = round(millis)
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if millis % size == 0:
            return f"{millis // size}{unit}"
    return f"{millis}ms"


def window_seconds(window: timedelta | str) -> float:
    """A window in seconds, as PromQL reads its duration (a year is 365 days).

    :raises ValueError: as :func:`promql_duration` does.
    """
    return parse_duration(promql_duration(window)).total_seconds()


@dataclass(frozen=True)
class Labels:
    """What a plan says about its label names and model, for rendering templates."""

    pool_label: str = "pool"
    gateway_pool_label: str = "pool"
    model: str | None = None

    def check(self) -> None:
        """:raises ValueError: a label name that is not one."""
        for field, name in (
            ("pool_label", self.pool_label),
            ("gateway_pool_label", self.gateway_pool_label),
        ):
            if not _LABEL_NAME.fullmatch(name):
                raise ValueError(f"{field} {name!r} is not a Prometheus label name")


def render(
    template: str,
    *,
    pool: str,
    window: timedelta | str,
    pool_label: str = "pool",
    labels: Labels | None = None,
) -> str:
    """Fill the placeholders of ``template`` in one pass (a value is never re-substituted).

    :raises ValueError: a label name or window that is not valid PromQL, or ``{model}``
        without a model.
    """
    labels = labels or Labels(pool_label=pool_label)
    labels.check()
    values = {
        "pool": escape_label_value(pool),
        "pool_label": labels.pool_label,
        "gateway_pool_label": labels.gateway_pool_label,
        "model": None if labels.model is None else escape_label_value(labels.model),
        "window": promql_duration(window),
        "window_seconds": f"{window_seconds(window):.3f}".rstrip("0").rstrip("."),
    }

    def value(match: re.Match[str]) -> str:
        found = values[match.group(1)]
        if found is None:
            raise ValueError("the template selects {model}: the plan must set metrics.model")
        return found

    return _PLACEHOLDER.sub(value, template)


def uses_model(template: str) -> bool:
    """Whether ``template`` selects the model (so a plan must name it)."""
    return "{model}" in template


def template_problems(template: str) -> list[str]:
    """What is wrong with one PromQL template, as messages (empty when it is fine)."""
    problems = []
    unknown = sorted(
        m.group(0)
        for m in _UNKNOWN_PLACEHOLDER.finditer(template)
        if m.group(1) not in PLACEHOLDERS or m.group(0) != f"{{{m.group(1)}}}"
    )
    if unknown:
        known = ", ".join(f"{{{p}}}" for p in PLACEHOLDERS)
        problems.append(f"unknown placeholder {unknown[0]}; known: {known} (no spaces)")
    pools = template.count("{pool}")
    if pools == 0:
        problems.append('must select the pool, e.g. {pool_label}="{pool}"')
    elif len(_QUOTED_POOL.findall(template)) != pools:
        # Escaping makes the value safe inside a plain string, not inside a regex matcher.
        problems.append('{pool} must stand alone in a string matched with = or !=: ="{pool}"')
    if len(_QUOTED_MODEL.findall(template)) != template.count("{model}"):
        problems.append('{model} must stand alone in a string matched with = or !=: ="{model}"')
    if re.search(r"(?<!\[)\{window\}", template):
        problems.append("{window} must open a range selector: [{window}] or [{window}:]")
    return problems


class Signal(BaseModel):
    """One signal of a template file."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    kind: Kind
    query: str = Field(min_length=1)
    samples: str | None = None
    buckets: str | None = None
    q: float | None = Field(default=None, gt=0.0, lt=1.0)
    scale: float = Field(default=1.0, gt=0.0)
    fresh: str | None = None
    """A selector whose newest sample shows the pool is being scraped (default: the first
    series of ``samples``, else of ``query``)."""
    replica_buckets: str | None = None
    """Quantile signals: the histogram's increase per replica (grouped by the replica's labels
    and ``le``), for judging at matched load (``rolloutd.metrics.cells``)."""
    replica_load: str | None = None
    """Quantile signals: the requests in flight per replica now (an instant gauge, asked at
    every scrape), grouped by the same labels."""
    absent: str = ""
    """What an absent series means for this signal (which engine versions lack it)."""
    missing_on: list[str] = Field(default_factory=list)
    """Engine versions the file was checked on (``checked_on``) that lack this signal."""
    description: str = ""

    @model_validator(mode="after")
    def _fits_its_kind(self) -> Self:
        if self.kind in ("ratio", "events", "quantile", "mean") and self.samples is None:
            raise ValueError(f"a {self.kind} signal needs 'samples' (the exposure or count query)")
        if self.kind == "quantile" and self.q is None:
            raise ValueError("a quantile signal needs 'q', the quantile its query computes")
        if self.kind != "quantile" and (self.buckets is not None or self.q is not None):
            raise ValueError("'buckets' and 'q' belong to quantile signals only")
        if (self.replica_buckets is None) != (self.replica_load is None):
            raise ValueError("'replica_buckets' and 'replica_load' go together")
        if self.replica_buckets is not None and self.kind != "quantile":
            raise ValueError("'replica_buckets' and 'replica_load' belong to quantile signals only")
        stated = {float(n) for n in _HISTOGRAM_QUANTILE.findall(self.query)}
        if self.q is not None and stated - {self.q}:
            raise ValueError(f"'q' is {self.q:g} but the query computes {max(stated - {self.q}):g}")
        return self

    def queries(self) -> dict[str, str]:
        """The signal's PromQL templates by role: value, samples, buckets, fresh."""
        found = {
            "value": self.query,
            "samples": self.samples,
            "buckets": self.buckets,
            "fresh": self.fresh,
        }
        return {role: text for role, text in found.items() if text is not None}


Override = str | Mapping[str, str]
"""A plan's replacement for a signal: its ``query``, or a mapping of query/samples/buckets."""
_OVERRIDABLE = ("query", "samples", "buckets", "fresh", "replica_buckets", "replica_load")


class _TemplateFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    description: str = ""
    checked_on: list[str] = Field(default_factory=list)
    signals: dict[str, Signal] = Field(min_length=1)


@dataclass(frozen=True)
class Templates:
    """The signals of one template file, with a plan's overrides applied."""

    source: str
    signals: Mapping[str, Signal]
    checked_on: tuple[str, ...] = ()

    def with_overrides(self, overrides: Mapping[str, Override], where: str = "plan") -> Templates:
        """These templates with ``overrides`` replacing signals' queries: a string replaces
        ``query``; a mapping replaces any of ``query``, ``samples``, ``buckets``, ``fresh``.

        :raises BadInput: an override of a signal the file does not define (its kind would
            be unknown), or a template with placeholder problems; ``where`` names the plan.
        """
        problems = []
        signals = dict(self.signals)
        for name, override in overrides.items():
            field = f"metrics.overrides.{name}"
            if name not in signals:
                message = (
                    f"{self.source} defines no signal {name!r} to take its kind from; "
                    "add it to a template file"
                )
                problems.append(Problem(where, field, message))
                continue
            update = {"query": override} if isinstance(override, str) else dict(override)
            for key, query in update.items():
                if key not in _OVERRIDABLE:
                    known = ", ".join(_OVERRIDABLE)
                    problems.append(Problem(where, f"{field}.{key}", f"not one of {known}"))
                    continue
                at = field if isinstance(override, str) else f"{field}.{key}"
                problems += [Problem(where, at, m) for m in template_problems(query)]
            if not problems:
                signals[name] = signals[name].model_copy(update=update)
        if problems:
            raise BadInput(problems)
        return replace(self, signals=signals)

    def uses_model(self) -> bool:
        """Whether any signal selects ``{model}``, so that a plan must name its model."""
        return any(uses_model(q) for s in self.signals.values() for q in s.queries().values())


def resolve(reference: str, directory: Path = GATES_DIR) -> Path:
    """The file a plan's ``metrics.templates`` names: a path, or a name in ``gates/``."""
    if "/" in reference or reference.endswith((".yaml", ".yml")):
        return Path(reference)
    return directory / f"{reference}.yaml"


def available(directory: Path = GATES_DIR) -> list[str]:
    """The names of the template files in ``directory``."""
    return sorted(p.stem for p in directory.glob("*.yaml")) if directory.is_dir() else []


def load_templates(reference: str, directory: Path = GATES_DIR) -> Templates:
    """Read and validate the template file ``reference`` names.

    :raises BadInput: naming the file and the field for each problem.
    """
    path = resolve(reference, directory)
    source = str(path)
    if not path.exists() and not path.is_symlink():
        names = ", ".join(available(directory)) or "none"
        raise BadInput.one(
            source, "", f"no such template file (named templates in {directory}: {names})"
        )
    text = read_user_file(
        path, expected="a YAML template file", what="a template file", limit=MAX_TEMPLATE_BYTES
    )
    return parse_templates(text, source)


def parse_templates(text: str, source: str = "<templates>") -> Templates:
    """Validate template file ``text``; ``source`` names it in messages.

    :raises BadInput: one problem per broken field.
    """
    data = safe_yaml(text, source)
    if not isinstance(data, dict):
        raise BadInput.one(source, "", "expected a mapping with 'signals'")
    try:
        parsed = _TemplateFile.model_validate(data)
    except ValidationError as exc:
        raise BadInput(
            [
                Problem(
                    source,
                    ".".join(str(p) for p in e["loc"]),
                    e["msg"].removeprefix("Value error, "),
                )
                for e in exc.errors()
            ]
        ) from None
    problems = []
    for name, signal in parsed.signals.items():
        if not re.fullmatch(_SIGNAL_NAME, name):
            problems.append(Problem(source, f"signals.{name}", "not a valid signal name"))
        for role, template in signal.queries().items():
            field = f"signals.{name}.{'query' if role == 'value' else role}"
            problems += [Problem(source, field, m) for m in template_problems(template)]
            if role == "fresh" and "[" in template:
                problems.append(Problem(source, field, "must be an instant selector, no range"))
        for role in ("replica_buckets", "replica_load"):
            template = getattr(signal, role)
            if template is not None:
                field = f"signals.{name}.{role}"
                problems += [Problem(source, field, m) for m in template_problems(template)]
    if problems:
        raise BadInput(problems)
    return Templates(source, parsed.signals, tuple(parsed.checked_on))


# What each gate kind can read: the signal kinds whose answers make sense to it.
_KINDS_FOR_GATE: dict[str, frozenset[str]] = {
    "events": frozenset({"count", "events"}),
    "compare": frozenset({"events"}),
    "latency": frozenset({"quantile", "mean"}),
}
# The capacity watch reads two signals by name (it has no 'signal' field).
CAPACITY_SIGNALS: dict[str, str] = {"sequence_tokens_p99": "quantile", "kv_cache_usage": "gauge"}


def signal_problems(gates: Mapping[str, object], templates: Templates) -> list[tuple[str, str]]:
    """Gates whose signal the templates lack, or whose signal's kind the gate cannot read,
    as (field path, message): found when a plan is validated, not at its first tick."""
    problems = []
    known = ", ".join(sorted(templates.signals))
    for name, gate in gates.items():
        kind = getattr(gate, "kind", None)
        if kind == "capacity":
            for needed, wanted in CAPACITY_SIGNALS.items():
                found = templates.signals.get(needed)
                if found is None or found.kind != wanted:
                    have = "does not define" if found is None else f"defines as a {found.kind}"
                    message = (
                        f"the capacity watch reads {needed!r} (a {wanted}), which "
                        f"{templates.source} {have}"
                    )
                    problems.append((f"gates.{name}", message))
            continue
        signal = getattr(gate, "signal", None)
        if signal is None:
            continue
        spec = templates.signals.get(signal)
        if spec is None:
            message = f"{templates.source} defines no signal {signal!r} (it defines: {known})"
            problems.append((f"gates.{name}.signal", message))
            continue
        allowed = _KINDS_FOR_GATE.get(str(kind))
        if allowed is not None and spec.kind not in allowed:
            message = (
                f"a {kind} gate reads {' or '.join(sorted(allowed))} signals; {signal!r} in "
                f"{templates.source} is a {spec.kind}"
            )
            problems.append((f"gates.{name}.signal", message))
    return problems
