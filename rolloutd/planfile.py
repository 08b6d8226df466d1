"""Reading a plan file: every problem reported with the file, the field and what was expected.

Operators fix plans from these messages alone, so each one names a path such as
``steps[2].weight`` rather than pydantic's internal location tuple, and the loader
collects every problem it can find instead of stopping at the first. Steps are counted from 1
there, as ``step 2 of 6`` in every view (the core names them by Python's index, which
:func:`counted_from_one` shifts at this boundary), and a misspelt key names the nearest key
its section knows.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
import reprlib
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import BaseModel, ValidationError

from rolloutd.core.plan import CompareGate, LatencyGate, Plan, plan_problems, plan_warnings
from rolloutd.errors import BadInput, Problem
from rolloutd.userfiles import read_user_file, refuse_deep_yaml, refusing_deep_nesting

if TYPE_CHECKING:
    from rolloutd.metrics.templates import Templates

MAX_PLAN_BYTES = 1024 * 1024


@dataclass(frozen=True)
class LoadedPlan:
    """A validated plan with the text it came from and its content hash."""

    plan: Plan
    source: str
    text: str
    content_hash: str
    warnings: tuple[Problem, ...] = ()


def load_plan(path: str | Path) -> LoadedPlan:
    """Read, parse and validate the plan at ``path``.

    :raises BadInput: with one problem per broken rule, each naming the file and field.
    """
    text = read_user_file(Path(path), expected="a YAML plan", what="a plan", limit=MAX_PLAN_BYTES)
    return parse_plan(text, str(path))


def parse_plan(text: str, source: str = "<plan>", *, beside: bool = True) -> LoadedPlan:
    """Parse and validate plan ``text``; ``source`` names it in messages.

    ``beside=False`` skips the files the plan names relative to its own file (a vLLM
    capacity section's server YAML and model config): a plan stored with a rollout was
    checked with them at start, and whoever re-reads it has no plan file to resolve them
    against.

    :raises BadInput: with one problem per broken rule.
    """
    data = _parse_yaml(text, source)
    try:
        plan = Plan.model_validate(data)
    except ValidationError as exc:
        raise BadInput([_problem(source, data, err) for err in exc.errors()]) from None
    problems = [_as_written(source, path, message) for path, message in plan_problems(plan)]
    if problems:
        raise BadInput(problems)
    vllm_problems, vllm_warnings = _vllm_capacity(plan, source) if beside else ([], [])
    if vllm_problems:
        raise BadInput(vllm_problems)
    templates = _check_templates(plan, source)
    found = plan_warnings(plan, _latency_edges(templates))
    found += _load_signal_warnings(plan, templates)
    warnings = tuple(_as_written(source, path, message) for path, message in found)
    warnings += tuple(vllm_warnings)
    return LoadedPlan(
        plan=plan, source=source, text=text, content_hash=content_hash(plan), warnings=warnings
    )


def _vllm_capacity(plan: Plan, source: str) -> tuple[list[Problem], list[Problem]]:
    """The capacity findings of a plan that names its vLLM server YAML (none otherwise)."""
    if plan.capacity is None or plan.capacity.vllm is None:
        return [], []
    from rolloutd.vllmfile import plan_findings

    return plan_findings(plan, source)


def _check_templates(plan: Plan, source: str) -> Templates | None:
    """A Prometheus plan's template file loads, its overrides fit it, and it answers every
    signal the gates read with a kind they can judge; returns the templates (None: the plan
    reads no template file).

    :raises BadInput: naming the template file's own fields, or the plan's.
    """
    metrics = plan.metrics
    if metrics.source != "prometheus" or metrics.templates is None:
        return None
    from rolloutd.metrics.templates import load_templates, signal_problems

    with refusing_deep_nesting(metrics.templates):
        loaded = load_templates(metrics.templates)
    templates = loaded.with_overrides(metrics.overrides, where=source)
    problems = signal_problems(plan.gates, templates)
    if templates.uses_model() and metrics.model is None:
        message = (
            f"{templates.source} selects the model the engine serves: name it (e.g. "
            "tensorrt_llm, or ensemble for a Triton ensemble)"
        )
        problems.append(("metrics.model", message))
    for field in ("pool_label", "gateway_pool_label"):
        if not _LABEL_NAME.fullmatch(getattr(metrics, field)):
            problems.append((f"metrics.{field}", "is not a Prometheus label name"))
    if problems:
        raise BadInput([_as_written(source, path, message) for path, message in problems])
    return templates


# The agent gateway's duration histogram: its default edges are known (rolloutd.gateway).
_GATEWAY_DURATION = "agent_request_duration_seconds_bucket"


def _latency_edges(templates: Templates | None) -> dict[str, tuple[str, Sequence[float]]]:
    """The static bucket edges of the templates' latency histograms, where known: the
    gateway's defaults for a signal read from its duration histogram."""
    if templates is None:
        return {}
    from rolloutd.gateway import DURATION_BUCKETS

    return {
        name: ("the agent gateway's default buckets", DURATION_BUCKETS)
        for name, signal in templates.signals.items()
        if signal.buckets is not None and _GATEWAY_DURATION in signal.buckets
    }


def _load_signal_warnings(plan: Plan, templates: Templates | None) -> list[tuple[str, str]]:
    """Gates that need the pools' load while the templates cannot measure it: they would
    never pass (the load is unknown)."""
    from rolloutd.gates.load import LOAD_SIGNALS

    if templates is None or any(name in templates.signals for name in LOAD_SIGNALS):
        return []
    gated = sorted(
        name
        for name, gate in plan.gates.items()
        if isinstance(gate, LatencyGate | CompareGate) and gate.load_floor() > 0
    )
    if not gated:
        return []
    return [
        (
            "metrics.templates",
            f"{templates.source} defines neither {' nor '.join(LOAD_SIGNALS)}: the load of "
            f"the pools is unknown, so {', '.join(gated)} can never pass; add them (see "
            "gates/README.md) or set min_load_ratio: 0 on those gates",
        )
    ]


_LABEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def content_hash(plan: Plan) -> str:
    """The sha256 of the plan's canonical JSON: comments and key order do not change it."""
    canonical = json.dumps(plan.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


MAX_EXPANDED_NODES = 100_000


# libyaml's parser where PyYAML was built with it: a tenth of the pure-Python parser's time on
# the reference plan (1.5 ms against 13 ms), which every rolloutctl status pays once.
if TYPE_CHECKING:
    _SafeLoader = yaml.SafeLoader
else:
    _SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _UniqueKeyLoader(_SafeLoader):
    """A safe loader that refuses a key given twice in one mapping (YAML keeps the last),
    and a document whose aliases expand past :data:`MAX_EXPANDED_NODES` (a "billion laughs"
    file of a few hundred bytes would otherwise take minutes to validate)."""

    def construct_document(self, node: yaml.Node) -> Any:
        size = _expanded_size(node, {})
        if size > MAX_EXPANDED_NODES:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"aliases expand the document to more than {MAX_EXPANDED_NODES} nodes",
                node.start_mark,
            )
        return super().construct_document(node)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        # PyYAML's scalar constructors raise plain Python errors for a value its tag cannot
        # hold (a date 2025-13-45, !!float "abc", an int of 5,000 digits): a problem at the
        # value's line, like any other YAML error.
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, TypeError, AttributeError, ArithmeticError) as exc:
            tag = node.tag.rsplit(":", 1)[-1]
            reason = str(exc).split(";")[0] if isinstance(exc, ValueError | ArithmeticError) else ""
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"cannot read this value as {tag}: {reason or 'malformed'}",
                node.start_mark,
            ) from None


def _expanded_size(node: yaml.Node, memo: dict[int, int]) -> int:
    """How many nodes the document has once every alias is expanded (memoised per node)."""
    if id(node) in memo:
        return memo[id(node)]
    memo[id(node)] = 1  # a recursive alias counts once; PyYAML rejects real cycles later
    size = 1
    if isinstance(node, yaml.MappingNode):
        size += sum(_expanded_size(k, memo) + _expanded_size(v, memo) for k, v in node.value)
    elif isinstance(node, yaml.SequenceNode):
        size += sum(_expanded_size(item, memo) for item in node.value)
    memo[id(node)] = size
    return size


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    result: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in result:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} appears twice in one mapping", key_node.start_mark
            )
        result[key] = loader.construct_object(value_node, deep=True)
    return result


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_mapping,
)


def _parse_yaml(text: str, source: str) -> dict[str, Any]:
    if not text.strip():
        raise BadInput.one(source, "", "is empty; expected a YAML mapping with the plan")
    try:
        refuse_deep_yaml(text, source, _UniqueKeyLoader)
        with refusing_deep_nesting(source):
            data = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1} column {mark.column + 1}" if mark else "somewhere"
        raise BadInput.one(source, "", f"is not valid YAML at {where}: {exc.problem}") from None
    except yaml.YAMLError as exc:
        raise BadInput.one(source, "", f"is not valid YAML: {exc}") from None
    if data is None:
        raise BadInput.one(source, "", "holds no YAML document (only comments?); expected a plan")
    if not isinstance(data, dict):
        raise BadInput.one(
            source, "", f"expected a YAML mapping at the top level, got {_kind_of(data)}"
        )
    return data


def _kind_of(value: object) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a scalar"


_STEP_INDEX = re.compile(r"\bsteps\[([0-9]+)\]")


def counted_from_one(text: str) -> str:
    """``text`` with every ``steps[i]`` (Python's index) written ``steps[i+1]``."""
    return _STEP_INDEX.sub(lambda found: f"steps[{int(found.group(1)) + 1}]", text)


def _as_written(source: str, field: str, message: str) -> Problem:
    """A problem of the core's, its steps counted from 1 in the field and the message."""
    return Problem(source, counted_from_one(field), counted_from_one(message))


def _problem(source: str, data: object, error: Mapping[str, Any]) -> Problem:
    message = _message(error)
    if error["type"] == "extra_forbidden":
        message += _nearest_key(error["loc"])
    return _as_written(source, _field_path(data, error["loc"]), message)


def _nearest_key(loc: Sequence[int | str]) -> str:
    """`` (did you mean KEY?)`` for the known key of the section at ``loc[:-1]`` nearest to
    the unknown key ``loc[-1]``; empty when none is near (difflib's ratio under 0.6)."""
    known = {name for model in _models_at(loc[:-1]) for name in _keys_of(model)}
    nearest = difflib.get_close_matches(str(loc[-1]), sorted(known), n=1)
    return f" (did you mean {nearest[0]}?)" if nearest else ""


def _models_at(loc: Sequence[int | str]) -> list[type[BaseModel]]:
    """The plan's model classes that pydantic's location ``loc`` may point into."""
    found: list[Any] = [Plan]
    for item in loc:
        models = [m for t in found for m in _expanded(t) if _is_model(m)]
        containers = [t for t in found for t in _expanded(t) if not _is_model(t)]
        step: list[Any] = []
        for model in models:
            field = model.model_fields.get(str(item)) if isinstance(item, str) else None
            if field is not None:
                step.append(field.annotation)
        if not step and isinstance(item, str):
            # A union's tag (a step's kind, a router's driver): pydantic names the member.
            step = [m for m in models if item in _tags(m)] or models
        for container in containers:
            args = typing.get_args(container)
            if args:
                step.append(args[-1])
        found = step
    return [m for t in found for m in _expanded(t) if _is_model(m)]


def _expanded(annotation: Any) -> list[Any]:
    """``annotation`` with its unions and ``Annotated`` wrappers unwrapped."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _expanded(typing.get_args(annotation)[0])
    if origin is typing.Union or origin is types.UnionType:
        return [t for arg in typing.get_args(annotation) for t in _expanded(arg)]
    return [annotation]


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _keys_of(model: type[BaseModel]) -> set[str]:
    return {field.alias or name for name, field in model.model_fields.items()}


def _tags(model: type[BaseModel]) -> set[object]:
    tags: set[object] = set()
    for name in ("kind", "driver", "source"):
        field = model.model_fields.get(name)
        if field is not None:
            tags.update(typing.get_args(field.annotation))
    return tags


def _field_path(data: object, loc: Sequence[int | str]) -> str:
    """Render pydantic's location as ``steps[2].weight``, dropping union tags it inserts."""
    parts: list[str] = []
    node: object = data
    for item in loc:
        if isinstance(item, int) and not isinstance(node, dict):
            parts.append(f"[{item}]")
            node = node[item] if isinstance(node, list) and item < len(node) else None
            continue
        if isinstance(node, dict) and item not in node and item in _tags_of(node):
            continue  # the discriminator value of a tagged union, not a key the user wrote
        parts.append(f".{item}" if parts else str(item))
        node = node.get(item) if isinstance(node, dict) else None
    return "".join(parts)


def _tags_of(node: Mapping[str, Any]) -> set[object]:
    return {node.get("kind"), node.get("driver")} - {None}


def _message(error: Mapping[str, Any]) -> str:
    kind = error["type"]
    ctx = error.get("ctx") or {}
    given = error.get("input")
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "required, but missing"
    if kind == "union_tag_invalid":
        field = str(ctx.get("discriminator", "kind")).strip("'")
        return f"unknown {field} {ctx.get('tag')!r}; expected one of {ctx.get('expected_tags')}"
    if kind == "union_tag_not_found":
        field = str(ctx.get("discriminator", "kind")).strip("'")
        return f"needs '{field}' to say which kind it is"
    message = str(error["msg"])
    message = message.removeprefix("Value error, ")
    message = message[0].lower() + message[1:] if message else message
    if kind.endswith("_type") or kind.startswith(("greater", "less", "literal", "string_")):
        return f"{message}, got {_shown(given)}"
    return message


_SHORT = reprlib.Repr()
_SHORT.maxstring, _SHORT.maxother, _SHORT.maxlist, _SHORT.maxdict, _SHORT.maxlevel = 50, 50, 4, 4, 2


def _shown(value: object) -> str:
    return _SHORT.repr(value)
