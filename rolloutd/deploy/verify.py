"""After a deploy: is the replica healthy, and does it run exactly the pinned set?

Health is the engine's own readiness endpoint, polled until it answers 200 or the deadline
passes: vLLM's ``GET /health`` (503 while the engine is dead) and Triton's ``GET
/v2/health/ready`` (400 while a model is loading or failed). Digests are compared either
with what the replica reports (Triton echoes the loaded model config, including the set's
digest and engine parameters) or by hashing the files on the path the replica serves from,
when the ops host can read it (``files_path``, or the ``root`` vLLM reports).
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any, Literal

import httpx

from rolloutd.core.plan import TEMPLATE_FIELDS, Replica
from rolloutd.deploy.artefacts import PinnedSet, verify_directory
from rolloutd.deploy.base import Clock, Sleep, Stopwatch

Flavor = Literal["vllm", "triton"]
HEALTH_PATHS: dict[Flavor, str] = {"vllm": "/health", "triton": "/v2/health/ready"}
REQUEST_TIMEOUT = 10.0


def flavor_of(engine: str, choice: str = "auto") -> Flavor:
    """The health endpoint family: chosen explicitly, or by the set's engine."""
    if choice in ("vllm", "triton"):
        return "vllm" if choice == "vllm" else "triton"
    return "triton" if engine == "trtllm" else "vllm"


def wait_until_ok(
    client: httpx.Client,
    urls: list[str],
    watch: Stopwatch,
    *,
    interval: float,
    sleep: Sleep = time.sleep,
) -> tuple[bool, str]:
    """Poll ``GET`` of every URL until all answer 200 or ``watch`` runs out.

    :returns: (True, "") or (False, what the last poll saw).
    """
    last = "not polled"
    while True:
        last = _first_not_ok(client, urls, watch)
        if not last:
            return True, ""
        if watch.remaining <= 0:
            return False, last
        sleep(min(interval, watch.remaining))


class Poller:
    """What an engine executor polls replicas with: an HTTP client, the plan's poll interval,
    and a clock and sleep that tests inject."""

    def __init__(
        self, interval: timedelta, *, client: httpx.Client | None, clock: Clock, sleep: Sleep
    ) -> None:
        self.client = client or httpx.Client()
        self.interval = interval.total_seconds()
        self.clock = clock
        self.sleep = sleep

    def poll(self, urls: list[str], watch: Stopwatch) -> tuple[bool, str]:
        """:func:`wait_until_ok` at this executor's interval."""
        return wait_until_ok(self.client, urls, watch, interval=self.interval, sleep=self.sleep)


def _first_not_ok(client: httpx.Client, urls: list[str], watch: Stopwatch) -> str:
    for url in urls:
        try:
            response = client.get(url, timeout=_request_timeout(watch))
        except httpx.HTTPError as exc:
            return f"GET {url}: {type(exc).__name__}: {exc}"
        if response.status_code != 200:
            return f"GET {url} answered {response.status_code}"
    return ""


def _request_timeout(watch: Stopwatch) -> float:
    return max(0.5, min(REQUEST_TIMEOUT, watch.remaining))


def fill(template: str, replica: Replica, artefacts: PinnedSet, manifest: str = "") -> str:
    """Fill an argv or path template for one replica and set (fields: ``TEMPLATE_FIELDS``)."""
    values = {
        "replica": replica.name,
        "url": replica.url,
        "set": artefacts.name,
        "digest": artefacts.digest,
        "root": artefacts.root,
        "engine": artefacts.engine,
        "manifest": manifest,
    }
    assert set(values) == TEMPLATE_FIELDS
    return template.format_map(values)


def check_files(artefacts: PinnedSet, path: str) -> tuple[bool, str, dict[str, Any]]:
    """Hash the files at ``path`` and compare them with the set.

    :returns: (matches, reason, detail).
    """
    if not os.access(path, os.R_OK | os.X_OK):
        return False, f"cannot read {path} from this host to check digests", {"files_path": path}
    mismatches = verify_directory(artefacts, path)
    detail = {"files_path": path, "mismatches": [str(m) for m in mismatches[:20]]}
    if mismatches:
        more = f" and {len(mismatches) - 1} more" if len(mismatches) > 1 else ""
        return False, f"files at {path} differ from {artefacts.name}: {mismatches[0]}{more}", detail
    return True, "", detail


def reported_root(client: httpx.Client, base_url: str, watch: Stopwatch) -> str | None:
    """The model path a vLLM server reports as ``root`` in ``/v1/models``, if any."""
    try:
        response = client.get(f"{base_url}/v1/models", timeout=_request_timeout(watch))
        data = response.json()["data"][0]
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
        return None
    root = data.get("root") if isinstance(data, dict) else None
    return root if isinstance(root, str) and root else None


def parameter_value(parameters: object, name: str) -> str | None:
    """A Triton model-config parameter's ``string_value``."""
    if not isinstance(parameters, dict):
        return None
    entry = parameters.get(name)
    value = entry.get("string_value") if isinstance(entry, dict) else entry
    return None if value is None else str(value)


def as_parameter(value: object) -> str:
    """An engine-config value as Triton's ``string_value`` (booleans lower-case)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
