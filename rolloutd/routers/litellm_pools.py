"""What the LiteLLM plugin decides, without LiteLLM: the weights in force and each request's
deployments.

The plugin (:mod:`rolloutd.routers.litellm_plugin`) is a thin adapter from LiteLLM's router
hook to :meth:`SessionPools.pick`, so the tests and the bench can drive the very pick the
proxy makes for thousands of sessions without thousands of requests.

Weights come from JSON files in one directory, one per model group, written atomically by
the ``litellm`` driver. The directory is looked at again on every pick (a ``scandir`` of a
few files) and a file is re-read when it changed, so a change applies to the next request
with no reload. A file that cannot be read or parsed keeps its group on the weights it had
(or 0%) and is reported in :meth:`SessionPools.state`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rolloutd.routers.litellm_split import POOL_KEY, GroupWeights, Pool, pool_for

Deployment = dict[str, Any]


@dataclass
class Loaded:
    """The weights files as last read, and what is wrong with any of them."""

    signature: tuple[tuple[str, int, int, int], ...] | None = None
    by_path: dict[str, GroupWeights] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)

    def groups(self) -> dict[str, tuple[GroupWeights, str]]:
        """Per model group, its weights and the file they came from (the first by name)."""
        found: dict[str, tuple[GroupWeights, str]] = {}
        for path in sorted(self.by_path):
            weights = self.by_path[path]
            found.setdefault(weights.model_group, (weights, path))
        return found


class WeightsDirectory:
    """The directory of weights files, re-read when any file in it changes.

    ``on_change`` is told each group's weights whenever the files were read again.
    """

    def __init__(
        self,
        directory: str | Path,
        on_change: Callable[[str, GroupWeights, str], None] | None = None,
    ) -> None:
        self.directory = Path(directory)
        self._on_change = on_change
        self._loaded = Loaded()

    def current(self) -> Loaded:
        """The weights in force, after re-reading whatever changed since the last look."""
        try:
            entries = sorted(
                (e.path, s.st_mtime_ns, s.st_size, s.st_ino)
                for e in os.scandir(self.directory)
                if e.name.endswith(".json") and not e.name.startswith(".")
                for s in (e.stat(),)
            )
        except OSError as exc:
            # The directory went away: keep applying what was read, and say so.
            self._loaded.problems[str(self.directory)] = f"cannot list: {exc.strerror}"
            return self._loaded
        signature = tuple(entries)
        if signature == self._loaded.signature:
            return self._loaded
        loaded = Loaded(signature)
        for path, *_ in entries:
            try:
                loaded.by_path[path] = GroupWeights.from_json(Path(path).read_text())
            except OSError as exc:
                loaded.problems[path] = f"cannot read: {exc.strerror}"
            except ValueError as exc:
                loaded.problems[path] = str(exc)
            if path in loaded.problems and path in self._loaded.by_path:
                # Keep the group where it was rather than jump it to 0%.
                loaded.by_path[path] = self._loaded.by_path[path]
        claimed: dict[str, str] = {}
        for path in sorted(loaded.by_path):
            group = loaded.by_path[path].model_group
            if group in claimed:
                loaded.problems[path] = f"model group {group!r} is already set by {claimed[group]}"
            claimed.setdefault(group, path)
        self._loaded = loaded
        if self._on_change is not None:
            for group, (weights, path) in loaded.groups().items():
                self._on_change(group, weights, path)
        return loaded


def pool_of(deployment: Mapping[str, Any]) -> Pool:
    """The pool a deployment of the proxy's config is in (untagged: stable)."""
    info = deployment.get("model_info") or {}
    return "canary" if info.get(POOL_KEY) == "canary" else "stable"


def _metadata(request_kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for key in ("litellm_metadata", "metadata"):
        value = (request_kwargs or {}).get(key)
        if isinstance(value, Mapping):
            merged.update(value)
    return merged


def session_of(request_kwargs: Mapping[str, Any] | None, header: str) -> str | None:
    """The session id the client sent in ``header`` (any case), if it sent one: LiteLLM's
    proxy puts the request's headers in the request's metadata."""
    wanted = header.lower()
    sources = [_metadata(request_kwargs).get("headers")]
    server_request = (request_kwargs or {}).get("proxy_server_request")
    if isinstance(server_request, Mapping):
        sources.append(server_request.get("headers"))
    for headers in sources:
        if isinstance(headers, Mapping):
            for name, value in headers.items():
                if isinstance(name, str) and name.lower() == wanted and value:
                    return str(value)
    return None


class SessionPools:
    """Narrows a model group's deployments to the pool of the request's session."""

    def __init__(self, weights: WeightsDirectory) -> None:
        self.weights = weights

    def manages(self, group: str, deployments: list[Deployment]) -> bool:
        """Whether rolloutd splits ``group``: it has a weights file or a canary deployment."""
        if group in self.weights.current().groups():
            return True
        return any(pool_of(d) == "canary" for d in deployments)

    def pick(
        self, group: str, deployments: list[Deployment], request_kwargs: Mapping[str, Any] | None
    ) -> list[Deployment]:
        """The deployments of ``group`` this request may go to."""
        pools: dict[Pool, list[Deployment]] = {"stable": [], "canary": []}
        for deployment in deployments:
            pools[pool_of(deployment)].append(deployment)
        found = self.weights.current().groups().get(group)
        weights = found[0] if found else GroupWeights(group, 0)
        if _metadata(request_kwargs).get("is_silent_experiment"):
            # LiteLLM's background copy of a mirrored request: the canary's to answer.
            return pools["canary"]
        session = session_of(request_kwargs, weights.session_header)
        pool = pool_for(weights.canary_weight, group, session)
        other: Pool = "stable" if pool == "canary" else "canary"
        chosen = pools[pool]
        if not chosen and weights.canary_weight not in (0, 100):
            # Nothing healthy left in the pool (all in cooldown): its sessions go to the
            # other rather than fail, and come back when it recovers. At 0% and 100% the
            # split is exact, so they fail instead.
            chosen = pools[other]
        if weights.mirror and pool == "stable" and pools["canary"]:
            # LiteLLM's traffic mirroring: the router sends a background copy to the group,
            # which the branch above narrows to the canary.
            return [
                {**d, "litellm_params": {**d.get("litellm_params", {}), "silent_model": group}}
                for d in chosen
            ]
        return chosen

    def state(self, model_list: list[Deployment]) -> dict[str, Any]:
        """What is applied, per model group of ``model_list`` or of a weights file, and what is
        wrong with the files: the driver's read-back."""
        loaded = self.weights.current()
        files = loaded.groups()
        groups: dict[str, Any] = {}
        for deployment in model_list:
            name = deployment.get("model_name")
            if isinstance(name, str):
                entry = groups.setdefault(name, {"deployments": {"stable": [], "canary": []}})
                ident = (deployment.get("model_info") or {}).get("id")
                entry["deployments"][pool_of(deployment)].append(str(ident))
        for name in set(groups) | set(files):
            weights, path = files.get(name, (GroupWeights(name, 0), None))
            groups.setdefault(name, {"deployments": {"stable": [], "canary": []}})
            groups[name].update(
                canary_weight=weights.canary_weight,
                mirror=weights.mirror,
                session_header=weights.session_header,
                epoch=weights.epoch,
                file=path,
            )
        return {
            "directory": str(self.weights.directory),
            "groups": groups,
            "problems": loaded.problems,
        }
