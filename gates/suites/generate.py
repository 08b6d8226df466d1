"""Generate the example tool-argument suite: 300 synthetic cases, the same on every run.

    python gates/suites/generate.py            # writes gates/suites/tool-args-300.jsonl
    python gates/suites/generate.py --check    # exit 1 if the committed file is stale

Four kinds of agent task, 75 cases each: payouts, refunds, bookings and record lookups.
Every case offers all four tools, so calling the wrong one is possible. The context states
amounts the way people write them ("$1,200.00", "1.250,00 EUR" is avoided as ambiguous),
dates in ISO form or in words ("14 March 2025"), and record ids; the expected call has the
amount as a JSON number, the date as YYYY-MM-DD (``format: date``) and the id verbatim.
Some contexts carry a second, distracting amount or date. Standard library only.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

SEED = 20251202
PER_KIND = 75
OUTPUT = Path(__file__).with_name("tool-args-300.jsonl")

CURRENCIES = {"USD": "$", "EUR": "€", "GBP": "£"}
SYSTEM = (
    "You are the back-office agent of Northwind Outfitters. Call exactly one tool. Copy "
    "amounts, dates and record ids exactly from the conversation: amounts as numbers, dates "
    "as YYYY-MM-DD."
)


def _object(properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def _id(prefix: str, digits: int) -> dict[str, Any]:
    return {"type": "string", "pattern": f"^{prefix}-[0-9]{{{digits}}}$"}


MONEY = {"type": "number", "minimum": 0}
CURRENCY = {"type": "string", "enum": sorted(CURRENCIES)}
DATE = {"type": "string", "format": "date"}

TOOLS = [
    {
        "name": "issue_payout",
        "description": "Pay a partner or seller.",
        "parameters": _object(
            {
                "payee_id": _id("PAY", 6),
                "amount": MONEY,
                "currency": CURRENCY,
                "payout_date": DATE,
                "memo": {"type": "string"},
            }
        ),
    },
    {
        "name": "issue_refund",
        "description": "Refund an order in full or in part.",
        "parameters": _object(
            {
                "order_id": _id("ORD", 6),
                "amount": MONEY,
                "currency": CURRENCY,
                "reason": {
                    "type": "string",
                    "enum": ["damaged", "duplicate_charge", "late_delivery", "wrong_item"],
                },
            }
        ),
    },
    {
        "name": "create_booking",
        "description": "Book a room for a customer.",
        "parameters": _object(
            {
                "customer_id": _id("CUS", 5),
                "room_type": {"type": "string", "enum": ["single", "double", "suite"]},
                "check_in": DATE,
                "check_out": DATE,
                "guests": {"type": "integer", "minimum": 1, "maximum": 6},
                "contact": _object({"name": {"type": "string"}, "phone": {"type": "string"}}),
            }
        ),
    },
    {
        "name": "lookup_record",
        "description": "Fetch fields of one record.",
        "parameters": _object(
            {
                "record_type": {"type": "string", "enum": ["customer", "invoice", "order"]},
                "record_id": {"type": "string", "pattern": "^(CUS|INV|ORD)-[0-9]{5,6}$"},
                "fields": {
                    "type": "array",
                    "items": {
                        "type": "string",
                        "enum": ["amount", "due_date", "owner", "status", "updated_at"],
                    },
                    "uniqueItems": True,
                    "minItems": 1,
                },
            }
        ),
    },
]

NAMES = ["Ada Okafor", "Bruno Silva", "Chen Wei", "Dana Kowalski", "Emil Larsen", "Farah Haddad"]
MEMOS = ["March commission", "Q2 marketplace sales", "Referral bonus", "Chargeback reversal"]
REASONS = {
    "damaged": "the parcel arrived crushed and the lamp inside is broken",
    "duplicate_charge": "the card was charged twice for the same order",
    "late_delivery": "the delivery came nine days after the promised date",
    "wrong_item": "a blue jacket arrived instead of the green one ordered",
}


def amount(rng: random.Random) -> float | int:
    """A payout or refund amount: a round figure half the time, cents otherwise."""
    if rng.random() < 0.4:
        return rng.randrange(2, 60) * 50
    return round(rng.uniform(5, 9000), 2)


def spoken_amount(value: float | int, currency: str, rng: random.Random) -> str:
    """How a person writes the amount: "$1,200.00", "£75", "1,200.50 EUR"."""
    text = f"{value:,.2f}" if isinstance(value, float) or rng.random() < 0.5 else f"{value:,}"
    return f"{CURRENCIES[currency]}{text}" if rng.random() < 0.7 else f"{text} {currency}"


def date(rng: random.Random, start: dt.date = dt.date(2025, 1, 1)) -> dt.date:
    """A day in the year after ``start``."""
    return start + dt.timedelta(days=rng.randrange(0, 365))


def spoken_date(day: dt.date, rng: random.Random) -> str:
    """The date as ISO or in words."""
    return day.isoformat() if rng.random() < 0.5 else f"{day.day} {day:%B %Y}"


def record_id(rng: random.Random, prefix: str, digits: int) -> str:
    """An id such as ORD-482913."""
    return f"{prefix}-{rng.randrange(10 ** (digits - 1), 10**digits)}"


def payout(rng: random.Random) -> tuple[str, dict[str, Any]]:
    """A payout request and its call."""
    value, currency = amount(rng), rng.choice(sorted(CURRENCIES))
    day, memo, payee = date(rng), rng.choice(MEMOS), record_id(rng, "PAY", 6)
    earlier = spoken_amount(amount(rng), currency, rng)
    now = spoken_amount(value, currency, rng)
    text = (
        f"Last month we paid {earlier}. This time, please send {now}"
        f' to payee {payee} on {spoken_date(day, rng)}, memo "{memo}".'
    )
    return text, {
        "payee_id": payee,
        "amount": value,
        "currency": currency,
        "payout_date": day.isoformat(),
        "memo": memo,
    }


def refund(rng: random.Random) -> tuple[str, dict[str, Any]]:
    """A customer email asking for a (partial) refund."""
    value, currency = amount(rng), rng.choice(sorted(CURRENCIES))
    order, reason = record_id(rng, "ORD", 6), rng.choice(sorted(REASONS))
    total = round(float(value) * rng.uniform(1.1, 3.0), 2)
    text = (
        f'Customer email: "Order {order} cost {spoken_amount(total, currency, rng)} in total; '
        f'{REASONS[reason]}." Policy allows a refund of {spoken_amount(value, currency, rng)}. '
        "Issue it."
    )
    return text, {"order_id": order, "amount": value, "currency": currency, "reason": reason}


def booking(rng: random.Random) -> tuple[str, dict[str, Any]]:
    """A booking with two dates, a guest count and a contact."""
    customer, room = record_id(rng, "CUS", 5), rng.choice(["single", "double", "suite"])
    check_in = date(rng)
    check_out = check_in + dt.timedelta(days=rng.randrange(1, 10))
    guests = rng.randrange(1, 5)
    name, phone = rng.choice(NAMES), f"+44 20 7946 {rng.randrange(1000, 10000)}"
    text = (
        f"Customer {customer} wants a {room} room for {guests} guest(s), arriving "
        f"{spoken_date(check_in, rng)} and leaving {spoken_date(check_out, rng)}. Contact: "
        f"{name}, {phone}."
    )
    return text, {
        "customer_id": customer,
        "room_type": room,
        "check_in": check_in.isoformat(),
        "check_out": check_out.isoformat(),
        "guests": guests,
        "contact": {"name": name, "phone": phone},
    }


def lookup(rng: random.Random) -> tuple[str, dict[str, Any]]:
    """A record lookup naming the fields wanted."""
    kind, prefix = rng.choice([("customer", "CUS"), ("invoice", "INV"), ("order", "ORD")])
    record = record_id(rng, prefix, rng.choice([5, 6]))
    wanted = rng.sample(
        ["amount", "due_date", "owner", "status", "updated_at"], rng.randrange(1, 4)
    )
    other = record_id(rng, prefix, 6)
    text = (
        f"Not {other} (that one is closed) -- look up {kind} {record} and tell me its "
        f"{', '.join(field.replace('_', ' ') for field in wanted)}."
    )
    return text, {"record_type": kind, "record_id": record, "fields": wanted}


KINDS: dict[str, tuple[str, Callable[[random.Random], tuple[str, dict[str, Any]]]]] = {
    "payouts": ("issue_payout", payout),
    "refunds": ("issue_refund", refund),
    "bookings": ("create_booking", booking),
    "lookups": ("lookup_record", lookup),
}


def generate(seed: int = SEED, per_kind: int = PER_KIND) -> list[dict[str, Any]]:
    """The cases, interleaved by kind, each with its id, messages, tools and expected call."""
    rng = random.Random(seed)
    tools = [{"type": "function", "function": tool} for tool in TOOLS]
    cases = []
    for index in range(per_kind):
        for kind, (tool, make) in KINDS.items():
            text, arguments = make(rng)
            cases.append(
                {
                    "id": f"{kind}-{index + 1:04d}",
                    "messages": [
                        {"role": "system", "content": SYSTEM},
                        {"role": "user", "content": text},
                    ],
                    "tools": tools,
                    "expected": {"name": tool, "arguments": arguments},
                    "tags": [kind],
                }
            )
    return cases


def render(cases: list[dict[str, Any]]) -> str:
    """One JSON object per line."""
    return "".join(json.dumps(case, ensure_ascii=False) + "\n" for case in cases)


def main() -> None:
    """Write the suite, or with --check compare it with the file on disk."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if the file is stale")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()
    text = render(generate())
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
        if current != text:
            sys.exit(f"{args.output} is stale: run python {Path(__file__).name}")
        return
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {len(text.splitlines())} cases to {args.output}")


if __name__ == "__main__":
    main()
