"""P8 — concurrent ``AsyncSession`` s through one loopback gateway vs raw httpx posting the same bodies.

One mock provider behind a 128 KB WAF (the ``corporate-128k-waf`` scenario's provider and fault:
Bedrock Converse, an HTML 403 for every body of 128,000 bytes or more) listens on 127.0.0.1 in a
process of its own. In a fresh process, ``SESSIONS`` concurrent
:class:`~ctxrecover.session.AsyncSession` s run a ``TURNS``-turn agent session each through
:class:`~ctxrecover.transport.AsyncHttpxSender`, each on its own ``httpx.AsyncClient`` (as the
sender builds by default: httpcore scans every connection of a pool at each request, so one pool
shared by hundreds of connections would measure httpcore): the model asks for a file (a tool
call), the agent adds it (a 2,900-char tool result, under the microcompact minimum, so the history
grows) and completes the next turn. Each history crosses 128 KB on the way, so every session meets
the WAF, reads its page as size (the size experiment is refused too), learns the cap and compacts,
archiving what it cuts. Every body it posts is spooled to a file. Then, in another fresh process,
the baseline — raw ``httpx.AsyncClient`` s, one per session — posts the very same bodies, session by
session in the same order, with the same concurrency, to the same server. The two arms alternate
``ROUNDS`` times; each process first pays its first uses (one untimed session, one untimed post).

Measured:

- **wall time**, sessions ÷ raw posting, the fastest run of each (target ≤ 1.3);
- **the event loop's longest block**, as a probe task sleeping ``PROBE_INTERVAL_S`` sees it (how
  late it wakes; target: never over 20 ms). Beside it, to say where a block comes from
  (:mod:`_loop_probes`): the longest stretch any session ran without yielding, with and without
  the cyclic garbage collector's pauses inside it; the longest stretch of one warm session with
  the loop to itself; every collection's pause; a full collection at rest before and after the
  run. The raw process runs the same probes;
- **peak RSS per session**: the process's peak resident size (``VmHWM``) less its size before the
  sessions started (their pre-generated tool results already counted), ÷ sessions;
- **nothing lost**: every session completes its turns, and the simulator's exact loss ledger
  (:func:`simulator.research.retention.chars_lost`) finds every original piece of each
  conversation in its final history or its archive (0 chars lost).

The bodies are spooled with one ``os.writev`` per request to a tmpfs inside the timed run (its time
is reported; it counts against the sessions). Run it with ``python bench/bench_async.py``
(``--quick``: fewer sessions, one round); ``run()`` returns the measures.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import multiprocessing
import os
import random
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import _histories
import httpx
from _loop_probes import GcPauses, LoopLag, Steps, status_kb
from bench_sizing import WORDS

from ctxrecover.archive import MemoryArchive
from ctxrecover.messages import Message, ToolCall
from ctxrecover.session import AsyncSession
from ctxrecover.transport import AsyncHttpxSender, ChatRequest
from simulator.providers.mock import MockProvider, ParsedRequest, Reply
from simulator.proxy.loopback import LoopbackServer
from simulator.proxy.middlebox import Middlebox
from simulator.proxy.scenario import load_scenario
from simulator.research.retention import chars_lost

SCENARIO = "corporate-128k-waf"
SESSIONS = 256
TURNS = 40
QUICK_SESSIONS = 32
ROUNDS = 2
SEED = 8
SYSTEM_CHARS = 30_000
TASK_CHARS = 600
RESULT_CHARS = 2_900  # under microcompact_min_content: the turn passes keep each whole
REPLY_TEXT = "Reading the next file."
PROBE_INTERVAL_S = 0.005
TIMEOUT_S = 300.0
START_TIMEOUT_S = 60.0
TARGET_RATIO = 1.3
TARGET_LAG_MS = 20.0
KEEP_RECORDS = 32
# The spool in memory where there is a tmpfs (a disk's write-back would stall the sessions' writes).
SPOOL_DIR = "/dev/shm" if os.path.isdir("/dev/shm") else None
HEADERS = {"content-type": "application/json"}
SPAWN = multiprocessing.get_context("spawn")  # fresh processes: no state (or memory) from the caller


# -- the server --------------------------------------------------------------------------------------


def _next_file(request: ParsedRequest) -> Reply:
    """The model's every reply: a short text and a tool call reading the next file."""
    path = json.dumps({"path": f"src/module_{request.call_index % 97}.py"})
    return Reply(REPLY_TEXT, (ToolCall("", "read_file", path),))


def _serve(scenario_name: str, max_connections: int, conn: Connection) -> None:
    """The scenario's mock provider behind its faults on 127.0.0.1, until ``conn`` says stop."""
    scenario = load_scenario(scenario_name)
    spec = scenario.provider
    provider = MockProvider(
        spec.format,
        context_window=spec.context_window,
        script=_next_file,
        max_output_tokens_cap=spec.max_output_tokens_cap,
        seed=scenario.seed,
        keep_calls=KEEP_RECORDS,  # the server's memory stays bounded: its counters count everything
    )
    box = Middlebox(provider, scenario.faults, seed=scenario.seed, keep_rejections=KEEP_RECORDS)
    with LoopbackServer(box, host="127.0.0.1", max_connections=max_connections) as server:
        conn.send(server.base_url)
        conn.recv()


@contextmanager
def gateway(max_connections: int, scenario: str = SCENARIO) -> Iterator[str]:
    """The gateway in a process of its own, for the ``with`` block: its base URL."""
    ours, theirs = SPAWN.Pipe()
    process = SPAWN.Process(target=_serve, args=(scenario, max_connections, theirs), daemon=True)
    process.start()
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ours.poll(0.1):
            if not process.is_alive():
                raise RuntimeError(f"the gateway process exited ({process.exitcode}) before it was ready")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the gateway process did not start within {START_TIMEOUT_S:g} s")
        yield ours.recv()
    finally:
        if process.is_alive():
            ours.send(None)
            process.join(10)
        if process.is_alive():
            process.terminate()
            process.join()


# -- clients ---------------------------------------------------------------------------------------


def _client() -> httpx.AsyncClient:
    """One session's client (a pool shared by hundreds of connections costs each request a scan of
    them all in httpcore: both arms give each session its own client, as AsyncHttpxSender does), built
    without a TLS trust store (plain HTTP on 127.0.0.1; loading one costs ~50 ms a client)."""
    transport = httpx.AsyncHTTPTransport(verify=False)
    return httpx.AsyncClient(transport=transport, timeout=TIMEOUT_S, trust_env=False)


# -- the sessions ------------------------------------------------------------------------------------


class Spool:
    """Appends each posted body to a file and remembers where, per session, for the baseline.

    The writes go to memory (a tmpfs, :data:`SPOOL_DIR`) on the sessions' loop: :attr:`seconds` is
    what they cost the sessions (a writer thread cost them more, in handing the GIL back and forth).
    """

    def __init__(self, path: Path, sessions: int) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        self.index: list[list[tuple[int, int]]] = [[] for _ in range(sessions)]
        self._offset = 0
        self.seconds = 0.0

    def write(self, session: int, chunks: list[bytes]) -> None:
        started = time.perf_counter()
        size = os.writev(self._fd, chunks)
        self.index[session].append((self._offset, size))
        self._offset += size
        self.seconds += time.perf_counter() - started

    def close(self) -> None:
        os.close(self._fd)


class SpoolingSender(AsyncHttpxSender):
    """An ``AsyncHttpxSender`` that spools every body it posts (for the raw baseline)."""

    def __init__(self, spool: Spool, session: int, **options: Any) -> None:
        super().__init__(**options)
        self._spool, self._session = spool, session

    def render_chunks(self, request: ChatRequest) -> list[bytes]:
        chunks = super().render_chunks(request)
        self._spool.write(self._session, chunks)
        return chunks


def agent_inputs(seed: int, turns: int) -> tuple[str, str, list[str]]:
    """A session's system prompt, its task and one tool result per later turn (seeded)."""
    rng = random.Random(seed)
    text = _histories.random_text
    results = [text(rng, RESULT_CHARS, WORDS) for _ in range(turns - 1)]
    return text(rng, SYSTEM_CHARS, WORDS), text(rng, TASK_CHARS, WORDS), results


class AgentRun:
    """One agent session of the sessions' arm: the session, its store and every original message."""

    def __init__(self, sender: AsyncHttpxSender, inputs: tuple[str, str, list[str]]) -> None:
        system, self.task, self.results = inputs
        self.archive = MemoryArchive()
        self.session = AsyncSession(sender, archive=self.archive, history=[Message.system(system)])
        self.original: list[Message] = self.session.history
        self.turns = 0

    async def run(self) -> None:
        """The task, then a tool result for each tool call the model makes, one turn each."""
        session, original = self.session, self.original
        for result in [None, *self.results]:
            if result is None:
                original.append(Message.user(self.task))
            else:
                call = original[-1].tool_calls[0]
                original.append(Message.tool(call.id, result, name=call.name))
            session.add(original[-1])
            original.append(await session.complete())
            self.turns += 1

    def outcome(self) -> dict[str, Any]:
        """What the session did, and the chars of its conversation neither its history nor its archive
        gives back (the exact loss ledger; computed after the timed run)."""
        session = self.session
        return {
            "turns": self.turns,
            "lost": chars_lost(self.original, session.history, self.archive),
            "requests": session.stats.requests,
            "rejected": session.stats.rejected_requests,
            "compactions": session.stats.compactions,
            "learned_cap": session.learned_cap,
        }


def _full_collection() -> float:
    """Seconds one full collection of the cyclic garbage collector takes now."""
    started = time.perf_counter()
    gc.collect()
    return time.perf_counter() - started


def session_arm(url: str, spool_path: str, sessions: int, turns: int, seed: int) -> dict[str, Any]:
    """The sessions' run (in a fresh process): wall time, loop lag, RSS and what each session did."""
    return asyncio.run(_session_arm(url, Path(spool_path), sessions, turns, seed))


async def _session_arm(url: str, spool_path: Path, sessions: int, turns: int, seed: int) -> dict[str, Any]:
    scenario = load_scenario(SCENARIO)
    spool = Spool(spool_path, sessions)
    clients = [_client() for _ in range(sessions)]
    agents = [
        AgentRun(
            SpoolingSender(
                spool,
                index,
                wire_format=scenario.provider.format,
                base_url=url,
                model=scenario.provider.model,
                client=clients[index],
            ),
            agent_inputs(seed + index, turns),
        )
        for index in range(sessions)
    ]
    alone = Steps()  # one session with the loop to itself, once first uses (lazy imports) are paid
    async with _client() as client:
        for run in range(2):
            sender = AsyncHttpxSender(
                scenario.provider.format, base_url=url, model=scenario.provider.model, client=client
            )
            agent = AgentRun(sender, agent_inputs(seed - 1 - run, turns)).run()
            await (alone.timed(agent) if run else agent)
    full_gc_before = _full_collection()
    rss_before, tracked_before = status_kb("VmRSS"), len(gc.get_objects())
    with GcPauses() as pauses:
        probe, steps = LoopLag(PROBE_INTERVAL_S, threshold=TARGET_LAG_MS / 1e3), Steps(pauses)
        probe_task = asyncio.create_task(probe.run())
        started, cpu = time.perf_counter(), time.process_time()
        done = await asyncio.gather(*(steps.timed(agent.run()) for agent in agents), return_exceptions=True)
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        probe.stop()
        await probe_task
    peak, rss_after = status_kb("VmHWM"), status_kb("VmRSS")
    full_gc_after = _full_collection()  # with every session still alive
    tracked = len(gc.get_objects()) - tracked_before  # what the collector traverses for the live sessions
    for client in clients:
        await client.aclose()
    spool.close()
    with open(spool_path.with_suffix(".json"), "w", encoding="utf-8") as index_file:
        json.dump(spool.index, index_file)
    sizes = [size for bodies in spool.index for _, size in bodies]
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "loop_lag": probe.summary(),
        "steps": steps.summary(),
        "alone_longest_ms": alone.longest * 1e3,
        "gc": pauses.summary(),
        "rss_before_mb": rss_before / 1024,
        "peak_rss_mb": peak / 1024,
        "rss_after_mb": rss_after / 1024,
        "spool_s": spool.seconds,
        "gc_tracked_objects": tracked,
        "full_gc_ms": {"before": full_gc_before * 1e3, "after": full_gc_after * 1e3},
        "requests": len(sizes),
        "body_bytes": sum(sizes),
        "largest_body": max(sizes),
        "failures": [f"{type(d).__name__}: {d}" for d in done if isinstance(d, BaseException)],
        "rejected": sum(agent.session.stats.rejected_requests for agent in agents),
        "compactions": sum(agent.session.stats.compactions for agent in agents),
        "caps_learned": sum(agent.session.learned_cap is not None for agent in agents),
        "sessions": [agent.outcome() for agent in agents],
    }


# -- the baseline ------------------------------------------------------------------------------------


def raw_arm(url: str, spool_path: str) -> dict[str, Any]:
    """The baseline's run (in a fresh process): the spooled bodies posted by raw ``httpx.AsyncClient``."""
    return asyncio.run(_raw_arm(url, Path(spool_path)))


async def _raw_arm(url: str, spool_path: Path) -> dict[str, Any]:
    scenario = load_scenario(SCENARIO)
    with open(spool_path.with_suffix(".json"), encoding="utf-8") as index_file:
        index: list[list[tuple[int, int]]] = json.load(index_file)
    endpoint = AsyncHttpxSender(scenario.provider.format, base_url=url, model=scenario.provider.model).url
    fd = os.open(spool_path, os.O_RDONLY)
    clients = [_client() for _ in index]
    statuses: dict[int, int] = {}
    offset, size = index[0][0]
    await clients[0].post(endpoint, content=os.pread(fd, size, offset), headers=HEADERS)  # first uses
    full_gc = _full_collection()

    async def post(client: httpx.AsyncClient, bodies: list[tuple[int, int]]) -> None:
        for offset, size in bodies:
            response = await client.post(endpoint, content=os.pread(fd, size, offset), headers=HEADERS)
            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1

    with GcPauses() as pauses:
        probe, steps = LoopLag(PROBE_INTERVAL_S, threshold=TARGET_LAG_MS / 1e3), Steps(pauses)
        probe_task = asyncio.create_task(probe.run())
        started, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(
            *(steps.timed(post(client, bodies)) for client, bodies in zip(clients, index, strict=True))
        )
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        probe.stop()
        await probe_task
    for client in clients:
        await client.aclose()
    os.close(fd)
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "loop_lag": probe.summary(),
        "steps": steps.summary(),
        "gc": pauses.summary(),
        "statuses": statuses,
        "full_gc_ms": full_gc * 1e3,
    }


# -- the benchmark -----------------------------------------------------------------------------------


def _in_fresh_process(function: Any, *args: Any) -> dict[str, Any]:
    with ProcessPoolExecutor(1, mp_context=SPAWN) as pool:
        return pool.submit(function, *args).result()  # type: ignore[no-any-return]


def run(
    *, sessions: int = SESSIONS, turns: int = TURNS, rounds: int = ROUNDS, seed: int = SEED
) -> dict[str, Any]:
    """Both arms against one gateway, alternated ``rounds`` times: the ratio of their fastest runs, the
    loop lag and RSS per session at their worst over every round, and the losses."""
    ours: list[dict[str, Any]] = []
    raw: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory(prefix="ctxrecover-p8-", dir=SPOOL_DIR) as tmp,
        gateway(4 * sessions) as url,
    ):
        spool = str(Path(tmp) / "bodies.bin")
        for _ in range(rounds):
            ours.append(_in_fresh_process(session_arm, url, spool, sessions, turns, seed))
            raw.append(_in_fresh_process(raw_arm, url, spool))
    outcomes = [outcome for run in ours for outcome in run.pop("sessions")]
    completed = sum(o["turns"] == turns for o in outcomes)
    lost = sum(o["lost"] for o in outcomes)
    failures = [failure for run in ours for failure in run["failures"]]
    exchanges = [
        sum(theirs["statuses"].values()) == mine["requests"]
        and theirs["statuses"].get(403, 0) == mine["rejected"]
        for mine, theirs in zip(ours, raw, strict=True)
    ]
    ratio = min(r["wall_s"] for r in ours) / min(r["wall_s"] for r in raw)
    lag = max(r["loop_lag"]["max_ms"] for r in ours)
    rss = max((r["peak_rss_mb"] - r["rss_before_mb"]) / sessions for r in ours)
    nothing_lost = completed == sessions * rounds and lost == 0 and not failures
    return {
        "benchmark": f"P8 {sessions} AsyncSessions × {turns} turns vs raw httpx.AsyncClient, same bodies",
        "scenario": SCENARIO,
        "sessions": sessions,
        "turns": turns,
        "rounds": rounds,
        "ratio": ratio,
        "loop_lag_max_ms": lag,
        "rss_per_session_mb": rss,
        "completed_sessions": completed,
        "chars_lost": lost,
        "failures": failures,
        "same_exchanges": all(exchanges),  # the baseline posted as many bodies and met as many WAF pages
        "sessions_runs": ours,
        "raw_runs": raw,
        "nothing_lost": nothing_lost,
        "target_ratio": TARGET_RATIO,
        "target_lag_ms": TARGET_LAG_MS,
        "passed": {
            "ratio": ratio <= TARGET_RATIO,
            "loop_lag": lag <= TARGET_LAG_MS,
            "nothing_lost": nothing_lost,
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help=f"{QUICK_SESSIONS} sessions instead of {SESSIONS}"
    )
    parser.add_argument("--sessions", type=int, help="how many concurrent sessions")
    args = parser.parse_args(argv)
    r = run(
        sessions=args.sessions or (QUICK_SESSIONS if args.quick else SESSIONS),
        rounds=1 if args.quick else ROUNDS,
    )
    print(json.dumps(r, indent=2, default=str))
    return 0 if all(r["passed"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
