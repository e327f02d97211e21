"""Subprocess jobs for test_archive_guarantees.py (each prints what the parent checks).

``python archive_worker.py writer PATH SEED``
    prints ``started``, then puts, ranges and pin changes forever (until SIGKILL), printing ``durable KEY``
    after each put returned and ``pinned OWNER KEY`` after each pin returned.
``python archive_worker.py full PATH``
    a flapping session over an archive on a small file system until three turns
    were refused; prints one JSON line: the errors, whether each left the history
    as it was, the counted refusals, and how many of the history's markers recall.
``python archive_worker.py recall PATH STATE``
    opens PATH as found (read-only when it cannot be written) and prints one JSON
    line: read_only, markers recalled / total, and the error a put raises.
"""

from __future__ import annotations

import importlib.util
import json
import random
import sys
from pathlib import Path
from types import ModuleType

from ctxrecover.archive import DiskArchive, archive_range, extract_keys, recall
from ctxrecover.errors import ArchiveError
from ctxrecover.messages import Message

HERE = Path(__file__).resolve().parent


def _flapping() -> ModuleType:
    spec = importlib.util.spec_from_file_location("flapping", HERE / "flapping.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["flapping"] = module
    spec.loader.exec_module(module)
    return module


def writer(path: Path, seed: int) -> None:
    rng = random.Random(seed)
    store = DiskArchive(path, ttl_seconds=None)
    owners = ["w-a", "w-b"]
    pinned: dict[str, list[str]] = {owner: [] for owner in owners}
    print("started", flush=True)
    n = 0
    while True:
        n += 1
        owner = rng.choice(owners)
        roll = rng.random()
        if roll < 0.45:
            key = store.put(f"{seed}:{n} " + "p" * rng.randint(10, 20_000), owner=owner)
            print("durable", key, flush=True)
        elif roll < 0.8:
            messages = [
                Message.user(f"{seed}:{n}:{i} " + "r" * rng.randint(10, 8000))
                for i in range(rng.randint(1, 5))
            ]
            key = archive_range(store, messages)
            print("durable", key, flush=True)
            store.pin(owner, [key])
            pinned[owner].append(key)
            print("pinned", owner, key, flush=True)
        elif roll < 0.95 and pinned[owner]:
            key = pinned[owner].pop(rng.randrange(len(pinned[owner])))
            store.pin(owner, [], [key])
            print("unpinned", owner, key, flush=True)
        else:
            store.pin(owner, pinned[owner], reset=True)


def full(path: Path) -> None:
    flapping = _flapping()
    store = DiskArchive(path, max_bytes=64 * 2**20)  # the cap is far away: the disk fills first
    result = flapping.run(store, 2000, stop_after_refusals=3)
    session = result.session
    keys = {key for msg in session.history for key in extract_keys(msg.content)}
    report = {
        "turns": result.turns,
        "errors": [f"{type(exc).__name__}: {exc}" for exc in result.errors],
        "unchanged": result.unchanged,
        "refusals_counted": session.stats.archive_refusals,
        "refusal_notices": sum(n.code == "archive_refused" for n in result.notices),
        "markers": len(keys),
        "recalled": sum(not recall(store, key).missing for key in keys),
        "unrecallable": flapping.unrecallable(session.history, store, result.shadow),
    }
    store.close()
    with DiskArchive(path) as reopened:  # a new handle on the full disk reads too
        report["recalled_after_reopen"] = sum(not recall(reopened, key).missing for key in keys)
    print(json.dumps(report), flush=True)


def recall_all(path: Path, state_path: Path) -> None:
    state = json.loads(state_path.read_text(encoding="utf-8"))
    history = [Message.from_dict(d) for d in state["history"]]
    keys = {key for msg in history for key in extract_keys(msg.content)}
    report: dict[str, object] = {"markers": len(keys)}
    with DiskArchive(path) as store:
        report["read_only"] = store.read_only
        report["recalled"] = sum(not recall(store, key).missing for key in keys)
        try:
            store.put("a new entry")
        except ArchiveError as exc:
            report["put_error"] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    command = sys.argv[1]
    if command == "writer":
        writer(Path(sys.argv[2]), int(sys.argv[3]))
    elif command == "full":
        full(Path(sys.argv[2]))
    elif command == "recall":
        recall_all(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        raise SystemExit(f"unknown command {command!r}")
