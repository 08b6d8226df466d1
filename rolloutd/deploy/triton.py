"""The ``triton`` executor: Triton model control over HTTP (``--model-control-mode=explicit``).

A deploy loads the model with the set's engine parameters and digest in the config override
(pinned to the role's repository version when the plan names one), polls the version's
readiness, then unloads the models the plan says it replaces. Triton takes the override as
the *whole* model config, so the override is the config Triton reports now with the pinned
values laid over it (inputs, outputs and backend stay). Loading the set a replica already
serves is skipped: the loaded config reports the set's digest and parameters.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

from rolloutd.core.plan import Replica, Role
from rolloutd.core.plan import TritonExecutor as TritonSpec
from rolloutd.deploy.artefacts import PinnedSet
from rolloutd.deploy.base import Clock, DeployResult, Sleep, Stopwatch, Verification, verdict
from rolloutd.deploy.verify import (
    HEALTH_PATHS,
    Poller,
    as_parameter,
    check_files,
    fill,
    parameter_value,
)

DIGEST_PARAMETER = "artefact_digest"
SET_PARAMETER = "artefact_set"


class TritonDeployer(Poller):
    """Deploys pinned sets through Triton's model repository API; see the module docstring."""

    kind = "triton"

    def __init__(
        self,
        spec: TritonSpec,
        roles: dict[str, Role],
        *,
        client: httpx.Client | None = None,
        clock: Clock = time.monotonic,
        sleep: Sleep = time.sleep,
    ) -> None:
        super().__init__(spec.poll_interval, client=client, clock=clock, sleep=sleep)
        self.spec = spec
        self.roles = roles

    def deploy(
        self, replica: Replica, artefacts: PinnedSet, *, timeout: float | None = None
    ) -> DeployResult:
        watch = Stopwatch.of_call(timeout, self.spec.load_timeout, self.clock)
        base, version = self._base(replica), self._version(artefacts)

        def result(ok: bool, reason: str, changed: bool = True, **detail: Any) -> DeployResult:
            return DeployResult.of(
                self.kind,
                replica,
                artefacts,
                ok=ok,
                reason=reason,
                duration_s=watch.elapsed,
                changed=changed,
                detail={"model": self.spec.model, "version": version, **detail},
            )

        current = self._config(base, watch)
        unchanged = current is not None and not self._differences(current, artefacts, version)
        if unchanged and self._ready(base, version, watch):
            return result(True, f"already serving {artefacts.name}", changed=False)
        override = self._override(current or {}, artefacts, version)
        try:
            response = self.client.post(
                f"{base}/v2/repository/models/{self.spec.model}/load",
                json={"parameters": {"config": json.dumps(override)}},
                timeout=max(0.5, watch.remaining),
            )
        except httpx.TimeoutException:
            return result(
                False, f"load of {self.spec.model} did not answer within {watch.budget:g} s"
            )
        except httpx.HTTPError as exc:
            return result(False, f"load of {self.spec.model} failed: {type(exc).__name__}: {exc}")
        if response.status_code != 200:
            return result(
                False,
                f"load of {self.spec.model} answered {response.status_code}: {_error(response)}",
            )
        ready, why = self.poll([self._ready_url(base, version)], watch)
        if not ready:
            return result(
                False, f"{self._what(version)} not ready within {watch.budget:g} s: {why}"
            )
        unloaded, failure = self._unload_replaced(base, watch)
        if failure:
            return result(False, failure, unloaded=unloaded)
        return result(True, f"loaded {artefacts.name} as {self._what(version)}", unloaded=unloaded)

    def verify(
        self, replica: Replica, artefacts: PinnedSet, *, timeout: float | None = None
    ) -> Verification:
        watch = Stopwatch.of_call(timeout, self.spec.health_deadline, self.clock)
        base, version = self._base(replica), self._version(artefacts)
        # Serving at all is health; serving the pinned version is checked with the digests.
        healthy, why = self.poll(
            [f"{base}{HEALTH_PATHS['triton']}", self._ready_url(base, None)], watch
        )
        if not healthy:
            return verdict(replica, artefacts, watch.elapsed, False, None, f"not healthy: {why}")
        config = self._config(base, watch)
        if config is None:
            reason = f"cannot read the loaded config of {self.spec.model}"
            return verdict(replica, artefacts, watch.elapsed, True, False, reason)
        differences = self._differences(config, artefacts, version)
        detail: dict[str, Any] = {"reported": differences}
        if differences:
            reason = f"{self.spec.model} does not run {artefacts.name}: " + "; ".join(differences)
            return verdict(replica, artefacts, watch.elapsed, True, False, reason, detail)
        if self.spec.files_path is not None:
            matches, why, files = check_files(
                artefacts, fill(self.spec.files_path, replica, artefacts)
            )
            return verdict(replica, artefacts, watch.elapsed, True, matches, why, detail | files)
        return verdict(replica, artefacts, watch.elapsed, True, True, "", detail)

    # -- the repository API --------------------------------------------------------------

    def _base(self, replica: Replica) -> str:
        return self.spec.urls.get(replica.name, replica.url).rstrip("/")

    def _version(self, artefacts: PinnedSet) -> int | None:
        role = self.roles.get(artefacts.name)
        return None if role is None else self.spec.versions.get(role)

    def _what(self, version: int | None) -> str:
        return self.spec.model if version is None else f"{self.spec.model} version {version}"

    def _ready_url(self, base: str, version: int | None) -> str:
        models = f"{base}/v2/models/{self.spec.model}"
        return f"{models}/ready" if version is None else f"{models}/versions/{version}/ready"

    def _ready(self, base: str, version: int | None, watch: Stopwatch) -> bool:
        try:
            url = self._ready_url(base, version)
            return self.client.get(url, timeout=max(0.5, min(10.0, watch.remaining))).is_success
        except httpx.HTTPError:
            return False

    def _config(self, base: str, watch: Stopwatch) -> dict[str, Any] | None:
        try:
            response = self.client.get(
                f"{base}/v2/models/{self.spec.model}/config",
                timeout=max(0.5, min(10.0, watch.remaining)),
            )
            body = response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None
        return body if isinstance(body, dict) else None

    def _override(
        self, current: dict[str, Any], artefacts: PinnedSet, version: int | None
    ) -> dict[str, Any]:
        override = {key: value for key, value in current.items() if key != "parameters"}
        parameters = dict(current.get("parameters") or {})
        for key, value in artefacts.engine_config.items():
            parameters[key] = {"string_value": as_parameter(value)}
            # A pinned value wins wherever the engine's config keeps that key.
            if key in override:
                override[key] = value
        parameters[DIGEST_PARAMETER] = {"string_value": artefacts.digest}
        parameters[SET_PARAMETER] = {"string_value": artefacts.name}
        override["name"] = self.spec.model
        override["parameters"] = parameters
        if version is not None:
            override["version_policy"] = {"specific": {"versions": [version]}}
        return override

    def _differences(
        self, config: dict[str, Any], artefacts: PinnedSet, version: int | None
    ) -> list[str]:
        """How the config Triton reports differs from the pinned set ([] when it matches)."""
        parameters = config.get("parameters")
        differences = []
        reported = parameter_value(parameters, DIGEST_PARAMETER)
        if reported != artefacts.digest:
            differences.append(f"digest {str(reported)[:12]}, pinned {artefacts.digest[:12]}")
        for key, value in sorted(artefacts.engine_config.items()):
            have = parameter_value(parameters, key)
            if key in config and not isinstance(config[key], dict | list):
                have = as_parameter(config[key])
            if have != as_parameter(value):
                differences.append(f"{key} is {have}, pinned {as_parameter(value)}")
        if version is not None:
            specific = (config.get("version_policy") or {}).get("specific") or {}
            versions = [int(v) for v in specific.get("versions", [])]
            if versions != [version]:
                differences.append(f"serves versions {versions or 'by policy'}, pinned {version}")
        return differences

    def _unload_replaced(self, base: str, watch: Stopwatch) -> tuple[list[str], str]:
        """Unload every model in ``spec.unload`` that is loaded: (unloaded, failure)."""
        if not self.spec.unload:
            return [], ""
        try:
            response = self.client.post(
                f"{base}/v2/repository/index",
                json={"ready": True},
                timeout=max(0.5, watch.remaining),
            )
            entries = response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError) as exc:
            return [], f"cannot list the loaded models: {exc}"
        if not isinstance(entries, list):
            return [], f"cannot list the loaded models: index answered {response.status_code}"
        loaded = {e.get("name") for e in entries if isinstance(e, dict)}
        unloaded: list[str] = []
        for name in self.spec.unload:
            if name == self.spec.model or name not in loaded:
                continue
            try:
                answer = self.client.post(
                    f"{base}/v2/repository/models/{name}/unload",
                    json={"parameters": {"unload_dependents": True}},
                    timeout=max(0.5, watch.remaining),
                )
            except httpx.HTTPError as exc:
                return unloaded, f"unload of {name} failed: {type(exc).__name__}: {exc}"
            if answer.status_code != 200:
                return unloaded, f"unload of {name} answered {answer.status_code}: {_error(answer)}"
            unloaded.append(name)
        return unloaded, ""


def _error(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:300]
    return str(body.get("error", body))[:300] if isinstance(body, dict) else str(body)[:300]
