"""What an haproxy.cfg says about one backend: enough to know whether a weighted split is sticky.

The runtime API reports a backend's algorithm (``hdr``) but not its ``hash-type``, and without
``hash-type consistent`` HAProxy keeps a static map in which weight changes are ignored (or
refused), so the driver has to read the configuration the running HAProxy was started from.
This is a reader for the few keywords that matter, with HAProxy's inheritance rules (a proxy
takes its settings from the last ``defaults`` section above it, or the one named with
``from``). Conditional blocks (``.if``) are not evaluated: their lines count as written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

# The keywords a sticky split depends on; every other line is skipped.
_PROXY_KEYWORDS = {"balance", "hash-type", "hash-balance-factor", "load-server-state-from-file"}
_GLOBAL_KEYWORDS = {"server-state-file", "server-state-base"}
_SECTIONS = {
    "global", "defaults", "frontend", "backend", "listen", "peers", "resolvers", "userlist",
    "mailers", "program", "http-errors", "ring", "cache", "log-forward", "fcgi-app",
}  # fmt: skip


@dataclass
class HAProxyConfig:
    """The settings of every proxy and of the global section, keyword → arguments."""

    proxies: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    global_settings: dict[str, list[str]] = field(default_factory=dict)

    def state_file(self) -> Path | None:
        """The ``server-state-file`` HAProxy loads at start, resolved against its base."""
        name = self.global_settings.get("server-state-file")
        if not name:
            return None
        base = self.global_settings.get("server-state-base")
        path = Path(name[0])
        return path if path.is_absolute() or not base else Path(base[0]) / path


def read_config(path: Path) -> HAProxyConfig:
    """Parse ``path`` (a file, or a directory whose ``*.cfg`` HAProxy loads in name order).

    :raises OSError: when it cannot be read.
    """
    files = sorted(path.glob("*.cfg")) if path.is_dir() else [path]
    config = HAProxyConfig()
    defaults: dict[str, list[str]] = {}
    named_defaults: dict[str, dict[str, list[str]]] = {}
    section: dict[str, list[str]] | None = None
    for file in files:
        for line in file.read_text(errors="replace").splitlines():
            words = _words(line)
            if not words or words[0].startswith("."):
                continue
            keyword = words[0]
            if keyword in _SECTIONS:
                section, defaults = _open_section(words, config, defaults, named_defaults)
            elif section is not None and keyword in _PROXY_KEYWORDS | _GLOBAL_KEYWORDS:
                section[keyword] = words[1:]
    return config


def _open_section(
    words: list[str],
    config: HAProxyConfig,
    defaults: dict[str, list[str]],
    named_defaults: dict[str, dict[str, list[str]]],
) -> tuple[dict[str, list[str]] | None, dict[str, list[str]]]:
    """Start a section; return where its settings go and the defaults now in force."""
    kind, args = words[0], words[1:]
    named = args[-1] if len(args) >= 2 and args[-2] == "from" else None
    if kind == "global":
        return config.global_settings, defaults
    if kind == "defaults":
        # A defaults section resets everything (or starts from the one it names) and is
        # then the one later proxies inherit from.
        fresh = dict(named_defaults.get(named, {})) if named else {}
        if args and args[0] != "from":
            named_defaults[args[0]] = fresh
        return fresh, fresh
    if kind in ("backend", "listen") and args:
        settings = dict(named_defaults.get(named, {}) if named else defaults)
        config.proxies[args[0]] = settings
        return settings, defaults
    return None, defaults


def _words(line: str) -> list[str]:
    """Split a line as HAProxy does: quotes and backslashes, '#' outside quotes ends it."""
    words: list[str] = []
    current: list[str] = []
    quote = ""
    escaped = False
    started = False
    for char in line:
        if escaped:
            current.append(char)
            escaped = False
        elif char == "\\":
            escaped = started = True
        elif quote:
            if char == quote:
                quote = ""
            else:
                current.append(char)
        elif char in "\"'":
            quote = char
            started = True
        elif char == "#":
            break
        elif char.isspace():
            if started:
                words.append("".join(current))
                current, started = [], False
        else:
            current.append(char)
            started = True
    if started:
        words.append("".join(current))
    return words


def sticky_split_problems(config: HAProxyConfig, backend: str, header: str) -> list[str]:
    """What keeps ``backend`` from splitting sessions stickily by ``header``, as fixes to make."""
    settings = config.proxies.get(backend)
    if settings is None:
        return [f"there is no `backend {backend}` (or `listen {backend}`) section"]
    problems = []
    balance = settings.get("balance", ["roundrobin"])
    if not _balances_on(balance, header):
        problems.append(
            f"it balances with `balance {' '.join(balance)}`: add `balance hdr({header})`"
        )
    hash_type = settings.get("hash-type", ["map-based"])
    if hash_type[:1] != ["consistent"]:
        problems.append(
            f"it hashes with `hash-type {' '.join(hash_type)}`: add `hash-type consistent` "
            "(with a static map HAProxy ignores weight changes, and a change would move "
            "sessions in both directions)"
        )
    factor = settings.get("hash-balance-factor", ["0"])
    if factor[:1] != ["0"]:
        problems.append(
            f"`hash-balance-factor {factor[0]}` sends a session elsewhere when its server is "
            "busy: remove it, sessions must stay on one pool"
        )
    return problems


def _balances_on(balance: list[str], header: str) -> bool:
    wanted = header.lower()
    words = [w.lower() for w in balance]
    hashed = {f"hdr({wanted})", f"req.hdr({wanted})"}
    return words == [f"hdr({wanted})"] or (
        len(words) == 2 and words[0] == "hash" and words[1] in hashed
    )


def loads_state_file(config: HAProxyConfig, backend: str) -> bool:
    """Whether ``backend`` restores runtime weights from the global server-state file."""
    setting = config.proxies.get(backend, {}).get("load-server-state-from-file", ["none"])
    return setting[:1] == ["global"]
