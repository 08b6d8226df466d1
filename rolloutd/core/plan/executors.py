"""Deploy executors: how a rollback puts the pinned set back on a replica."""

from __future__ import annotations

import string
from datetime import timedelta
from typing import Annotated, Literal, Self

from pydantic import Field, field_validator, model_validator

from rolloutd.core.plan.base import Duration, HttpUrl, Name, _Spec

# What an argv template or ``files_path`` may name; each is filled per replica and set.
TEMPLATE_FIELDS = frozenset({"replica", "url", "set", "digest", "root", "engine", "manifest"})
Role = Literal["stable", "canary"]


def _template_fields(template: str) -> set[str]:
    try:
        return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as exc:
        raise ValueError(f"{template!r} is not a valid template: {exc}") from None


def _check_template(template: str, where: str) -> None:
    unknown = _template_fields(template) - TEMPLATE_FIELDS
    if unknown:
        known = ", ".join("{" + name + "}" for name in sorted(TEMPLATE_FIELDS))
        raise ValueError(f"{where} names {sorted(unknown)}; known placeholders: {known}")


class NoExecutor(_Spec):
    """No deploys: operators put artefacts on replicas themselves; rollback moves traffic only.

    ``reason`` says why a plan goes without one; a production plan must say it
    (:func:`~rolloutd.core.plan.checks.plan_problems`), since its rollback then leaves the
    canary build on the canary replicas."""

    kind: Literal["none"] = "none"
    reason: str | None = Field(default=None, min_length=1)

    @field_validator("reason")
    @classmethod
    def _reason_says_something(cls, reason: str | None) -> str | None:
        if reason is not None and not reason.strip():
            raise ValueError("must say why the plan has no executor, not be blank")
        return reason


class _Executor(_Spec):
    """What every executor shares: how long a replica may take to become healthy after a
    deploy, how often to poll it, and optionally where the ops host can read the files a
    replica serves (``{replica}`` and the other placeholders), for the digest check."""

    health_deadline: Duration = timedelta(minutes=5)
    poll_interval: Duration = timedelta(seconds=2)
    files_path: str | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _known_placeholders(self) -> Self:
        if self.files_path is not None:
            _check_template(self.files_path, "files_path")
        return self


class CommandExecutor(_Executor):
    """Runs the operator's own deploy command once per replica (``argv`` is a template).

    The artefact set's name, root, engine, config, digests and a manifest file are in the
    environment as ``ROLLOUTD_*``; nothing else of rolloutd's environment is passed on.
    ``health`` picks the health endpoint (``auto``: from the set's engine).
    """

    kind: Literal["command"]
    argv: list[str] = Field(min_length=1)
    timeout: Duration = timedelta(minutes=15)
    env: dict[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")], str] = Field(
        default_factory=dict
    )
    health: Literal["auto", "vllm", "triton"] = "auto"

    @model_validator(mode="after")
    def _known_argv_placeholders(self) -> Self:
        for i, part in enumerate(self.argv):
            _check_template(part, f"argv[{i}]")
        reserved = sorted(name for name in self.env if name.startswith("ROLLOUTD_"))
        if reserved:
            raise ValueError(f"env may not set {', '.join(reserved)}: rolloutd sets ROLLOUTD_*")
        return self


class TritonExecutor(_Executor):
    """Triton model control (``--model-control-mode=explicit``): load ``model`` with the set's
    engine config as the override, wait until the version is ready, unload the models in
    ``unload`` that it replaces. ``versions`` pins the repository version each role's set
    is served as; ``urls`` maps a replica name to its Triton HTTP URL when that is not the
    replica URL the router uses."""

    kind: Literal["triton"]
    model: Name
    versions: dict[Role, Annotated[int, Field(ge=1)]] = Field(default_factory=dict)
    unload: list[Name] = Field(default_factory=list)
    urls: dict[Name, HttpUrl] = Field(default_factory=dict)
    load_timeout: Duration = timedelta(minutes=10)


# What the ``restart`` argv may name besides the replica and set fields.
RESTART_FIELDS = TEMPLATE_FIELDS | {"unit"}


class SystemdExecutor(_Executor):
    """A vLLM server run by a systemd unit: write the set's environment file (the model
    path, the served name, the engine arguments), restart the unit, wait until ``/health``
    answers and ``/v1/models`` names the pinned model, then check the files' digests.

    ``unit`` and ``env_file`` are templates (``vllm@{replica}.service``); the unit reads the
    file with ``EnvironmentFile=`` and starts ``vllm serve ${VLLM_MODEL} $VLLM_ARGS``.
    ``restart`` is the argv that restarts it (``{unit}`` filled in): ``systemctl --user``
    by default, ``sudo systemctl`` or an ``ssh`` wrapper for another host's manager.
    ``served_model_name``: the name ``/v1/models`` must show; by default the model path,
    which is what vLLM shows without ``--served-model-name``. The environment file must be
    on a path this host writes and the engine's host reads.
    """

    kind: Literal["systemd"]
    unit: str = Field(min_length=1)
    env_file: str = Field(min_length=1)
    restart: list[str] = Field(
        default_factory=lambda: ["systemctl", "--user", "restart", "{unit}"], min_length=1
    )
    restart_timeout: Duration = timedelta(minutes=2)
    served_model_name: str | None = Field(default=None, min_length=1)
    urls: dict[Name, HttpUrl] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _known_systemd_placeholders(self) -> Self:
        _check_template(self.unit, "unit")
        _check_template(self.env_file, "env_file")
        for i, part in enumerate(self.restart):
            unknown = _template_fields(part) - RESTART_FIELDS
            if unknown:
                raise ValueError(
                    f"restart[{i}] names {sorted(unknown)}; known placeholders: "
                    + ", ".join("{" + name + "}" for name in sorted(RESTART_FIELDS))
                )
        return self


ExecutorSpec = Annotated[
    NoExecutor | CommandExecutor | TritonExecutor | SystemdExecutor, Field(discriminator="kind")
]
