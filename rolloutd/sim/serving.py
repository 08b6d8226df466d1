"""The request path of a simulated engine: admission, simulated compute, the answer.

A request is parsed, checked against ``max_seq_len`` (too long: rejected on a paged KV
cache, an OOM on a contiguous one), queued for a resident-sequence slot up to the queue
timeout, held for its simulated prefill and decode time (scaled to wall time), then
answered by the replica's quality profile. Every request ends in the ledger and, as the
real engine counts it, in the process's statistics.
"""

from __future__ import annotations

import math
import random
import time
from typing import TYPE_CHECKING

from rolloutd.sim.cases import rng_for
from rolloutd.sim.config import EngineConfig
from rolloutd.sim.faults import Faults
from rolloutd.sim.process import Process, Reply
from rolloutd.sim.profiles import Answer, answer
from rolloutd.sim.protocol import BadRequest, ChatRequest, chat_response, openai_error, parse_chat
from rolloutd.sim.references import reference_answer, references_of

if TYPE_CHECKING:
    from rolloutd.sim.engine import Replica


def serve_chat(replica: Replica, body: object, session_id: str | None = None) -> Reply:
    """Serve one ``POST /v1/chat/completions`` on ``replica``."""
    with replica.lock:
        process, config, faults = replica.process, replica.config, replica.faults
        ready = replica.model_state == "READY"
    if process is None:
        replica.record("unavailable")
        message = f"EngineDeadError: {replica.model_reason}"
        return replica.reply(503, openai_error(message, "ServiceUnavailableError", 503))
    if not ready:
        replica.record("unavailable")
        message = f"Request for unknown model: '{config.model}' is {replica.model_reason}"
        return replica.reply(400, openai_error(message, "BadRequestError", 400))
    try:
        request = parse_chat(body)
    except BadRequest as exc:
        return replica.reply(400, openai_error(str(exc), "BadRequestError", 400))
    if request.model not in (None, config.model):
        message = f"The model `{request.model}` does not exist."
        return replica.reply(404, openai_error(message, "NotFoundError", 404))
    rng = rng_for(
        replica.seed,
        replica.profile,
        request.seed,
        session_id,
        request.messages,
        request.expected,
        [tool["name"] for tool in request.tools],
    )
    prompt = max(1, round(request.prompt_tokens * faults.prompt_drift))
    wanted = max(1, round(config.output_tokens_median * math.exp(rng.gauss(0.0, 0.2))))
    output = min(wanted, request.max_tokens or wanted)
    finish = "length" if output < wanted else "stop"
    if prompt + output > config.max_seq_len:
        if not config.paged_kv_cache:
            replica.crash(
                process,
                f"CUDA out of memory: a {prompt + output}-token sequence "
                f"outgrew its {config.max_seq_len}-token reservation",
            )
            replica.record("error", prompt_tokens=prompt)
            message = "EngineDeadError: CUDA out of memory"
            return replica.reply(500, openai_error(message, "InternalServerError", 500))
        if prompt >= config.max_seq_len:
            process.stats.fail("BACKEND", None)
            replica.record("error", prompt_tokens=prompt)
            message = (
                f"This model's maximum context length is {config.max_seq_len} "
                f"tokens. However, you requested {prompt + output} tokens."
            )
            return replica.reply(400, openai_error(message, "BadRequestError", 400))
        output, finish = config.max_seq_len - prompt, "length"
    return _serve(replica, process, config, faults, request, rng, prompt, output, finish)


def _serve(
    replica: Replica,
    process: Process,
    config: EngineConfig,
    faults: Faults,
    request: ChatRequest,
    rng: random.Random,
    prompt: int,
    output: int,
    finish: str,
) -> Reply:
    scale = replica.time_scale
    started = time.monotonic()
    if rng.random() < faults.timeout_rate:
        process.died.wait(config.queue_timeout_s * scale)
        admission, running, queued = "timeout", 0, True
    else:
        admission, running, queued = process.slots.acquire(config.queue_timeout_s * scale)
    queue_s = (time.monotonic() - started) / scale if queued else 0.0
    if admission != "granted":
        if admission == "timeout":
            process.stats.fail("REJECTED", "abort")
        replica.record("timeout" if admission == "timeout" else "error", queue_s=queue_s)
        if admission == "timeout":
            message = "Request timeout expired"
            return replica.reply(503, openai_error(message, "ServiceUnavailableError", 503))
        return replica.reply(500, openai_error("EngineDeadError", "InternalServerError", 500))
    total = prompt + output
    with replica.lock:
        process.kv_tokens += total
        process.in_prefill += 1
        kv_usage = process.kv_tokens / process.pool_tokens
    prefill = config.service.prefill_seconds(prompt, running) * faults.latency_factor
    decode = config.service.decode_seconds(output, running) * faults.latency_factor
    try:
        died = process.died.wait(prefill * scale)
        with replica.lock:
            process.in_prefill -= 1
        died = died or process.died.wait(decode * scale)
    finally:
        with replica.lock:
            process.kv_tokens -= total
        process.slots.release()
    if died:
        replica.record("error", queue_s=queue_s, prompt_tokens=prompt)
        return replica.reply(500, openai_error("EngineDeadError", "InternalServerError", 500))
    # One set of timings for the ledger (the engine metrics) and the reply (the gateway).
    timings = {"queue_s": queue_s, "ttft_s": queue_s + prefill, "e2e_s": queue_s + prefill + decode}
    done = replica.record(
        "ok", **timings, prompt_tokens=prompt, output_tokens=output, kv_usage=kv_usage
    )
    process.stats.succeed(finish, done)
    references = references_of(request.raw)
    if references is not None and not request.tools:
        said = Answer(None, content=reference_answer(references, rng, faults.unfaithful_rate))
    else:
        said = answer(
            replica.profile,
            request.expected,
            request.tools,
            rng,
            schema_violation_rate=faults.schema_violation_rate,
            exactness_drop=faults.exactness_drop,
            handoff_rate=faults.escalation_rate,
        )
    served = {**timings, "replica": replica.name, "pool": replica.pool}
    return replica.reply(200, chat_response(config.model, said, prompt, output, finish, served))
