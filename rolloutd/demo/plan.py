"""The demo's plan: the reference rollout, with the simulated fleet behind a file router.

The same steps as ``config/plans/atlas-70b-maxseq8192.yaml`` (shadow, 5% for 48 h, 25%
for 48 h, manual promotion, 100%, steady), the gate kinds the demo's metrics source can
answer (thresholds and event counts), and tick intervals short enough for a scaled clock.
Gate windows are simulated time: at the default speed an hour passes in 0.25 s. An
escalation rise holds the 25% step (a failing step gate) until the progress deadline
rolls it back; the other faults trip a rollback trigger at once.
"""

from __future__ import annotations

from pathlib import Path

# The sets the simulated fleet pins, as `rolloutctl sim fleet` writes them.
from rolloutd.sim.fleetdir import CANARY_SET, STABLE_SET

_PLAN = """\
name: atlas-70b-maxseq8192-demo
service: atlas-70b
environment: staging
description: the reference change on the simulated fleet (rolloutctl demo)

pools:
  stable:
    replicas:
      - {{name: gpu-a, url: "{gpu_a}"}}
      - {{name: gpu-b, url: "{gpu_b}"}}
      - {{name: gpu-c, url: "{gpu_c}"}}
  canary:
    replicas:
      - {{name: gpu-d, url: "{gpu_d}"}}

router: {{driver: file, path: "{weights}"}}
metrics: {{source: simulator}}
# Rollback redeploys the pinned stable set on gpu-d through Triton's model control and
# verifies its health, config and digest before the rollout counts as rolled back.
artefacts: {{stable: {stable_set}, canary: {canary_set}}}
executor:
  kind: triton
  model: atlas-70b
  versions: {{stable: 1, canary: 3}}
  poll_interval: 50ms
  health_deadline: 10s
  load_timeout: 30s
capacity: {{max_seq_len: 8192, target_concurrency: 60}}

# Real seconds between ticks (the scheduler runs on the wall clock).
interval: 200ms
trigger_interval: 200ms
limits: {{max_inconclusive: 40, on_inconclusive: pause, progress_deadline: 24h}}

gates:
  schema_violations:
    kind: threshold
    signal: schema_violation_rate
    max: 0.005
    min_samples: {min_samples}
    window: {window}
  queue_timeouts:
    kind: threshold
    signal: queue_timeout_rate
    max: 0.01
    min_samples: {min_samples}
    window: {window}
  e2e_latency_p95:
    kind: threshold
    signal: e2e_latency_p95
    max: {latency_target}
    min_samples: {min_samples}
    window: {window}
  escalations:
    kind: threshold
    signal: escalation_rate
    max: 0.25
    min_samples: {min_sessions}
    window: 48h   # sessions are few at 5%: judge the whole bake
  capacity_prompts:
    kind: threshold
    signal: sequence_tokens_p99
    max: 8192
    min_samples: {min_samples}
    window: {window}
  # rollback triggers
  canary_oom: {{kind: events, signal: oom_events, window: {window}}}
  queue_timeouts_breach:
    {{kind: threshold, signal: queue_timeout_rate, max: 0.05, min_samples: {min_samples},
     window: {window}}}
  schema_violations_breach:
    {{kind: threshold, signal: schema_violation_rate, max: 0.01, min_samples: {min_samples},
     window: {window}}}
  latency_breach:
    {{kind: threshold, signal: e2e_latency_p95, max: {latency_breach},
     min_samples: {min_samples}, window: {window}}}

steps:
  - {{kind: shadow, duration: 2h, gates: [schema_violations]}}
  - {{kind: canary, weight: 5, bake: 48h,
     gates: [queue_timeouts, schema_violations, e2e_latency_p95, escalations]}}
  - {{kind: canary, weight: 25, bake: 48h,
     gates: [queue_timeouts, schema_violations, e2e_latency_p95, escalations]}}
  - {{kind: pause}}
  - {{kind: full}}
  - {{kind: steady, duration: 12h, gates: [capacity_prompts, queue_timeouts]}}

rollback:
  triggers: [canary_oom, queue_timeouts_breach, schema_violations_breach, latency_breach]
"""


def demo_plan_yaml(weights: Path, urls: dict[str, str]) -> str:
    """The demo plan, its router writing to ``weights`` (where the splitter reads) and its
    replicas at ``urls`` (name -> the simulated replica's URL)."""
    return _PLAN.format(
        gpu_a=urls["gpu-a"],
        gpu_b=urls["gpu-b"],
        gpu_c=urls["gpu-c"],
        gpu_d=urls["gpu-d"],
        stable_set=STABLE_SET,
        canary_set=CANARY_SET,
        weights=weights,
        window="12h",
        min_samples=10,
        min_sessions=5,
        latency_target=14.0,
        latency_breach=20.0,
    )


_SUPPORT_PLAN = """\
name: support-70b-awq-demo
service: support-70b
environment: staging
description: Q4_K_M GGUF -> AWQ on one box each, on the simulated fleet (rolloutctl demo)

pools:
  stable:
    replicas: [{{name: box-a, url: "{box_a}"}}]
  canary:
    replicas: [{{name: box-b, url: "{box_b}"}}]

router: {{driver: file, path: "{weights}"}}
metrics: {{source: simulator}}
artefacts: {{stable: {stable_set}, canary: {canary_set}}}
# config/plans/support-70b-awq.yaml restarts box-b's vLLM unit on the pinned GGUF set (the
# systemd executor); the demo's engines run in this process, so its rollback moves traffic.
executor: {{kind: none, reason: "the demo's vLLM boxes are simulated in-process"}}

interval: 200ms
trigger_interval: 200ms
# A matched-load pass waits until the requests compared could show a canary twice as often
# slow: on a busy machine the simulated boxes serve fewer, so the deadline leaves room.
limits: {{max_inconclusive: 40, on_inconclusive: pause, progress_deadline: 96h}}

gates:
  # At 5% box-b carries a twentieth of box-a's load: judged at matched concurrency.
  ttft_p95:
    kind: latency
    signal: ttft
    target_seconds: {ttft_target}
    max_ratio: 1.2
    min_samples: {min_samples}
    window: {window}
    match_load: {{slice: {slice}, min_requests: 20}}
  errors:
    {{kind: threshold, signal: error_rate, max: 0.01, min_samples: {min_samples},
     window: {window}}}
  # The 26-case ground-truth set, scored by token-F1 here (the reference plan asks a judge).
  faithfulness:
    kind: suite
    suite: "{suite}"
    scorer: token_f1
    rule: at_least_baseline
    every: 12h
  # rollback triggers
  canary_oom: {{kind: events, signal: oom_events, window: {window}}}
  errors_breach:
    {{kind: threshold, signal: error_rate, max: 0.05, min_samples: {min_samples},
     window: {window}}}
  ttft_breach:
    {{kind: threshold, signal: ttft, max: {ttft_breach}, min_samples: {min_samples},
     window: {window}}}
  faithfulness_drop:
    kind: suite
    suite: "{suite}"
    scorer: token_f1
    rule: max_drop
    max_drop_points: 5.0
    every: 12h

steps:
  - {{kind: canary, weight: 5, bake: 48h, gates: [ttft_p95, errors, faithfulness]}}
  - {{kind: canary, weight: 25, bake: 48h, gates: [ttft_p95, errors, faithfulness]}}
  - {{kind: pause}}
  - {{kind: full}}
  - {{kind: steady, duration: 12h, gates: [ttft_p95, errors]}}

rollback:
  triggers: [canary_oom, errors_breach, ttft_breach, faithfulness_drop]
"""


def support_plan_yaml(weights: Path, urls: dict[str, str]) -> str:
    """The support deployment's demo plan (``config/plans/support-70b-awq.yaml`` on the
    simulated fleet): one box per pool behind the file router at ``weights``."""
    from rolloutd.metrics.templates import GATES_DIR
    from rolloutd.sim.fleetdir import SUPPORT_CANARY_SET, SUPPORT_STABLE_SET

    return _SUPPORT_PLAN.format(
        box_a=urls["box-a"],
        box_b=urls["box-b"],
        stable_set=SUPPORT_STABLE_SET,
        canary_set=SUPPORT_CANARY_SET,
        weights=weights,
        suite=GATES_DIR / "suites" / "support-rag-26.jsonl",
        window="12h",
        slice="1h",
        min_samples=10,
        ttft_target=1.0,
        ttft_breach=1.5,
    )
