"""A Slack message for an alert: Block Kit blocks with a plain ``text`` fallback.

Pure functions of the facts an alert carries, so the message is fixed when the alert is
written (what the operator reads is what was true then) and can be tested without Slack.
A message says which rollout, step and gate, the value against the threshold, where the
evidence is, and the exact ``rolloutctl`` commands that apply.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

SEVERITY_ICON = {
    "info": ":information_source:",
    "warning": ":warning:",
    "critical": ":rotating_light:",
}
# Slack truncates a section's text at 3000 characters and rejects longer ones.
_MAX_TEXT = 2900


@dataclass(frozen=True)
class AlertFacts:
    """What a message is about; fields that do not apply are None."""

    topic: str
    severity: str
    text: str
    rollout_id: int | None = None
    rollout_name: str | None = None
    service: str | None = None
    environment: str | None = None
    step: int | None = None
    """The step's index in the plan (from 0); a message numbers it from 1: step 2 of 6."""
    steps: int | None = None
    step_name: str | None = None
    weight: int | None = None
    gate: str | None = None
    value: float | None = None
    threshold: str | None = None
    evidence_url: str | None = None
    commands: tuple[str, ...] = field(default_factory=tuple)


def graph_url(base: str, query: str, *, range_input: str = "1h") -> str:
    """A Prometheus graph page showing ``query`` over the last ``range_input``."""
    params = {"g0.expr": query, "g0.tab": "0", "g0.range_input": range_input}
    return f"{base.rstrip('/')}/graph?{urlencode(params)}"


def title(facts: AlertFacts) -> str:
    """One line: what happened, to which rollout."""
    what = facts.topic.replace("_", " ")
    if facts.rollout_id is None:
        return f"rolloutd: {what}"
    where = f"{facts.service}/{facts.environment}" if facts.service else "rollout"
    return f"{where}: {what} (rollout {facts.rollout_id})"


def fallback_text(facts: AlertFacts) -> str:
    """The plain ``text`` Slack shows in notifications and where blocks cannot be drawn."""
    parts = [f"[{facts.severity}] {title(facts)}: {facts.text}"]
    if facts.step is not None:
        parts.append(f"step {_step(facts)}")
    if facts.gate is not None:
        parts.append(f"gate {facts.gate} = {_value(facts.value)} (threshold {facts.threshold})")
    return _clip("; ".join(parts))


def build_message(facts: AlertFacts) -> dict[str, Any]:
    """The webhook body: ``{"text": ..., "blocks": [...]}``."""
    icon = SEVERITY_ICON.get(facts.severity, "")
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": _plain(f"{title(facts)}"[:150])},
        {"type": "section", "text": _markdown(f"{icon} *{facts.severity}*: {_escape(facts.text)}")},
    ]
    fields = []
    if facts.rollout_id is not None:
        fields.append(f"*Rollout*\n{facts.rollout_id} {_escape(facts.rollout_name or '')}")
    if facts.step is not None:
        fields.append(f"*Step*\n{_escape(_step(facts))}")
    if facts.gate is not None:
        fields.append(f"*Gate*\n`{_escape(facts.gate)}`")
        fields.append(
            f"*Value / threshold*\n{_value(facts.value)} vs {_escape(facts.threshold or '-')}"
        )
    if fields:
        blocks.append({"type": "section", "fields": [_markdown(f) for f in fields]})
    if facts.evidence_url:
        blocks.append(
            {"type": "section", "text": _markdown(f"<{facts.evidence_url}|Evidence in Prometheus>")}
        )
    if facts.commands:
        listing = "\n".join(facts.commands)
        blocks.append({"type": "section", "text": _markdown(f"```{_escape(listing)}```")})
    return {"text": fallback_text(facts), "blocks": blocks}


def render_text(message: dict[str, Any]) -> str:
    """Draw a message's blocks as plain text, roughly as Slack lays them out (for people)."""
    lines: list[str] = []
    for block in message.get("blocks", []):
        if block["type"] == "header":
            lines.append(block["text"]["text"])
            lines.append("=" * len(block["text"]["text"]))
        elif "fields" in block:
            lines.extend(_unescape(f["text"]).replace("\n", ": ", 1) for f in block["fields"])
        elif block["type"] == "section":
            lines.append(_unescape(block["text"]["text"]))
    return "\n".join(lines)


def _step(facts: AlertFacts) -> str:
    assert facts.step is not None
    of = f" of {facts.steps}" if facts.steps else ""
    name = f" {facts.step_name}" if facts.step_name else ""
    shown = facts.weight is not None and f"{facts.weight}%" not in (facts.step_name or "")
    weight = f", canary {facts.weight}%" if shown else ""
    return f"{facts.step + 1}{of}{name}{weight}"


def _value(value: float | None) -> str:
    return "no value" if value is None else f"{value:.4g}"


def _plain(text: str) -> dict[str, Any]:
    return {"type": "plain_text", "text": text, "emoji": True}


def _markdown(text: str) -> dict[str, Any]:
    return {"type": "mrkdwn", "text": _clip(text)}


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_TEXT else text[: _MAX_TEXT - 1] + "…"


def _escape(text: str) -> str:
    # Slack's mrkdwn treats these three as control characters.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _unescape(text: str) -> str:
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
