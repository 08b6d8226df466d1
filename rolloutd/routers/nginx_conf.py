"""The include file the NGINX driver owns: rendered whole, and parsed back strictly.

NGINX open source has no runtime API for weights, so the split lives in a file included in
the ``http`` block. ``split_clients`` hashes the session header (MurmurHash2) onto 0-100%
and gives the canary the first P%: raising P only extends the canary's range, so a session
on the canary stays there and no session moves the other way. A request without the header
is split on ``$request_id`` through a ``map`` (per request: nothing to keep it sticky to).
Mirroring is a variable that the operator's mirror location tests (see ``config/nginx``).

Reading back parses the directives themselves, not a comment, so a hand edit shows up.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction


@dataclass(frozen=True)
class Split:
    """What the include says: the canary's share of sessions, and whether it gets copies."""

    weight: int
    mirror: bool

    def state(self) -> str:
        """The one-line summary the include exposes as ``$<variable>_state``."""
        return f"weight={self.weight} mirror={'on' if self.mirror else 'off'}"


@dataclass(frozen=True)
class Names:
    """The names an include is rendered with: variable, session header, upstream blocks."""

    variable: str
    header: str
    stable: str
    canary: str

    @property
    def header_variable(self) -> str:
        """NGINX's variable for the header: ``X-Session-Id`` → ``http_x_session_id``."""
        return "http_" + self.header.lower().replace("-", "_")


def render(names: Names, split: Split) -> str:
    """The whole include for ``split``."""
    var, header = names.variable, names.header_variable
    if split.weight == 0:
        entries = f"    *       {names.stable};\n"
    elif split.weight == 100:
        entries = f"    *       {names.canary};\n"
    else:
        entries = f"    {split.weight}%{' ' * (7 - len(str(split.weight)))}{names.canary};\n"
        entries += f"    *       {names.stable};\n"
    return (
        "# Written by rolloutd: the canary's share of sessions. Do not edit: every step\n"
        "# rewrites this file, tests it with `nginx -t` and reloads nginx.\n"
        f"# Sessions are split on the {names.header} header; a request without one is split\n"
        "# on $request_id (per request: it has nothing to stay on).\n"
        f"map ${header} ${var}_key {{\n"
        '    ""      $request_id;\n'
        f"    default ${header};\n"
        "}\n\n"
        f'split_clients "${{{var}_key}}" ${var} {{\n'
        f"{entries}"
        "}\n\n"
        "# 1 while the canary gets a copy of every request (a shadow step), else 0.\n"
        f'map "" ${var}_mirror {{\n'
        f"    default {int(split.mirror)};\n"
        "}\n\n"
        "# What this file says, for a location that answers it (router.verify_url).\n"
        f'map "" ${var}_state {{\n'
        f'    default "{split.state()}";\n'
        "}\n"
    )


def parse(text: str, names: Names) -> Split:
    """Read the split back from an include's directives.

    :raises ValueError: with what does not fit (a hand edit, another header, a partial file).
    """
    var = re.escape(names.variable)
    body = "\n".join(line.split("#", 1)[0] for line in text.splitlines())
    key = re.search(
        rf'map\s+\$(\w+)\s+\${var}_key\s*\{{\s*""\s+\$request_id\s*;\s*default\s+\$(\w+)\s*;\s*\}}',
        body,
    )
    if key is None or key[1] != key[2]:
        raise ValueError(f"no `map ... ${names.variable}_key` block keyed on one header")
    if key[1] != names.header_variable:
        raise ValueError(f"it splits on ${key[1]}, not on the {names.header} header")
    block = re.search(rf'split_clients\s+"\$\{{{var}_key\}}"\s+\${var}\s*\{{([^}}]*)\}}', body)
    if block is None:
        raise ValueError(f"no `split_clients ... ${names.variable}` block")
    mirror = re.search(rf'map\s+""\s+\${var}_mirror\s*\{{\s*default\s+"?([01])"?\s*;\s*\}}', body)
    if mirror is None:
        raise ValueError(f'no `map "" ${names.variable}_mirror` block set to 0 or 1')
    return Split(_canary_share(block[1], names), mirror[1] == "1")


def _canary_share(entries: str, names: Names) -> int:
    canary = Fraction(0)
    assigned = Fraction(0)
    rest: str | None = None
    for entry in filter(None, (e.strip() for e in entries.split(";"))):
        match = re.fullmatch(r"(\d+(?:\.\d+)?)%\s+(\S+)|\*\s+(\S+)", entry)
        if match is None or rest is not None:
            raise ValueError(f"unexpected split_clients entry {entry!r}")
        upstream = match[2] or match[3]
        if upstream not in (names.stable, names.canary):
            raise ValueError(f"split_clients names upstream {upstream!r}, not one of the pools")
        if match[3]:
            rest = upstream
            continue
        share = Fraction(match[1])
        assigned += share
        canary += share if upstream == names.canary else 0
    if (rest is None and assigned != 100) or assigned > 100:
        raise ValueError(f"split_clients shares add up to {float(assigned):g}%, not 100%")
    if rest == names.canary:
        canary += 100 - assigned
    if canary.denominator != 1:
        raise ValueError(f"the canary's share {float(canary):g}% is not a whole percent")
    return int(canary)


def parse_state(text: str) -> Split:
    """Read the ``weight=N mirror=on|off`` line a verify location answers.

    :raises ValueError: when it is anything else.
    """
    match = re.fullmatch(r"weight=(\d{1,3}) mirror=(on|off)\s*", text)
    if match is None or int(match[1]) > 100:
        raise ValueError(f"expected 'weight=N mirror=on|off', got {text[:80]!r}")
    return Split(int(match[1]), match[2] == "on")
