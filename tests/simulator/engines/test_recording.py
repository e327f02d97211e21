"""Recording a real engine through ``ctxsim proxy --record`` and inferring it reproduces it exactly.

Each engine is recorded with a few sizes around its cap and one of 4 MB (with and without bodies):
the proxy relays every answer the engine gave (no invented reset), ``ctxsim infer`` names the
engine's own page from its shape and reproduces every recorded outcome, and the scenario it writes
runs green under ``ctxsim run`` (its workload reaches the inferred cap).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from simulator.cli.app import main
from simulator.engines import Engine
from simulator.engines.capture import CHAT_PATH, chat_body
from simulator.proxy.infer import infer_scenario, load_recording, scenario_toml
from simulator.proxy.journal import RECORD_FORMAT, JsonLines, record_entry
from simulator.proxy.loopback import TURN_HEADER, LoopbackServer

KIB128 = 128 * 1024
# (engine, knobs, the largest body it lets through, the bundled page it answers with above it)
RECORDED: tuple[tuple[str, dict[str, Any], int, str], ...] = (
    ("nginx", {"body_cap": KIB128}, KIB128, "body-cap/nginx"),
    ("haproxy", {"body_cap": KIB128}, KIB128, "body-cap/haproxy"),
    ("squid", {"body_cap": KIB128}, KIB128, "body-cap/squid"),
    ("caddy", {"body_cap": 128_000}, 128_000, "body-cap/caddy"),
    ("apache-modsecurity", {"body_cap": KIB128}, KIB128 - 1, "body-cap/apache"),
    ("nginx-modsecurity", {"body_cap": KIB128}, KIB128, "waf-403-html/nginx-modsecurity"),
)


def _record(engine: Engine, path: Path, sizes: list[int], *, bodies: bool) -> list[int | None]:
    """Send one request per size through a recording proxy in front of ``engine``; the statuses seen."""
    writer = JsonLines(path, {"format": RECORD_FORMAT, "upstream": engine.url, "record_bodies": bodies})
    proxy = LoopbackServer(
        None,
        upstream=engine.url,
        record_bodies=bodies,
        on_exchange=lambda r, t: writer.write(record_entry(r, t)),
    )
    statuses: list[int | None] = []
    with proxy, httpx.Client(trust_env=False, timeout=60) as client:
        for turn, size in enumerate(sizes, start=1):
            headers = {"content-type": "application/json", TURN_HEADER: str(turn)}
            try:
                statuses.append(
                    client.post(
                        proxy.base_url + CHAT_PATH, content=chat_body(size), headers=headers
                    ).status_code
                )
            except httpx.TransportError:
                statuses.append(None)
    writer.close()
    return statuses


@pytest.mark.slow
@pytest.mark.parametrize("bodies", [False, True], ids=["shapes", "bodies"])
@pytest.mark.parametrize(("name", "knobs", "passes_up_to", "page"), RECORDED, ids=[r[0] for r in RECORDED])
def test_a_recorded_engine_is_reproduced_exactly_and_its_scenario_runs_green(
    name: str,
    knobs: dict[str, Any],
    passes_up_to: int,
    page: str,
    bodies: bool,
    start_engine: Callable[..., Engine],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    engine = start_engine(name, **knobs)
    sizes = [
        1024,
        64 * 1024,
        passes_up_to - 1024,
        passes_up_to,
        passes_up_to + 1,
        passes_up_to + 1024,
        4_000_000,
    ]
    statuses = _record(engine, tmp_path / "gateway.jsonl", sizes, bodies=bodies)
    assert None not in statuses, f"the proxy turned an answer into a dropped connection: {statuses}"
    assert statuses[:4] == [200] * 4 and len(set(statuses[4:6])) == 1 and statuses[4] != 200
    assert statuses[6] == statuses[4], "4 MB gets the same answer as one byte over the cap"
    _, observed = load_recording(tmp_path / "gateway.jsonl")
    assert {o.group for o in observed} == {"pass", f"{statuses[4]}:{page}"}
    inference = infer_scenario(observed)
    assert (inference.reproduced, inference.total, inference.notes) == (len(sizes), len(sizes), [])
    scenario = tmp_path / "gateway.toml"
    scenario.write_text(scenario_toml(inference, source="gateway.jsonl"), encoding="utf-8")
    if bodies:
        return  # the same scenario as from shapes alone; one run of it is enough
    assert main(["run", "--scenarios", str(scenario), "--out", str(tmp_path / "run"), "--json"]) == 0, (
        scenario.read_text(encoding="utf-8")
    )
    assert json.loads(capsys.readouterr().out)["expectations_met"] is True
