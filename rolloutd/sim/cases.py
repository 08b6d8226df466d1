"""The agent's tools and tool-call cases: what a correct answer looks like.

A case is a user request plus the one tool call that answers it. The traffic generator
and the tests draw cases from here; the simulated engine is told the expected call in the
request extension field ``rolloutd_expected`` (real engines ignore unknown fields) and
answers it according to its quality profile.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

_ID = {"type": "string", "pattern": r"^[A-Z]{3}-[0-9]{5,6}$"}
_MONEY = {"type": "number", "minimum": 0}
_CURRENCY = {"type": "string", "enum": ["USD", "EUR", "GBP"]}
_DATE = {"type": "string", "format": "date", "description": "YYYY-MM-DD"}


def _tool(name: str, description: str, properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "description": description,
        "parameters": {
            "type": "object",
            "properties": properties,
            "required": list(properties),
            "additionalProperties": False,
        },
    }


TOOLS: dict[str, dict[str, Any]] = {
    tool["name"]: tool
    for tool in [
        _tool(
            "issue_refund",
            "Refund an order in full or in part.",
            {
                "order_id": _ID,
                "amount": _MONEY,
                "currency": _CURRENCY,
                "reason": {"type": "string"},
            },
        ),
        _tool(
            "schedule_callback",
            "Book a phone callback for a customer.",
            {
                "customer_id": _ID,
                "date": _DATE,
                "time_window": {"type": "string", "enum": ["morning", "afternoon", "evening"]},
                "phone": {"type": "string"},
            },
        ),
        _tool(
            "update_shipping_address",
            "Change where an order is shipped.",
            {
                "order_id": _ID,
                "street": {"type": "string"},
                "city": {"type": "string"},
                "postal_code": {"type": "string"},
                "country": {"type": "string", "pattern": "^[A-Z]{2}$"},
            },
        ),
        _tool(
            "create_support_ticket",
            "Open a ticket for the support team.",
            {
                "account_id": _ID,
                "priority": {"type": "string", "enum": ["low", "normal", "high", "urgent"]},
                "summary": {"type": "string"},
                "due_date": _DATE,
            },
        ),
        _tool(
            "transfer_funds",
            "Move money between two of the customer's accounts.",
            {
                "from_account": _ID,
                "to_account": _ID,
                "amount": _MONEY,
                "currency": _CURRENCY,
                "execute_on": _DATE,
            },
        ),
    ]
}
"""The agent's tools by name, each with its JSON schema under ``parameters``."""


@dataclass(frozen=True)
class Case:
    """One user request and the tool call that answers it."""

    id: str
    tool: str
    arguments: dict[str, Any] = field(hash=False)
    message: str = ""

    def expected(self) -> dict[str, Any]:
        """The request extension that tells the simulator the right answer."""
        return {"name": self.tool, "arguments": self.arguments}


def tool_definitions(names: list[str] | None = None) -> list[dict[str, Any]]:
    """The tools in OpenAI ``tools`` form, all of them or the ones named."""
    chosen = names if names is not None else list(TOOLS)
    return [{"type": "function", "function": TOOLS[name]} for name in chosen]


def schema_of(tool: str) -> dict[str, Any]:
    """The JSON schema of a tool's arguments.

    :raises KeyError: no such tool.
    """
    return TOOLS[tool]["parameters"]  # type: ignore[no-any-return]


def rng_for(*parts: object) -> random.Random:
    """A random generator seeded by a stable hash of ``parts`` (not Python's ``hash``)."""
    text = json.dumps(parts, sort_keys=True, default=str, separators=(",", ":"))
    return random.Random(int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big"))


def make_case(rng: random.Random, case_id: str) -> Case:
    """Draw one case: a tool, its arguments and a user message that states them."""
    tool = rng.choice(sorted(TOOLS))
    arguments = _ARGUMENTS[tool](rng)
    facts = ", ".join(f"{key} {value}" for key, value in arguments.items())
    return Case(case_id, tool, arguments, f"[{case_id}] Please {tool.replace('_', ' ')}: {facts}.")


def generate_cases(count: int, seed: int = 0) -> list[Case]:
    """A fixed, reproducible list of ``count`` cases."""
    rng = rng_for("cases", seed)
    return [make_case(rng, f"case-{seed}-{index:04d}") for index in range(count)]


def _record_id(rng: random.Random, prefix: str, digits: int = 6) -> str:
    return f"{prefix}-{rng.randrange(10 ** (digits - 1), 10**digits)}"


def _amount(rng: random.Random) -> float | int:
    if rng.random() < 0.5:
        return rng.randrange(1, 40) * 50
    return round(rng.uniform(5, 5000), 2)


def _date(rng: random.Random) -> str:
    return (dt.date(2025, 1, 1) + dt.timedelta(days=rng.randrange(0, 365))).isoformat()


_REASONS = ["Item arrived damaged", "Duplicate charge", "Late delivery", "Wrong size sent"]
_SUMMARIES = [
    "Cannot log in after password reset",
    "Invoice shows the wrong VAT number",
    "Card declined at checkout",
    "App crashes when uploading receipts",
]
_STREETS = ["12 Harbour Road", "7 Rue des Lilas", "221 Baker Street", "5 Kastanienallee"]
_CITIES = [("Bristol", "BS1 4DJ", "GB"), ("Lyon", "69002", "FR"), ("Berlin", "10435", "DE")]

_ARGUMENTS: dict[str, Callable[[random.Random], dict[str, Any]]] = {
    "issue_refund": lambda rng: {
        "order_id": _record_id(rng, "ORD"),
        "amount": _amount(rng),
        "currency": rng.choice(["USD", "EUR", "GBP"]),
        "reason": rng.choice(_REASONS),
    },
    "schedule_callback": lambda rng: {
        "customer_id": _record_id(rng, "CUS", 5),
        "date": _date(rng),
        "time_window": rng.choice(["morning", "afternoon", "evening"]),
        "phone": f"+44 20 7946 {rng.randrange(1000, 10000)}",
    },
    "update_shipping_address": lambda rng: dict(
        zip(
            ["order_id", "street", "city", "postal_code", "country"],
            [_record_id(rng, "ORD"), rng.choice(_STREETS), *rng.choice(_CITIES)],
            strict=True,
        )
    ),
    "create_support_ticket": lambda rng: {
        "account_id": _record_id(rng, "ACC"),
        "priority": rng.choice(["low", "normal", "high", "urgent"]),
        "summary": rng.choice(_SUMMARIES),
        "due_date": _date(rng),
    },
    "transfer_funds": lambda rng: {
        "from_account": _record_id(rng, "ACC"),
        "to_account": _record_id(rng, "ACC"),
        "amount": _amount(rng),
        "currency": rng.choice(["USD", "EUR", "GBP"]),
        "execute_on": _date(rng),
    },
}
