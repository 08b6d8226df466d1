"""The ``litellm`` driver: one model group's canary share on a LiteLLM proxy, without its DB.

LiteLLM's runtime model management (``/model/new``, ``/model/{id}/update``) works only when
the proxy runs with its Prisma database, which small deployments often do not. The split is
therefore done by rolloutd's own plugin inside the proxy
(:mod:`rolloutd.routers.litellm_plugin`, loaded by the proxy's config): the driver writes the
group's weights atomically to a file in the plugin's directory, and reads back what the plugin
applies from its ``GET /rolloutd/weights`` on the proxy. The read-back is the proxy's word,
not the file's: a weight edited by hand in the file shows there as drift, and a proxy that
does not answer is a temporary error (the write is not even attempted: nothing is lost, the
change is made when the proxy is back).

The proxy's master key (read from the environment variable the plan names) authenticates
the read-back; it is sent in a header and never written into a message.
"""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime, timedelta
from http.client import HTTPConnection, HTTPException, HTTPSConnection
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from rolloutd.atomicfile import replace_file
from rolloutd.errors import PermanentError, TemporaryError
from rolloutd.redact import hide_fragments
from rolloutd.routers import deadline
from rolloutd.routers.base import RouterState, check_weight
from rolloutd.routers.litellm_split import DEFAULT_HEADER, GroupWeights

REQUEST_TIMEOUT = 3.0
APPLY_TIMEOUT = 5.0


class LiteLLMRouter:
    """Splits one LiteLLM model group's sessions between its stable and canary deployments."""

    # Probe, write, then wait for the plugin to report the new weights.
    write_timeout = timedelta(seconds=APPLY_TIMEOUT)

    def __init__(
        self,
        weights_path: str | Path,
        *,
        model_group: str,
        state_url: str,
        session_header: str = DEFAULT_HEADER,
        master_key: str | None = None,
        apply_timeout: float = APPLY_TIMEOUT,
    ) -> None:
        self.weights_path = Path(weights_path)
        self.model_group = model_group
        self.state_url = state_url
        self.session_header = session_header
        self.apply_timeout = apply_timeout
        self._master_key = master_key or None

    def __repr__(self) -> str:
        return f"LiteLLMRouter({self.model_group!r} via {self.state_url})"

    def set_weight(self, weight: int, *, mirror: bool = False) -> None:
        """Write the group's weights and wait until the plugin applies them.

        :raises TemporaryError: the proxy did not answer (nothing written), or did not apply
            the file within the deadline.
        :raises PermanentError: the proxy refused the master key, or the file cannot be
            written (permission).
        """
        document = GroupWeights(
            self.model_group,
            check_weight(weight),
            mirror,
            self.session_header,
            deadline.epoch(),
            datetime.now(UTC).isoformat(),
        )
        # The proxy must be there to take it: a change written while it is down would
        # apply at some later moment no lease covers.
        self._group()
        try:
            replace_file(
                self.weights_path,
                document.to_json().encode(),
                before_replace=lambda: deadline.check(f"replacing {self.weights_path}"),
            )
        except PermissionError:
            raise PermanentError(
                f"cannot write LiteLLM weights file {self.weights_path}: permission denied"
            ) from None
        except OSError as exc:
            raise TemporaryError(
                f"cannot write LiteLLM weights file {self.weights_path}: {exc.strerror}"
            ) from None
        self._await_applied(RouterState(weight, mirror))

    def read_weight(self) -> RouterState:
        """What the plugin in the proxy applies to the group now.

        :raises TemporaryError: the proxy is down, or answered garbage.
        :raises PermanentError: the proxy refused the master key, or has no such group.
        """
        group = self._group()
        weight, mirror = group.get("canary_weight"), group.get("mirror")
        if isinstance(weight, bool) or not isinstance(weight, int) or not 0 <= weight <= 100:
            raise TemporaryError(
                f"LiteLLM proxy {self.state_url}: group {self.model_group!r} reports "
                f"canary_weight {weight!r}, not 0-100"
            )
        if not isinstance(mirror, bool):
            raise TemporaryError(
                f"LiteLLM proxy {self.state_url}: group {self.model_group!r} reports "
                f"mirror {mirror!r}, not true or false"
            )
        return RouterState(weight, mirror)

    def check(self) -> None:
        """Refuse unless the proxy runs the plugin on this file's directory and the group has
        a stable and a canary deployment.

        :raises PermanentError: with what to fix in the proxy's config or the plan.
        :raises TemporaryError: the proxy does not answer.
        """
        directory = self.weights_path.parent
        if not directory.is_dir() or not os.access(directory, os.W_OK):
            raise PermanentError(f"LiteLLM weights directory {directory} is not writable")
        state = self._state()
        watched = state.get("directory")
        if not isinstance(watched, str) or os.path.realpath(watched) != os.path.realpath(directory):
            raise PermanentError(
                f"the rolloutd plugin in the LiteLLM proxy reads {watched!r}, not {directory}: "
                "set ROLLOUTD_LITELLM_WEIGHTS_DIR for the proxy, or router.weights_path"
            )
        deployments = self._group(state).get("deployments")
        if not isinstance(deployments, dict):
            raise PermanentError(f"LiteLLM proxy {self.state_url} reports no deployments")
        for pool in ("stable", "canary"):
            if not deployments.get(pool):
                raise PermanentError(
                    f"LiteLLM model group {self.model_group!r} has no {pool} deployment: tag one "
                    f"with `model_info: {{rolloutd_pool: {pool}}}` in the proxy's config"
                )

    # -- talking to the plugin ----------------------------------------------------------

    def _await_applied(self, wanted: RouterState) -> None:
        """Poll the read-back until the plugin applies ``wanted`` (it re-reads the file on
        the next look, so this is usually the first answer)."""
        give_up = time.monotonic() + deadline.remaining(self.apply_timeout)
        seen: RouterState | None = None
        while True:
            seen = self.read_weight()
            if seen == wanted:
                return
            if time.monotonic() >= give_up:
                break
            time.sleep(0.02)
        raise TemporaryError(
            f"the LiteLLM proxy applies {seen.weight}% (mirror {seen.mirror}) to "
            f"{self.model_group!r}, not the {wanted.weight}% written to {self.weights_path}"
        )

    def _group(self, state: dict[str, Any] | None = None) -> dict[str, Any]:
        state = self._state() if state is None else state
        groups = state.get("groups")
        group = groups.get(self.model_group) if isinstance(groups, dict) else None
        if not isinstance(group, dict):
            known = ", ".join(sorted(groups)) if isinstance(groups, dict) else "none"
            raise PermanentError(
                f"LiteLLM proxy {self.state_url} has no model group {self.model_group!r} "
                f"(it has: {known or 'none'})"
            )
        return group

    def _state(self) -> dict[str, Any]:
        """The plugin's report, parsed."""
        url = urlsplit(self.state_url)
        kind = HTTPSConnection if url.scheme == "https" else HTTPConnection
        timeout = max(0.1, deadline.remaining(REQUEST_TIMEOUT))
        conn = kind(url.netloc, timeout=timeout)
        headers = {"Connection": "close"}
        if self._master_key:
            headers["Authorization"] = f"Bearer {self._master_key}"
        try:
            conn.request("GET", url.path or "/", headers=headers)
            answer = conn.getresponse()
            body = answer.read(1_000_000).decode(errors="replace")
        except (OSError, HTTPException) as exc:
            raise TemporaryError(f"LiteLLM proxy {self.state_url} does not answer: {exc}") from None
        finally:
            conn.close()
        if answer.status in (401, 403):
            raise PermanentError(
                f"LiteLLM proxy {self.state_url} refused rolloutd's master key "
                f"(HTTP {answer.status}): check the variable router.master_key_env names"
            )
        if answer.status == 404:
            raise PermanentError(
                f"LiteLLM proxy {self.state_url}: not found; is the rolloutd plugin in the "
                "proxy config's litellm_settings.callbacks (see config/litellm/)?"
            )
        if answer.status != 200:
            raise TemporaryError(
                f"LiteLLM proxy {self.state_url} answered HTTP {answer.status}: {self._quote(body)}"
            )
        try:
            state = json.loads(body)
        except ValueError:
            state = None
        if not isinstance(state, dict):
            raise TemporaryError(
                f"LiteLLM proxy {self.state_url} answered garbage: {self._quote(body)}"
            )
        return state

    def _quote(self, body: str) -> str:
        """A short piece of an answer, safe to put in a message (the key never is)."""
        text = body.strip()[:200]
        return hide_fragments(text, self._master_key) if self._master_key else text
