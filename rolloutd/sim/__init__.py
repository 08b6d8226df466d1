"""The simulated engine fleet: vLLM- and Triton-like replicas, traffic and fault injection.

There are no GPUs in the test and demo environments, so every integration test, benchmark
and the demo drive these replicas instead. They behave like the real engines where the
rollout controller can see it: the capacity model decides queueing and timeouts, metrics
have the real names, an OOM kills the process and the supervisor restarts it.

The package imports nothing at this level, so ``rolloutd.core.capacity`` stays cheap to load
for ``rolloutctl capacity``. The parts, one idea per module::

    capacity    KV-cache arithmetic (pure): resident sequences, max_seq_len for a concurrency
    config      EngineConfig, REFERENCE_STABLE (32,768) / REFERENCE_CANARY (8,192), deploy configs
    fleet       Fleet / ReplicaSpec: replicas in pools, started together
    engine      Replica: one engine process (set_faults, inject_oom, restart, describe)
    traffic     TrafficGenerator: agent sessions through any URL, counting per pool
    gateway     AgentMetrics: sessions, escalations, tool calls, schema violations per pool
    source      SimulatorMetrics: the MetricsSource over a fleet
    metricsfile the fleet's signals written for the ``file`` metrics source of another process
    fleetdir    what ``rolloutctl sim fleet`` writes: artefacts to pin, plans pointed at it
    cases, profiles, scoring   tool-call cases, how each quality profile answers, scoring
    scheduler, serving, process, stats, exposition, server, repository, protocol, ledger,
    faults      the engine's insides
"""
