"""The demo's two reference deployments: what fleet each runs, its plan, and its sets.

``atlas-70b``: TensorRT-LLM in Triton, three stable replicas and one canary, judged on tool
calls (``config/plans/atlas-70b-maxseq8192.yaml``). ``support-70b``: vLLM, one stable box and
one canary box, judged on time to first token at matched load and on faithfulness to a
ground-truth set (``config/plans/support-70b-awq.yaml``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rolloutd.demo.plan import demo_plan_yaml, support_plan_yaml
from rolloutd.sim.config import REFERENCE_STABLE
from rolloutd.sim.fleet import Fleet, ReplicaSpec
from rolloutd.sim.fleetdir import (
    CANARY_SET,
    ENGINE_CONFIGS,
    STABLE_SET,
    SUPPORT_ENGINE_ARGS,
)
from rolloutd.sim.traffic import Workload


@dataclass(frozen=True)
class Deployment:
    """One deployment the demo can roll out."""

    name: str
    description: str
    canary: str
    """The canary replica the scenarios' faults hit."""
    engine: str
    """The engine kind its sets are pinned as (``rolloutctl artefact pin --engine``)."""
    sets: dict[str, dict[str, object]]
    """Set name -> the engine configuration it is pinned with."""
    fleet: Callable[[int], Fleet]
    plan: Callable[[Path, dict[str, str]], str]
    agents: int
    """Concurrent sessions of agent traffic."""
    model: str
    """The model name the engines serve and the agents ask for."""
    workload: Workload = field(default_factory=Workload)
    """The shape of the agents' sessions."""


def _atlas_fleet(seed: int) -> Fleet:
    return Fleet.reference(seed=seed, restart_delay_s=600.0)


# One L40S box is simulated by the reference engine's service model at max_seq_len 8,192:
# the demo is about the rollout, not the box's capacity (`rolloutctl capacity` is).
SUPPORT_ENGINE = dataclasses.replace(
    REFERENCE_STABLE, model="llama-3.1-70b-instruct", max_seq_len=8_192
)
SUPPORT_WORKLOAD = Workload(prompt_median=3_000, prompt_p99=4_500, min_turns=2, max_turns=6)
"""A support turn: the question, five retrieved chunks of ~400 tokens and the conversation
so far; a few turns a session."""


def support_fleet(
    seed: int,
    *,
    names: tuple[str, str] = ("box-a", "box-b"),
    time_scale: float = 0.001,
    restart_delay_s: float = 600.0,
) -> Fleet:
    """Two simulated vLLM boxes, ``names`` = (stable, canary); ``rolloutctl sim fleet``
    serves production's and the staging pair's with these."""
    stable, canary = names
    specs = [
        ReplicaSpec(stable, "stable", "vllm", config=SUPPORT_ENGINE),
        ReplicaSpec(canary, "canary", "vllm", config=SUPPORT_ENGINE),
    ]
    return Fleet(specs, seed=seed, time_scale=time_scale, restart_delay_s=restart_delay_s)


DEPLOYMENTS: dict[str, Deployment] = {
    d.name: d
    for d in (
        Deployment(
            "atlas-70b",
            "four simulated Triton replicas (3 stable on max_seq_len 32,768, 1 canary on "
            "8,192), judged on tool calls",
            "gpu-d",
            "trtllm",
            {name: dict(ENGINE_CONFIGS[name]) for name in (STABLE_SET, CANARY_SET)},
            _atlas_fleet,
            demo_plan_yaml,
            24,
            REFERENCE_STABLE.model,
        ),
        Deployment(
            "support-70b",
            "two simulated vLLM boxes (Q4_K_M GGUF stable, AWQ canary), judged on TTFT at "
            "matched load and on faithfulness to a ground-truth set",
            "box-b",
            "vllm",
            {name: dict(SUPPORT_ENGINE_ARGS[name]) for name in SUPPORT_ENGINE_ARGS},
            support_fleet,
            support_plan_yaml,
            24,
            SUPPORT_ENGINE.model,
            SUPPORT_WORKLOAD,
        ),
    )
}
