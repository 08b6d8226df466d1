"""One simulated engine replica: a vLLM or Triton/TensorRT-LLM process on 4 GPUs.

Behaviour comes from the capacity model, not from dice: the KV arithmetic gives the
resident sequences, requests beyond them queue in arrival order, a request still queued at
the queue timeout is rejected, and service time grows with the prompt and the batch. A
sequence that outgrows its reservation on a contiguous (non-paged) KV cache, or an
injected fault, is a CUDA OOM: the process dies (health fails, requests error), the
supervisor restarts it after ``restart_delay_s``, and the restart shows as a new
``process_start_time_seconds``, a restart counter +1 and counters back at zero.

Time is simulated: a request sleeps its simulated duration times ``time_scale`` (0.001
turns a 10 s generation into 10 ms) and metrics record the simulated durations.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from rolloutd.sim.config import EngineConfig
from rolloutd.sim.exposition import Flavor, MetricState
from rolloutd.sim.faults import Faults
from rolloutd.sim.ledger import Outcome, RequestLedger, RequestRecord
from rolloutd.sim.process import Process, Reply
from rolloutd.sim.profiles import Profile
from rolloutd.sim.protocol import POOL_HEADER, REPLICA_HEADER
from rolloutd.sim.server import EngineServer
from rolloutd.sim.serving import serve_chat


class Replica:
    """A simulated engine replica; ``start()`` serves it over HTTP (on 127.0.0.1 by default)."""

    def __init__(
        self,
        name: str,
        *,
        pool: str = "stable",
        flavor: Flavor = "triton",
        profile: Profile = "exact",
        config: EngineConfig | None = None,
        seed: int = 0,
        time_scale: float = 0.001,
        restart_delay_s: float = 60.0,
        load_delay_s: float = 20.0,
        available_versions: tuple[int, ...] = (1, 2, 3),
        ledger: RequestLedger | None = None,
    ) -> None:
        if time_scale <= 0:
            raise ValueError(f"time_scale must be positive, got {time_scale}")
        self.name = name
        self.pool = pool
        self.flavor: Flavor = flavor
        self.profile: Profile = profile
        self.seed = seed
        self.time_scale = time_scale
        self.restart_delay_s = restart_delay_s
        self.load_delay_s = load_delay_s
        self.available_versions = available_versions
        self.ledger = ledger if ledger is not None else RequestLedger()
        self.lock = threading.RLock()
        self.config = config if config is not None else EngineConfig()
        self.faults = Faults()
        self.process: Process | None = Process(self.config, time.time())
        self.last_process = self.process
        self.model_state = "READY"
        self.model_reason = ""
        self.loaded_override: dict[str, Any] = {}
        self.restarts = 0
        self.ooms = 0
        self._server: EngineServer | None = None
        self._stopped = False

    # -- lifecycle -------------------------------------------------------------------

    def start(self, port: int = 0, host: str = "127.0.0.1") -> Replica:
        """Serve on ``host`` (``port`` 0 picks a free port); returns self.

        :raises OSError: the address cannot be bound (in use, or not this host's).
        """
        with self.lock:
            self._stopped = False
            if self.process is None:
                self.process = self.last_process = Process(self.config, time.time())
                self.model_state, self.model_reason = "READY", ""
        self._server = EngineServer(self, port, host)
        return self

    def stop(self) -> None:
        """Stop serving and fail whatever is still in flight."""
        with self.lock:
            self._stopped = True
            process, self.process = self.process, None
        if process is not None:
            process.died.set()
            process.slots.close()
        if self._server is not None:
            self._server.close()
            self._server = None

    def __enter__(self) -> Replica:
        return self.start() if self._server is None else self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """The base URL, e.g. ``http://127.0.0.1:40123``."""
        if self._server is None:
            raise RuntimeError(f"replica {self.name} is not started")
        return self._server.url

    @property
    def alive(self) -> bool:
        """Whether the engine process is up (False between an OOM and the restart)."""
        return self.process is not None

    def wait_ready(self, timeout: float = 5.0) -> bool:
        """Wait (wall seconds) until the process is up and the model ready."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.alive and self.model_state == "READY":
                return True
            time.sleep(0.002)
        return False

    # -- faults ------------------------------------------------------------------------

    def set_faults(self, **changes: float) -> Faults:
        """Change faults by name (see ``Faults``); returns the faults now in force.

        :raises FaultError: an unknown fault or a bad value.
        """
        with self.lock:
            self.faults = self.faults.updated(changes)
            return self.faults

    def clear_faults(self) -> None:
        """Back to a healthy engine."""
        with self.lock:
            self.faults = Faults()

    def inject_oom(self, reason: str = "injected fault") -> None:
        """Crash the engine now with a CUDA OOM; the supervisor restarts it later."""
        with self.lock:
            process = self.process
        if process is not None:
            self.crash(process, f"CUDA out of memory ({reason})")

    def crash(self, process: Process, reason: str, *, oom: bool = True) -> None:
        """Kill ``process`` if it is still the live one, and schedule the restart."""
        with self.lock:
            if self.process is not process:
                return
            self.process = None
            self.ooms += 1 if oom else 0
            self.model_state, self.model_reason = "UNAVAILABLE", reason
        process.died.set()
        process.slots.close()
        timer = threading.Timer(self.restart_delay_s * self.time_scale, self._restart, (process,))
        timer.daemon = True
        timer.start()

    def restart(self, config: EngineConfig | None = None) -> None:
        """Restart the engine (a deploy), optionally with a new config; returns at once,
        the engine is back after ``restart_delay_s``."""
        with self.lock:
            process = self.process
            if config is not None:
                self.config = config
        if process is not None:
            self.crash(process, "restarting", oom=False)

    def reload(self, config: EngineConfig, override: dict[str, Any]) -> None:
        """Swap in a freshly loaded model in the same process (a Triton ``load``): new
        slots for the new capacity and new per-model counters; requests in flight finish
        on the old instance."""
        with self.lock:
            current = self.process
            if current is None:
                return
            self.config = config
            self.process = self.last_process = Process(config, current.stats.started_at)
            self.loaded_override = override
            self.model_state, self.model_reason = "READY", ""

    def _restart(self, dead: Process) -> None:
        with self.lock:
            if self._stopped or self.process is not None:
                return
            started = max(time.time(), dead.stats.started_at + 0.001)
            self.process = self.last_process = Process(self.config, started)
            self.restarts += 1
            self.model_state, self.model_reason = "READY", ""

    # -- serving -----------------------------------------------------------------------

    def complete(self, body: object, session_id: str | None = None) -> Reply:
        """Serve one ``POST /v1/chat/completions``."""
        return serve_chat(self, body, session_id)

    def record(self, outcome: Outcome, **values: Any) -> RequestRecord:
        """Write one request to the ledger under this replica's name and pool; returns it."""
        record = RequestRecord(self.name, self.pool, outcome, **values)
        self.ledger.append(record)
        return record

    def reply(self, status: int, body: Any) -> Reply:
        """An HTTP reply carrying the pool and replica headers."""
        return Reply(status, body, {POOL_HEADER: self.pool, REPLICA_HEADER: self.name})

    # -- observation -------------------------------------------------------------------

    def metric_state(self) -> MetricState | None:
        """What ``/metrics`` shows now; None while a vLLM process is dead (no scrape)."""
        with self.lock:
            process = self.process or (self.last_process if self.flavor == "triton" else None)
            if process is None:
                return None
            config = process.config
            deployment = config.deployment
            per_gpu = int(deployment.gpu_memory_bytes * deployment.memory_fraction)
            return MetricState(
                flavor=self.flavor,
                model=config.model,
                version=str(config.version),
                stats=process.stats,
                running=process.slots.running,
                waiting=process.slots.waiting,
                in_prefill=process.in_prefill,
                max_sequences=process.slots.capacity,
                kv_used_tokens=process.kv_tokens,
                kv_pool_tokens=process.pool_tokens,
                tokens_per_block=deployment.tokens_per_block,
                gpu_count=deployment.gpu_count,
                gpu_memory_bytes=deployment.gpu_memory_bytes,
                gpu_used_bytes=per_gpu if self.process is not None else 0,
                restarts=self.restarts,
                replica=self.name,
            )

    def describe(self) -> dict[str, Any]:
        """The replica's state for ``GET /admin/state`` and deploy executors."""
        with self.lock:
            state = "dead" if self.process is None else self.model_state.lower()
            return {
                "name": self.name,
                "pool": self.pool,
                "flavor": self.flavor,
                "profile": self.profile,
                "state": state,
                "reason": self.model_reason,
                "config": self.config.as_dict(),
                "loaded_config": self.loaded_override,
                "faults": self.faults.as_dict(),
                "restarts": self.restarts,
                "oom_events": self.ooms,
                "process_start_time_seconds": self.last_process.stats.started_at
                if self.last_process
                else None,
            }
