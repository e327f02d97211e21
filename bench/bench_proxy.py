"""Proxy — ``ctxsim proxy`` under load: throughput against direct access, memory, slow clients.

Standalone (not in ``bench/run.py``): every measure runs the real command (``python -m simulator
proxy``) in its own process:

- **throughput**: N keep-alive clients POST a 4 KB JSON body in a loop to a local upstream
  (a minimal asyncio HTTP server in another process) that answers 2 KB of JSON after a think
  time; requests per second *direct* and *through the proxy* (``--upstream http://…``, no fault),
  measured alternately, the best of ``ROUNDS`` each, at 50 and 200 clients. The think time is
  0.5 s (an LLM answers in seconds; the issue's own example) — target: proxied ÷ direct ≥ 0.8 at
  50 clients — and 50 ms, where the proxy's own CPU (reported per request) is the bottleneck.
- **memory**: the proxy in front of ``mock:openai`` answering 10,000 requests of 200 KB
  (16 clients); its resident memory (RSS) after 1,000, 2,500, 5,000 and 10,000 requests.
  Flat means bounded (the mock keeps its last calls, the server its last records).
- **slow clients**: 64 clients trickle one byte every 2 s — 32 in their request head, 32 in their
  body — while 8 normal clients keep sending for ``SLOW_SECONDS``: the normal clients' answers
  (200s, 503s) and latency, and when the slow connections were cut (head deadline, body minimum
  rate). Run with the default connection limit and with ``--max-connections 64``, where the
  slow clients alone fill every slot.

Run it with ``python bench/bench_proxy.py`` (``--quick`` for a short pass); ``run()`` returns the
measures. The load generator is raw asyncio sockets, so the clients cost little next to what is measured.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
UPSTREAM_DELAYS_S = (0.5, 0.05)  # a provider's think time; the first is the target's
REQUEST_BYTES = 4 * 1024
ANSWER_BYTES = 2 * 1024
CLIENT_COUNTS = (50, 200)
ROUNDS = 2
SECONDS = 5.0
MEMORY_REQUESTS = 10_000
MEMORY_CHECKPOINTS = (1_000, 2_500, 5_000, 10_000)
MEMORY_BODY_BYTES = 200 * 1024
MEMORY_CLIENTS = 16
SLOW_CLIENTS = 64
NORMAL_CLIENTS = 8
SLOW_SECONDS = 25.0
TRICKLE_S = 2.0
SLOW_HEAD_START_S = 2.0
TARGET_RATIO = 0.8


# -- the processes ------------------------------------------------------------------------------


async def _upstream_server(delay: float) -> None:
    """A minimal keep-alive HTTP server: reads each request, waits ``delay``, answers a fixed JSON."""
    body = json.dumps({"id": "x", "choices": [{"message": {"content": "y" * (ANSWER_BYTES - 60)}}]}).encode()
    answer = (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body) + body
    )

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ),
                    0,
                )
                await reader.readexactly(length)
                await asyncio.sleep(delay)
                writer.write(answer)
                await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=2048)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()


@contextmanager
def _process(argv: list[str], ready: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A child process, with the first stdout line containing ``ready``."""
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    process = subprocess.Popen(
        [sys.executable, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=REPO,
    )
    output = process.stdout
    assert output is not None
    drain = threading.Thread(target=lambda: [None for _ in output], daemon=True)
    try:
        line = output.readline()
        while ready not in line:
            if not line:
                raise RuntimeError(f"{' '.join(argv)} exited before it was ready")
            line = output.readline()
        drain.start()  # keep reading what it prints: a full pipe must not be what slows it down
        yield process, line
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if drain.is_alive():
            drain.join(10)  # the pipe ends with the process
        output.close()


@contextmanager
def upstream(delay: float = UPSTREAM_DELAYS_S[0]) -> Iterator[int]:
    with _process([__file__, "--upstream-server", str(delay)], "") as (_, line):
        yield int(line)


@contextmanager
def proxy(*argv: str) -> Iterator[tuple[int, int]]:
    """``ctxsim proxy`` in a child process: (its port, its pid)."""
    command = ["-m", "simulator", "proxy", "--listen", "127.0.0.1:0", *argv]
    with _process(command, "listening on") as (p, line):
        yield int(line.split("listening on http://127.0.0.1:")[1].split()[0]), p.pid


# -- the load ----------------------------------------------------------------------------------


def _request(body: bytes, path: str = "/v1/chat/completions") -> bytes:
    head = (
        f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def chat_body(size: int) -> bytes:
    """An OpenAI chat request of exactly ``size`` bytes."""
    empty = len(json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": ""}]}))
    content = "x" * (size - empty)
    return json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": content}]}).encode()


async def _exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes
) -> tuple[int, bool]:
    """One request on a keep-alive connection: (status, whether the server closes the connection)."""
    writer.write(request)
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.lower().split(b"\r\n")
    length = next((int(line.split(b":")[1]) for line in lines if line.startswith(b"content-length:")), 0)
    await reader.readexactly(length)
    return int(head.split(b" ", 2)[1]), b"connection: close" in lines


async def _load(
    port: int,
    clients: int,
    *,
    seconds: float | None = None,
    requests: int | None = None,
    request: bytes,
    checkpoint: Any = None,
) -> dict[str, Any]:
    """``clients`` keep-alive connections sending ``request`` for ``seconds`` or ``requests`` in all.

    A connection the server closes (after a 503, say) is opened again; a dropped one counts as ``dropped``.
    """
    done: list[int] = []
    latencies: list[float] = []
    statuses: dict[int | str, int] = {}
    end = time.monotonic() + seconds if seconds else float("inf")

    async def client() -> None:
        writer = None
        try:
            while time.monotonic() < end and (requests is None or len(done) < requests):
                if writer is None:
                    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=2**20)
                started = time.monotonic()
                try:
                    status, close = await _exchange(reader, writer, request)
                except (asyncio.IncompleteReadError, ConnectionError):
                    status, close = "dropped", True
                latencies.append(time.monotonic() - started)
                statuses[status] = statuses.get(status, 0) + 1
                done.append(1)
                if checkpoint is not None:
                    checkpoint(len(done))
                if close:
                    writer.close()
                    writer = None
        finally:
            if writer is not None:
                writer.close()

    started = time.monotonic()
    await asyncio.gather(*(client() for _ in range(clients)))
    elapsed = time.monotonic() - started
    return {
        "requests": len(done),
        "seconds": elapsed,
        "rps": len(done) / elapsed,
        "statuses": statuses,
        "p50_ms": statistics.median(latencies) * 1000 if latencies else None,
    }


def measure_throughput(
    clients: int, *, delay: float = UPSTREAM_DELAYS_S[0], seconds: float = SECONDS, rounds: int = ROUNDS
) -> dict[str, Any]:
    """Requests per second direct and through the proxy, alternately; the best round of each.

    Also the proxy's CPU time per request over its rounds (user + system, from psutil).
    """
    import psutil

    request = _request(chat_body(REQUEST_BYTES))
    best = {"direct": 0.0, "proxied": 0.0}
    cpu_s, served = 0.0, 0
    with upstream(delay) as up, proxy("--upstream", f"http://127.0.0.1:{up}") as (port, pid):
        process = psutil.Process(pid)
        for _ in range(rounds):
            for name, target in (("direct", up), ("proxied", port)):
                before = process.cpu_times()
                result = asyncio.run(_load(target, clients, seconds=seconds, request=request))
                best[name] = max(best[name], result["rps"])
                if name == "proxied":
                    after = process.cpu_times()
                    cpu_s += after.user + after.system - before.user - before.system
                    served += result["requests"]
    return {
        "clients": clients,
        "upstream_delay_s": delay,
        "direct_rps": round(best["direct"], 1),
        "proxied_rps": round(best["proxied"], 1),
        "ratio": round(best["proxied"] / best["direct"], 3),
        "proxy_cpu_ms_per_request": round(cpu_s / max(served, 1) * 1000, 3),
    }


def measure_memory(
    *,
    requests: int = MEMORY_REQUESTS,
    checkpoints: tuple[int, ...] = MEMORY_CHECKPOINTS,
    body_bytes: int = MEMORY_BODY_BYTES,
) -> dict[str, Any]:
    """The proxy's RSS (MB) as it answers ``requests`` mock requests of ``body_bytes``."""
    import psutil

    rss: dict[int, float] = {}
    with proxy("--upstream", "mock:openai") as (port, pid):
        process = psutil.Process(pid)
        rss[0] = process.memory_info().rss / 2**20
        pending = list(checkpoints)

        def checkpoint(count: int) -> None:
            if pending and count >= pending[0]:
                rss[pending.pop(0)] = process.memory_info().rss / 2**20

        request = _request(chat_body(body_bytes))
        result = asyncio.run(
            _load(port, MEMORY_CLIENTS, requests=requests, request=request, checkpoint=checkpoint)
        )
    return {
        "requests": result["requests"],
        "body_bytes": body_bytes,
        "statuses": result["statuses"],
        "rss_mb": {str(k): round(v, 1) for k, v in sorted(rss.items())},
        "growth_after_first_checkpoint_mb": round(rss[checkpoints[-1]] - rss[checkpoints[0]], 1),
    }


async def _slow_client(port: int, in_body: bool, trickle_s: float, limit_s: float) -> float | None:
    """Trickle a request (its head, or its body after a whole head); seconds until the proxy cut it.

    None when the connection was still open after ``limit_s``.
    """
    started = time.monotonic()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return 0.0
    head = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 10240\r\n\r\n"
    trickled = b"x" * 10240 if in_body else head
    try:
        if in_body:
            writer.write(head)
        for byte in trickled:
            writer.write(bytes([byte]))
            await writer.drain()
            try:
                await asyncio.wait_for(reader.read(65536), trickle_s)
                return time.monotonic() - started  # the proxy answered (408) or closed: cut
            except TimeoutError:
                pass
            if time.monotonic() - started > limit_s:
                return None
    except ConnectionError:
        return time.monotonic() - started
    finally:
        writer.close()
    return None


def measure_slow_clients(
    *, seconds: float = SLOW_SECONDS, slow: int = SLOW_CLIENTS, extra: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Normal clients' answers while ``slow`` clients trickle their heads and bodies."""
    request = _request(chat_body(REQUEST_BYTES))
    with upstream() as up, proxy("--upstream", f"http://127.0.0.1:{up}", *extra) as (port, _):

        async def scene() -> tuple[dict[str, Any], list[float | None]]:
            trickles = [
                asyncio.create_task(_slow_client(port, i % 2 == 1, TRICKLE_S, seconds)) for i in range(slow)
            ]
            await asyncio.sleep(SLOW_HEAD_START_S)  # the slow clients hold their connections first
            normal = await _load(port, NORMAL_CLIENTS, seconds=seconds, request=request)
            return normal, await asyncio.gather(*trickles)

        normal, cut_after = asyncio.run(scene())
    cut = [t for t in cut_after if t is not None]
    return {
        "options": " ".join(extra) or "defaults",
        "slow_clients": slow,
        "normal_requests": normal["requests"],
        "normal_statuses": normal["statuses"],
        "normal_p50_ms": normal["p50_ms"],
        "slow_cut": len(cut),
        "slow_cut_median_s": round(statistics.median(cut), 1) if cut else None,
        "slow_cut_max_s": round(max(cut), 1) if cut else None,
    }


def run(*, quick: bool = False) -> dict[str, Any]:
    """Every proxy measure (``quick``: shorter, smaller)."""
    seconds, rounds = (2.0, 1) if quick else (SECONDS, ROUNDS)
    throughput = [
        measure_throughput(n, delay=delay, seconds=seconds, rounds=rounds)
        for delay in UPSTREAM_DELAYS_S
        for n in CLIENT_COUNTS
    ]
    memory = measure_memory(requests=1000, checkpoints=(250, 500, 1000)) if quick else measure_memory()
    slow_seconds = 12.0 if quick else SLOW_SECONDS
    slow = [
        measure_slow_clients(seconds=slow_seconds),
        measure_slow_clients(seconds=slow_seconds, extra=("--max-connections", str(SLOW_CLIENTS))),
    ]
    ratio = throughput[0]["ratio"]
    return {
        "benchmark": "Proxy: ctxsim proxy throughput, memory and slow clients",
        "throughput": throughput,
        "memory": memory,
        "slow_clients": slow,
        "target": TARGET_RATIO,
        "passed": ratio >= TARGET_RATIO,
        "machine": {"cpus": os.cpu_count(), "load_average": os.getloadavg()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--upstream-server", type=float, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.upstream_server is not None:
        asyncio.run(_upstream_server(args.upstream_server))
        return 0
    result = run(quick=args.quick)
    print(f"Proxy — ctxsim proxy vs direct, local upstream ({REQUEST_BYTES // 1024} KB requests)")
    for t in result["throughput"]:
        print(
            f"  think {t['upstream_delay_s'] * 1000:>4g} ms, {t['clients']:>4} clients: direct "
            f"{t['direct_rps']:>7.1f} req/s, proxied {t['proxied_rps']:>7.1f} req/s, "
            f"ratio {t['ratio']:.2f}; proxy CPU {t['proxy_cpu_ms_per_request']:.2f} ms/request"
        )
    m = result["memory"]
    print(
        f"  memory: {m['requests']:,} mock requests of {m['body_bytes'] // 1024} KB, RSS MB {m['rss_mb']}, "
        f"growth {m['growth_after_first_checkpoint_mb']} MB; statuses {m['statuses']}"
    )
    for s in result["slow_clients"]:
        print(
            f"  {s['slow_clients']} slow clients ({s['options']}): normal clients got "
            f"{s['normal_statuses']} in {s['normal_requests']} requests (p50 {s['normal_p50_ms']:.0f} ms); "
            f"{s['slow_cut']} slow cut (median {s['slow_cut_median_s']} s, max {s['slow_cut_max_s']} s)"
        )
    print(
        f"ratio at {CLIENT_COUNTS[0]} clients {result['throughput'][0]['ratio']:.2f} "
        f"(target ≥ {TARGET_RATIO}) — {'PASS' if result['passed'] else 'FAIL'}"
    )
    print(json.dumps(result))
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
