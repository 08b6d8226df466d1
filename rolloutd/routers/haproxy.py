"""The HAProxy driver: a sticky split of sessions by weight, over the runtime API.

The backend balances on the session header with ``hash-type consistent``: every server owns
``16 * weight`` points on a hash ring and a session goes to the first point after the hash of
its header. HAProxy places a server's points in a fixed order, so raising a weight only adds
points and lowering one only removes them. If every canary server's weight only rises and
every stable server's weight only falls as the percentage rises, a session on the canary
keeps its point and no stable point can be inserted in front of it: raising the canary from
5% to 25% moves stable sessions to the canary and never the reverse.

:func:`pool_weights` keeps that true for every pair of percentages and every pool size, and
keeps the pool shares exact: with ``k = 256 * min(pool sizes) // 100``, the canary pool's total
is ``P * k`` and the stable pool's is ``(100 - P) * k``, each spread evenly over the pool's
servers (they differ by at most 1). 0% gives every canary server weight 0, which takes it off
the ring; 100% does the same to stable. The share reads back exactly from the weights.

A request without the header is balanced round robin by HAProxy (by weight, not sticky); the
example configuration in ``config/haproxy`` shows how to give such requests an id instead.
HAProxy open source cannot mirror requests, so a shadow step is refused, not faked.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from datetime import timedelta
from fractions import Fraction
from pathlib import Path

from rolloutd.atomicfile import replace_file
from rolloutd.errors import PermanentError, TemporaryError
from rolloutd.routers.base import RouterState, check_weight
from rolloutd.routers.haproxy_api import TIMEOUT, RuntimeAPI, ServerState
from rolloutd.routers.haproxy_config import loads_state_file, read_config, sticky_split_problems

MAX_WEIGHT = 256


def pool_weights(percent: int, *, stable: int, canary: int) -> tuple[list[int], list[int]]:
    """Per-server weights (canary, stable) giving the canary exactly ``percent`` of the ring.

    Each server's weight is monotonic in ``percent`` (see the module docstring), at most 256.
    """
    check_weight(percent)
    if stable < 1 or canary < 1:
        raise ValueError("each pool needs at least one server")
    scale = MAX_WEIGHT * min(stable, canary) // 100
    return _spread(percent * scale, canary), _spread((100 - percent) * scale, stable)


def _spread(total: int, servers: int) -> list[int]:
    # The first servers take the remainder; every server's share grows with the total.
    low, extra = divmod(total, servers)
    return [low + 1 if i < extra else low for i in range(servers)]


class HAProxyRouter:
    """Splits sessions between the stable and canary servers of one HAProxy backend."""

    def __init__(
        self,
        socket: str,
        *,
        backend: str,
        stable: Sequence[str],
        canary: Sequence[str],
        config_path: str | Path | None = None,
        state_file: str | Path | None = None,
        session_header: str = "X-Session-Id",
        timeout: float = TIMEOUT,
    ) -> None:
        if not stable or not canary or set(stable) & set(canary):
            raise PermanentError("HAProxy pools need at least one server each, none in both")
        self.api = RuntimeAPI(socket, timeout=timeout)
        # A write reads the weights, sets them, and may put refused ones back.
        self.write_timeout = timedelta(seconds=3 * timeout)
        self.backend = backend
        self.stable = list(stable)
        self.canary = list(canary)
        self.config_path = Path(config_path) if config_path else None
        self.state_file = Path(state_file) if state_file else None
        self.session_header = session_header
        self._lock = threading.Lock()

    def weights_for(self, percent: int) -> dict[str, int]:
        """The weight of every server of the plan at ``percent``."""
        canary, stable = pool_weights(percent, stable=len(self.stable), canary=len(self.canary))
        return dict(zip(self.canary + self.stable, canary + stable, strict=True))

    def set_weight(self, weight: int, *, mirror: bool = False) -> None:
        """Set every server's weight in one runtime-API pass, then save the server state.

        :raises PermanentError: mirroring was asked for, a server is missing, or HAProxy
            refused a weight (the weights it accepted in that pass are put back).
        :raises TemporaryError: HAProxy unreachable or garbled; read back to see what applies.
        """
        weight = check_weight(weight)
        if mirror:
            raise PermanentError(
                "HAProxy open source cannot mirror requests to the canary: use the nginx "
                "driver for a plan with a shadow step, or drop the shadow step"
            )
        with self._lock:
            current = self._plan_servers(self.api.servers_state(self.backend)[0])
            target = self.weights_for(weight)
            # Raise weights before lowering any: the backend never has zero weight in total.
            changes = sorted(
                ((name, w) for name, w in target.items() if current[name].weight != w),
                key=lambda change: change[1] < current[change[0]].weight,
            )
            refusals = self.api.set_weights(self.backend, changes)
            if refusals:
                self._put_back(changes, current, refusals)
            self._save_state()

    def read_weight(self) -> RouterState:
        """The canary's share of the live weights (maintenance and drain count as 0).

        :raises TemporaryError: unreachable, garbled, or weights that give no whole percent
            (a change cut short, or one made by hand).
        :raises PermanentError: a server of the plan is missing from the backend.
        """
        servers, _ = self.api.servers_state(self.backend)
        plan = self._plan_servers(servers)
        canary = sum(plan[name].effective_weight for name in self.canary)
        stable = sum(plan[name].effective_weight for name in self.stable)
        others = sum(s.effective_weight for s in servers if s.name not in plan)
        where = f"HAProxy backend {self.backend} at {self.api.label}"
        if canary + stable + others == 0:
            raise TemporaryError(f"{where}: every server has weight 0 or is out of service")
        share = Fraction(100 * canary, canary + stable + others)
        if share.denominator != 1:
            raise TemporaryError(
                f"{where}: weights give the canary {float(share):.2f}% of sessions, not a "
                f"whole percent (canary {canary}, stable {stable}, others {others})"
            )
        return RouterState(int(share), False)

    def check(self) -> None:
        """Refuse to shift traffic unless the split is sticky, complete and writable.

        :raises PermanentError: with the configuration line to add or the access to grant.
        :raises TemporaryError: HAProxy could not be reached to confirm it.
        """
        self._check_config()
        algorithm = self.api.algorithm(self.backend)
        if algorithm not in ("hdr", "hash"):
            raise PermanentError(
                f"the running HAProxy balances backend {self.backend} with {algorithm!r}, "
                f"not on the {self.session_header} header as {self.config_path} says: "
                "reload HAProxy so that it runs this configuration"
            )
        servers, _ = self.api.servers_state(self.backend)
        current = self._plan_servers(servers)
        strangers = [s.name for s in servers if s.name not in current and s.effective_weight]
        if strangers:
            raise PermanentError(
                f"HAProxy backend {self.backend} sends sessions to servers in neither pool: "
                f"{', '.join(strangers)}; list them under router.servers or set their weight to 0"
            )
        # A write that changes nothing proves the socket accepts changes (level admin).
        probe = self.canary[0]
        refusals = self.api.set_weights(self.backend, [(probe, current[probe].weight)])
        if refusals:
            raise PermanentError(
                f"HAProxy at {self.api.label} refused `set weight` ({refusals[0]}): "
                "the stats socket needs `level admin`"
            )

    def _check_config(self) -> None:
        if self.config_path is None:
            raise PermanentError(
                f"router.config_path is not set: rolloutd cannot verify that HAProxy backend "
                f"{self.backend} uses `balance hdr({self.session_header})` with `hash-type "
                "consistent` (the runtime API does not show the hash type); set it to the "
                "configuration HAProxy runs with"
            )
        try:
            config = read_config(self.config_path)
        except OSError as exc:
            raise PermanentError(
                f"cannot read HAProxy configuration {self.config_path}: {exc.strerror or exc}"
            ) from None
        problems = sticky_split_problems(config, self.backend, self.session_header)
        if problems:
            raise PermanentError(
                f"HAProxy backend {self.backend} in {self.config_path} cannot split sessions "
                f"stickily: {'; '.join(problems)}"
            )
        if self.state_file is None:
            return
        if config.state_file() != self.state_file or not loads_state_file(config, self.backend):
            raise PermanentError(
                f"HAProxy does not restore weights from {self.state_file} after a reload: add "
                f"`server-state-file {self.state_file}` to the global section of "
                f"{self.config_path} and `load-server-state-from-file global` to backend "
                f"{self.backend} (or its defaults)"
            )
        if not os.access(self.state_file.parent, os.W_OK):
            raise PermanentError(
                f"cannot write HAProxy server-state file in {self.state_file.parent}"
            )

    def _plan_servers(self, servers: list[ServerState]) -> dict[str, ServerState]:
        by_name = {server.name: server for server in servers}
        missing = [name for name in self.canary + self.stable if name not in by_name]
        if missing:
            raise PermanentError(
                f"HAProxy backend {self.backend} at {self.api.label} has no server "
                f"{', '.join(missing)}: fix router.servers or the HAProxy configuration"
            )
        return {name: by_name[name] for name in self.canary + self.stable}

    def _put_back(
        self,
        changes: list[tuple[str, int]],
        before: dict[str, ServerState],
        refusals: list[str],
    ) -> None:
        """Undo the part of a change HAProxy accepted, then report what it refused."""
        refused = {refusal.split(":", 1)[0] for refusal in refusals}
        undo = [(name, before[name].weight) for name, _ in changes if name not in refused]
        message = f"HAProxy at {self.api.label} refused weights on backend {self.backend}: "
        message += "; ".join(refusals)
        if any("static LB algorithm" in refusal for refusal in refusals):
            message += " (add `hash-type consistent` to the backend)"
        elif any("Permission denied" in refusal for refusal in refusals):
            message += " (the stats socket needs `level admin`)"
        try:
            failed = self.api.set_weights(self.backend, undo)
        except TemporaryError as exc:
            raise TemporaryError(f"{message}; putting back the old weights failed: {exc}") from exc
        if failed:
            raise TemporaryError(f"{message}; putting back the old weights failed: {failed}")
        raise PermanentError(f"{message}; the previous weights were put back")

    def _save_state(self) -> None:
        """Write the live ``show servers state`` where HAProxy reads it after a reload."""
        if self.state_file is None:
            return
        _, dump = self.api.servers_state()
        try:
            replace_file(self.state_file, dump.encode("ascii"))
        except PermissionError:
            raise PermanentError(
                f"weights applied, but cannot write HAProxy server-state file "
                f"{self.state_file}: permission denied (a reload would revert them)"
            ) from None
        except OSError as exc:
            raise TemporaryError(
                f"weights applied, but cannot write HAProxy server-state file "
                f"{self.state_file}: {exc.strerror or exc}"
            ) from None
