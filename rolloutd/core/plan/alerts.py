"""Alert routing: channels by environment variable, routes by topic and severity."""

from __future__ import annotations

import re
from typing import Annotated, Literal, Self

from pydantic import AfterValidator, Field, model_validator

from rolloutd.core.plan.base import HttpUrl, Name, _Spec

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
    prometheus_url: HttpUrl | None = None

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
