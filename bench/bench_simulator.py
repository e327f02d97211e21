"""P4 — what the simulator costs on top of the library it studies.

Bundled transcripts are replayed under a clean scenario (an OpenAI chat provider,
no fault) and, in one run (medians, each contender timed alternately):

- **replay overhead**: :func:`simulator.replay.replay` in process (``httpx`` through
  ``MockTransport`` → middlebox → strict mock provider, one record per attempt) ÷ the
  library's own time for the same turns: the same messages fed to a
  :class:`~ctxrecover.session.Session` whose sender answers each request with the
  recorded reply in memory (no body rendered, no HTTP). Both sessions do the same work
  (same requests, same compactions, checked). For reference the same ratio against
  a sender that also renders each request body as :class:`~ctxrecover.transport.HttpxSender`
  does (``render``: the JSON a real client posts) — library work that a trivial
  sender skips. Target ≤ 1.5.
- **loopback vs in-process**: the same replays over a real TCP server on 127.0.0.1
  (asyncio + h11) ÷ in process. Target ≤ 3.
- **sweep speed-up**: :func:`simulator.research.sweep.sweep` of the bundled scenario matrix
  (every scenario × its workload × the default and ``cap-bisection`` policies × 2
  seeds) on 1 worker ÷ on 2 worker processes (no cache), the fastest of 2 alternated
  runs each. Target ≥ 1.7; it needs two idle cores, so the load average is recorded.

Run it with ``python bench/bench_simulator.py``; ``run()`` returns the measures.
"""

from __future__ import annotations

import gc
import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

from ctxrecover.archive import MemoryArchive
from ctxrecover.events import SessionStats
from ctxrecover.messages import Message
from ctxrecover.session import Session
from ctxrecover.sizes import total_weight
from ctxrecover.transport import ChatRequest, ChatResponse
from ctxrecover.wire import Usage, WireFormat, encode_body, render_request, request_size
from simulator.proxy.scenario import Scenario, list_scenarios, scenario_from_document
from simulator.replay import replay
from simulator.summarizers import make_summarizer
from simulator.transcripts.loaders import Transcript
from simulator.workloads import load_named_transcript, shape_transcript, split_turns

TRANSCRIPTS = ("coding-120k", "chat-long-answers-600k", "small-tools-1m")
QUICK_TRANSCRIPTS = ("chat-long-answers-600k",)
REPEATS = 3
SWEEP_WORKERS = 2
SWEEP_POLICIES = ("default", "cap-bisection")
SWEEP_SEEDS = (0, 1)  # 14 scenarios × 2 policies × 2 seeds = 56 runs: enough to amortize worker start-up
QUICK_SWEEP_SEEDS = (0,)
SWEEP_REPEATS = 2  # 1 and 2 workers alternately, the fastest of each: the least disturbed by other jobs
TARGET_REPLAY_OVERHEAD = 1.5
TARGET_LOOPBACK = 3.0
TARGET_SWEEP_SPEEDUP = 1.7
CONTENDERS = ("library", "library_render", "inprocess", "loopback")
CHARS_PER_TOKEN = 4  # the mock provider's estimate (simulator.providers.mock.estimate_tokens)
CLEAN_SCENARIO: dict[str, Any] = {
    "description": "No fault: an OpenAI chat provider answering every recorded reply (P4 benchmark).",
    "provider": {"format": "openai-chat", "model": "gpt-4o"},
    "expect": {"outcome": "ok"},
}
SUMMARIZER = "extractive"  # the replay's default summarizer behaviour


def clean_scenario() -> Scenario:
    """The fault-free scenario the overhead is measured under."""
    return scenario_from_document(CLEAN_SCENARIO, name="bench-clean")


class InMemorySender:
    """Answers every request with the recorded reply of the turn, without HTTP.

    ``request_bytes`` comes from the library's cached sizes; with ``render=True`` the
    body is also rendered and encoded as :meth:`HttpxSender.render` does. Usage is
    reported as the mock provider estimates it, so both sessions calibrate alike.
    """

    wire_format = WireFormat.OPENAI_CHAT

    def __init__(self, model: str, *, render: bool = False) -> None:
        self.model = model
        self.reply: Message | None = None
        self.render = render

    def send(self, request: ChatRequest) -> ChatResponse:
        assert self.reply is not None, "set .reply before each turn"
        if self.render:  # exactly HttpxSender.render
            body = render_request(
                request.messages,
                self.wire_format,
                model=self.model,
                max_tokens=request.max_tokens,
                tools=request.tools,
                extra=request.extra or None,
            )
            size = len(encode_body(body))
        else:
            size = request_size(
                request.messages, self.wire_format, model=self.model, max_tokens=request.max_tokens
            )
        reply = self.reply
        output = len(reply.content) + sum(len(c.name) + len(c.arguments) for c in reply.tool_calls)
        usage = Usage(
            input_tokens=math.ceil(total_weight(request.messages) / CHARS_PER_TOKEN),
            output_tokens=math.ceil(output / CHARS_PER_TOKEN),
        )
        return ChatResponse(reply, stop_reason="stop", truncated=False, usage=usage, request_bytes=size)


def library_run(transcript: Transcript, scenario: Scenario, *, render: bool = False) -> SessionStats:
    """The transcript's turns through a Session and an :class:`InMemorySender`; returns its stats."""
    turns, trailing = split_turns(shape_transcript(transcript, scenario).messages)
    sender = InMemorySender(scenario.provider.model, render=render)
    session = Session(
        sender,
        policy=scenario.apply_policy(),
        archive=MemoryArchive(),
        summarizer=make_summarizer(SUMMARIZER),
        model=scenario.provider.model,
        max_tokens=scenario.workload.max_tokens,
        sleep=lambda _s: None,
    )
    for turn in turns:
        session.extend(turn.inputs)
        sender.reply = turn.reply
        session.complete()
        session.extend(turn.followers)
    session.extend(trailing)
    return session.stats


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    gc.collect()
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def measure_replay(names: Sequence[str], repeats: int) -> dict[str, Any]:
    """Median times of each contender per transcript, and the ratios of their sums."""
    scenario = clean_scenario()
    per_transcript: dict[str, dict[str, Any]] = {}
    for name in names:
        transcript = load_named_transcript(name)
        samples: dict[str, list[float]] = {k: [] for k in CONTENDERS}
        same_work = True
        for _ in range(repeats):
            elapsed, stats = _timed(lambda: library_run(transcript, scenario))  # noqa: B023
            samples["library"].append(elapsed)
            elapsed, _ = _timed(lambda: library_run(transcript, scenario, render=True))  # noqa: B023
            samples["library_render"].append(elapsed)
            for transport in ("inprocess", "loopback"):
                elapsed, result = _timed(lambda: replay(transcript, scenario, transport=transport))  # noqa: B023
                samples[transport].append(elapsed)
                same_work &= (
                    result.outcome == "ok"
                    and result.stats.requests == stats.requests
                    and result.stats.compactions == stats.compactions
                )
        per_transcript[name] = {
            "turns": stats.turns,
            "requests": stats.requests,
            "compactions": stats.compactions,
            "same_work": same_work,
            **{f"{k}_ms": statistics.median(v) * 1e3 for k, v in samples.items()},
        }
    total = {k: sum(t[f"{k}_ms"] for t in per_transcript.values()) for k in CONTENDERS}
    return {
        "transcripts": per_transcript,
        "total_ms": total,
        "replay_overhead": total["inprocess"] / total["library"],
        "replay_overhead_vs_rendering_library": total["inprocess"] / total["library_render"],
        "loopback_vs_inprocess": total["loopback"] / total["inprocess"],
        "same_work": all(t["same_work"] for t in per_transcript.values()),
    }


def measure_sweep(
    scenarios: Sequence[str],
    workers: int = SWEEP_WORKERS,
    policies: Sequence[str] = SWEEP_POLICIES,
    seeds: Sequence[int] = SWEEP_SEEDS,
    repeats: int = SWEEP_REPEATS,
) -> dict[str, Any]:
    """Wall time of an uncached sweep on 1 worker and on ``workers`` processes, the best of ``repeats``.

    The highest load average seen before a sweep is recorded: other processes on the
    machine take cores away from the workers and the speed-up with them.
    """
    from simulator.research.sweep import sweep

    times: dict[int, list[float]] = {1: [], workers: []}
    load: dict[int, float] = {1: 0.0, workers: 0.0}
    runs = 0
    for _ in range(repeats):
        for count in (1, workers):
            load[count] = max(load[count], os.getloadavg()[0])
            with tempfile.TemporaryDirectory(prefix="ctxrecover-bench-sweep-") as cache:
                elapsed, frame = _timed(
                    lambda: sweep(  # noqa: B023
                        scenarios=list(scenarios),
                        policies=list(policies),
                        seeds=list(seeds),
                        workers=count,  # noqa: B023
                        cache_dir=cache,  # noqa: B023
                        progress=False,
                    )
                )
            times[count].append(elapsed)
            runs = len(frame)
    best = {count: min(samples) for count, samples in times.items()}
    return {
        "runs": runs,
        "workers": workers,
        "cpus": os.cpu_count(),
        "repeats": repeats,
        "one_worker_s": best[1],
        "n_workers_s": best[workers],
        "load_average_before": load,
        "sweep_speedup": best[1] / best[workers],
    }


def run(
    *,
    quick: bool = False,
    transcripts: Sequence[str] | None = None,
    repeats: int | None = None,
    scenarios: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Measure replay overhead, loopback cost and sweep speed-up; ``quick`` runs a smaller set."""
    names = transcripts or (QUICK_TRANSCRIPTS if quick else TRANSCRIPTS)
    replays = measure_replay(names, repeats or (1 if quick else REPEATS))
    sweeps = measure_sweep(
        scenarios or list_scenarios(),
        seeds=QUICK_SWEEP_SEEDS if quick else SWEEP_SEEDS,
        repeats=1 if quick else SWEEP_REPEATS,
    )
    passed = {
        "replay_overhead": replays["replay_overhead"] <= TARGET_REPLAY_OVERHEAD,
        "loopback_vs_inprocess": replays["loopback_vs_inprocess"] <= TARGET_LOOPBACK,
        "sweep_speedup": sweeps["sweep_speedup"] >= TARGET_SWEEP_SPEEDUP,
    }
    return {
        "benchmark": "P4 simulator overhead",
        "replay": replays,
        "sweep": sweeps,
        "targets": {
            "replay_overhead": TARGET_REPLAY_OVERHEAD,
            "loopback_vs_inprocess": TARGET_LOOPBACK,
            "sweep_speedup": TARGET_SWEEP_SPEEDUP,
        },
        "passed": passed,
    }


def main() -> int:
    result = run()
    replays, sweeps = result["replay"], result["sweep"]
    print(
        f"{'transcript':<26}{'turns':>6}{'library ms':>12}{'+render ms':>12}{'in-process ms':>15}"
        f"{'loopback ms':>13}  same work"
    )
    for name, t in replays["transcripts"].items():
        print(
            f"{name:<26}{t['turns']:>6}{t['library_ms']:>12.1f}{t['library_render_ms']:>12.1f}"
            f"{t['inprocess_ms']:>15.1f}{t['loopback_ms']:>13.1f}  {t['same_work']}"
        )
    print(
        f"sweep of {sweeps['runs']} runs: 1 worker {sweeps['one_worker_s']:.2f} s, "
        f"{sweeps['workers']} workers {sweeps['n_workers_s']:.2f} s ({sweeps['cpus']} CPUs)"
    )
    rows = (
        ("replay overhead (in-process ÷ library)", replays["replay_overhead"], "≤", "replay_overhead"),
        ("loopback ÷ in-process", replays["loopback_vs_inprocess"], "≤", "loopback_vs_inprocess"),
        ("sweep speed-up (1 ÷ 2 workers)", sweeps["sweep_speedup"], "≥", "sweep_speedup"),
    )
    for label, value, sign, key in rows:
        verdict = "PASS" if result["passed"][key] else "FAIL"
        print(f"{label:<42}{value:>7.2f}  (target {sign} {result['targets'][key]:g}) — {verdict}")
    vs_render = replays["replay_overhead_vs_rendering_library"]
    print(f"(in-process ÷ library rendering its bodies: {vs_render:.2f})")
    return 0 if all(result["passed"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
