"""Artefact trees, pinned sets and plans for the deploy tests."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy.orm import Session

from rolloutd.core.plan import Plan
from rolloutd.deploy.artefacts import PinnedSet
from rolloutd.deploy.catalog import build_set, pin
from rolloutd.deploy.drills import DrillOutcome, finish_drill, start_drill
from rolloutd.planfile import parse_plan
from tests.plans import small_dict

STABLE_CONFIG: dict[str, Any] = {"max_seq_len": 32768, "kv_cache_free_gpu_mem_fraction": 0.9}
CANARY_CONFIG: dict[str, Any] = {"max_seq_len": 8192, "kv_cache_free_gpu_mem_fraction": 0.9}


def make_tree(root: Path, files: dict[str, bytes]) -> Path:
    """Write ``files`` (relative path -> content) under ``root``; returns root."""
    for relative, content in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    return root


def model_tree(root: Path, build: str) -> Path:
    """A small engine directory whose contents depend on ``build``."""
    return make_tree(
        root,
        {
            "config.json": f'{{"build": "{build}"}}'.encode(),
            "rank0.engine": build.encode() * 5000,
            "tokenizer/tokenizer.json": b'{"vocab": 128256}',
        },
    )


def pinned(tmp: Path, name: str, config: dict[str, Any], engine: str = "trtllm") -> PinnedSet:
    """Write a tree for ``name`` under ``tmp`` and return the set it pins (not stored)."""
    return build_set(name, model_tree(tmp / name, name), engine, config)


def plan_for(executor: dict[str, Any], canary_urls: list[str], **sets: str) -> Plan:
    """The plan of :func:`plan_yaml`, validated."""
    return parse_plan(plan_yaml(executor, canary_urls, **sets)).plan


def plan_yaml(
    executor: dict[str, Any],
    canary_urls: list[str],
    *,
    environment: str = "staging",
    stable: str = "build-old",
    canary: str = "build-new",
) -> str:
    """A small plan whose canary pool is ``canary_urls`` and whose executor is ``executor``,
    as YAML."""
    data = small_dict()
    data["environment"] = environment
    data["artefacts"] = {"stable": stable, "canary": canary}
    data["pools"]["canary"]["replicas"] = [
        {"name": f"c{i + 1}", "url": url} for i, url in enumerate(canary_urls)
    ]
    data["executor"] = executor
    return yaml.safe_dump(data)


def python_script(path: Path, body: str) -> list[str]:
    """Write a Python script to ``path``; returns the argv prefix that runs it."""
    path.write_text(body)
    return [sys.executable, str(path)]


def pin_and_drill(
    session: Session, plan: Plan, tmp: Path, *, drill: str | None = "passed"
) -> tuple[PinnedSet, PinnedSet]:
    """Pin the plan's two artefact sets (small trees under ``tmp``) and, unless ``drill`` is
    None, record a staging drill of the pair with that result: what a production start needs."""
    now = datetime.now(UTC)
    stable = pinned(tmp, plan.artefacts.stable, STABLE_CONFIG)
    canary = pinned(tmp, plan.artefacts.canary, CANARY_CONFIG)
    pin(session, stable, now=now)
    pin(session, canary, now=now)
    if drill is not None:
        staging = plan.model_copy(update={"environment": "staging"})
        drill_id = start_drill(session, staging, stable, canary, actor="test", now=now)
        outcome = DrillOutcome(drill == "passed", f"drill {drill}", 0.0, ())
        finish_drill(session, drill_id, outcome, executor="none", now=now)
    return stable, canary
