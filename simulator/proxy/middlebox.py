"""Proxy, gateway and WAF fault models in front of an upstream handler.

A :class:`Middlebox` wraps any ``handler(request) -> httpx.Response`` (a
:class:`~simulator.providers.mock.MockProvider`, another middlebox) with a list of
faults. For each request it decides, as data, what the middlebox does:

- :class:`Forward` — pass the request to the upstream;
- :class:`Respond` — answer itself (413 / 431 / 403 HTML pages, 429);
- a :class:`ConnectionFault` — :class:`ResetAfter`, :class:`CloseAfterBody`,
  :class:`SlowClose`, :class:`IdleTimeout`.

``decide(request, turn)`` returns that decision, so the loopback TCP server can
really reset or close the socket; calling the middlebox in-process acts on it
and raises the httpx transport error a client would see (``ReadError`` on a
reset, ``RemoteProtocolError`` on a close without response, ``ReadTimeout``).
``decide_headers(method, path, headers, content_length, turn)`` decides from the
request head alone when the first fault that can fire only needs the declared
size (:class:`BodyCap`, :class:`HeaderCap`, :class:`ResetAfter`): the loopback
server then answers before reading the body, or resets mid-POST after
``n_bytes``, while the client is still sending.

The first fault whose conditions hold fires: ``from_turn`` ≤ turn ≤
``until_turn``, request body ≥ ``min_bytes``, the fault's own trigger (body or
headers over a limit), then a ``probability`` draw from the middlebox's own
``random.Random(seed)``. Shaping faults (latency, bandwidth, a cut stream) that fire
on the way all apply: they shape the forwarded answer, or delay the page.

Faults have names (their kind, ``kind-2``… on a clash, or the name given) and can be
added, replaced and removed while the middlebox serves (:meth:`Middlebox.add_fault`,
toxiproxy-style; :mod:`simulator.proxy.admin` exposes them over HTTP).

Pages live in ``fixtures/pages/`` and keep the real fingerprints (titles, Cloudflare
Ray ID, Akamai reference, F5 support ID); their ids are drawn from the seed too.

>>> from simulator.proxy.faults import WafBlock
>>> upstream = lambda request: httpx.Response(200, json={"ok": True})
>>> box = Middlebox(upstream, [WafBlock(129 * 1024, page="cloudflare")], seed=7)
>>> client = httpx.Client(transport=httpx.MockTransport(box))
>>> client.post("http://mock/v1/messages", content=b"x" * 101 * 1024).status_code
200
>>> client.post("http://mock/v1/messages", content=b"x" * 129 * 1024).status_code
403
>>> box.rejections[0].kind
'waf-403-html'
"""

from __future__ import annotations

import dataclasses
import random
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, MutableSequence
from dataclasses import dataclass

import httpx

from simulator.proxy.fault_base import FORWARD, ConnectionFault, Decision, Fault, Forward, Respond
from simulator.proxy.faults import CF_ID_ALPHABET, HEX_DIGITS, head_url
from simulator.proxy.shaping import ShapingFault, shape_in_process

__all__ = ["Handler", "Middlebox", "Rejection"]


@dataclass(frozen=True, slots=True)
class Rejection:
    """One request the middlebox did not forward (``name``: the fault that fired)."""

    turn: int
    kind: str
    request_bytes: int
    decision: Respond | ConnectionFault
    name: str = ""

    @property
    def status(self) -> int | None:
        """The HTTP status answered, or None when the connection was dropped."""
        return self.decision.status if isinstance(self.decision, Respond) else None


Handler = Callable[[httpx.Request], httpx.Response]


class Middlebox:
    """A chain of faults in front of ``upstream``, itself a handler.

    ``turn_of(request)`` gives a request's 1-based turn; by default each
    request is the next turn (retries included). ``sleep`` is used by
    :class:`SlowClose`, :class:`IdleTimeout`, gateway timeouts and shaping
    in-process. ``upstream`` may be None when only :meth:`decide` is used (e.g.
    in front of a real URL). ``keep_rejections`` bounds :attr:`rejections` to the
    last N (None keeps all); :attr:`rejected` counts every rejection by kind.
    """

    def __init__(
        self,
        upstream: Handler | None,
        faults: Iterable[Fault] = (),
        *,
        seed: int = 0,
        sleep: Callable[[float], object] = time.sleep,
        turn_of: Callable[[httpx.Request], int] | None = None,
        keep_rejections: int | None = None,
    ) -> None:
        self.upstream = upstream
        self._lock = threading.Lock()
        self._named: tuple[tuple[str, Fault], ...] = ()
        for fault in faults:
            self.add_fault(fault)
        self.rejections: MutableSequence[Rejection] = (
            [] if keep_rejections is None else deque(maxlen=keep_rejections)
        )
        self.rejected: Counter[str] = Counter()
        self.requests = 0
        self.forwarded = 0
        self._sleep = sleep
        self._turn_of = turn_of
        self._draws = random.Random(seed)
        self._ids = random.Random(f"ctxsim-page-ids:{seed}")

    # -- the faults, by name (safe to change while serving) ----------------------------

    @property
    def faults(self) -> tuple[Fault, ...]:
        """The faults in the order they are tried."""
        return tuple(fault for _, fault in self._named)

    @property
    def named_faults(self) -> tuple[tuple[str, Fault], ...]:
        """``(name, fault)`` pairs in the order they are tried."""
        return self._named

    def add_fault(self, fault: Fault, name: str | None = None) -> str:
        """Append ``fault`` (tried last) under ``name`` (default: its kind, ``kind-2``…); returns the name."""
        if not isinstance(fault, Fault):
            raise TypeError(f"Middlebox faults must be Fault instances, got {fault!r}")
        with self._lock:
            taken = {existing for existing, _ in self._named}
            if name is None:
                name = fault.kind
                number = 1
                while name in taken:
                    number += 1
                    name = f"{fault.kind}-{number}"
            elif name in taken:
                raise KeyError(f"a fault named {name!r} exists; remove it first or replace it")
            self._named = (*self._named, (name, fault))
        return name

    def replace_fault(self, name: str, fault: Fault) -> None:
        """Put ``fault`` in the place of the fault named ``name`` (KeyError when there is none)."""
        if not isinstance(fault, Fault):
            raise TypeError(f"Middlebox faults must be Fault instances, got {fault!r}")
        with self._lock:
            if name not in dict(self._named):
                raise KeyError(self._unknown(name))
            self._named = tuple((n, fault if n == name else f) for n, f in self._named)

    def remove_fault(self, name: str) -> Fault:
        """Remove the fault named ``name`` and return it (KeyError when there is none)."""
        with self._lock:
            faults = dict(self._named)
            if name not in faults:
                raise KeyError(self._unknown(name))
            self._named = tuple((n, f) for n, f in self._named if n != name)
            return faults[name]

    def _unknown(self, name: str) -> str:
        return f"no fault named {name!r}; faults: {', '.join(n for n, _ in self._named) or 'none'}"

    def clear_faults(self) -> None:
        """Remove every fault (toxiproxy's reset): from now on everything is forwarded."""
        with self._lock:
            self._named = ()

    def name_of(self, fault: Fault) -> str:
        """The name of ``fault`` (the first equal one), or its kind when it is not in the middlebox."""
        return next((name for name, f in self._named if f == fault), fault.kind)

    # -- deciding -----------------------------------------------------------------------

    def decide(self, request: httpx.Request, turn: int | None = None) -> Decision:
        """What the middlebox does with ``request`` (counts it; records a rejection)."""
        self.requests += 1
        if turn is None:
            turn = self._turn_of(request) if self._turn_of else self.requests
        body_bytes = len(request.read())
        forward = FORWARD
        for name, fault in self._named:
            if self._fires(fault, request, body_bytes, turn):
                if isinstance(fault, ShapingFault):
                    forward = fault.shape(forward, name, self._draws.random)
                    continue
                return self._reject(name, fault, request, body_bytes, turn, forward)
        return forward

    def decide_headers(
        self,
        method: str,
        path: str,
        headers: Iterable[tuple[str, str]] | Mapping[str, str],
        content_length: int | None,
        turn: int | None = None,
    ) -> Respond | ConnectionFault | None:
        """What the middlebox does as soon as the request head is in, or None to wait for the body.

        Faults are walked in order as :meth:`decide` walks them, sized by the
        declared ``content_length``. When the first one that fires acts at the
        head (``at_headers``: a body cap, a header cap, a reset after N bytes), its
        decision is returned, counted and recorded like :meth:`decide`'s (with the
        latency of shaping faults that fired before it). Otherwise — a fault that
        may fire needs the body, nothing fires, or the length is unknown (chunked) —
        the answer is None and nothing is counted or drawn, so :meth:`decide` on the
        full request then decides exactly as it would have.
        """
        if content_length is None or not self._named:
            return None
        pairs = list(headers.items() if isinstance(headers, Mapping) else headers)
        request = httpx.Request(method, head_url(path, pairs), headers=pairs)
        if turn is None:
            turn = self._turn_of(request) if self._turn_of else self.requests + 1
        draws = self._draws.getstate()
        forward = FORWARD
        for name, fault in self._named:
            if not fault.at_headers:
                if fault.gated_in(content_length, turn) and fault.probability > 0.0:
                    break  # it may fire once the body is in: only decide() can tell
                continue
            if self._fires(fault, request, content_length, turn):
                if isinstance(fault, ShapingFault):
                    forward = fault.shape(forward, name, self._draws.random)
                    continue
                self.requests += 1
                return self._reject(name, fault, request, content_length, turn, forward)
        self._draws.setstate(draws)  # decide() redraws the same numbers
        return None

    def _fires(self, fault: Fault, request: httpx.Request, body_bytes: int, turn: int) -> bool:
        if not fault.applies(request, body_bytes, turn) or fault.probability <= 0.0:
            return False
        return fault.probability >= 1.0 or self._draws.random() < fault.probability

    def _reject(
        self, name: str, fault: Fault, request: httpx.Request, body_bytes: int, turn: int, forward: Forward
    ) -> Respond | ConnectionFault:
        decision = fault.action(request, self._page_ids(request))
        if isinstance(decision, Respond):
            decision = dataclasses.replace(
                decision, delay_s=decision.delay_s + forward.latency_s, applied=(name, *forward.applied)
            )
        self.rejections.append(Rejection(turn, fault.kind, body_bytes, decision, name))
        self.rejected[fault.kind] += 1
        return decision

    def __call__(self, request: httpx.Request) -> httpx.Response:
        decision = self.decide(request)
        if isinstance(decision, Respond):
            if decision.delay_s > 0:
                self._sleep(decision.delay_s)
            return decision.to_response(request)
        if isinstance(decision, ConnectionFault):
            decision.raise_in_process(request, self._sleep)
        if self.upstream is None:
            raise RuntimeError("Middlebox has no upstream to forward to; pass upstream= or use decide()")
        self.forwarded += 1
        return shape_in_process(self.upstream(request), decision, self._sleep)

    def _page_ids(self, request: httpx.Request) -> dict[str, str]:
        rng = self._ids
        stamp = 1_700_000_000 + rng.randrange(10**8)
        reference = f"18.{rng.getrandbits(32):08x}.{stamp}.{rng.getrandbits(32):08x}"
        transaction = (
            f"{rng.getrandbits(32):08x}-{rng.getrandbits(16):04x}-4{rng.getrandbits(12):03x}-"
            f"8{rng.getrandbits(12):03x}-{rng.getrandbits(48):012x}"
        )
        return {
            "host": request.url.host,
            "path": request.url.path,
            "client_ip": "127.0.0.1",
            "ray_id": "".join(rng.choice(HEX_DIGITS) for _ in range(16)),
            "reference": reference,
            "support_id": str(rng.randrange(10**18, 10**19)),
            "cf_id": "".join(rng.choice(CF_ID_ALPHABET) for _ in range(56)),
            "transaction_id": transaction,
        }
