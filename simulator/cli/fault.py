"""``ctxsim fault``: list, add, replace and remove the faults of a running ``ctxsim proxy --admin``."""

from __future__ import annotations

import argparse
import json
import os
import shlex
from http import HTTPStatus
from typing import Any

import httpx

from simulator.cli.common import EXIT_OK, CliError
from simulator.proxy.redact import redact_url

__all__ = ["register", "run"]

ADMIN_ENV = "CTXSIM_ADMIN"
DESCRIPTION = "Change the faults of a running `ctxsim proxy --admin HOST:PORT` through its admin API."
TIMEOUT_S = 10.0


class AdminRefused(CliError):
    """The admin API answered with an error status (``status``); the message is its ``error``."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


def admin_url(text: str | None) -> str:
    """The admin API's base URL from ``--admin`` (a URL or HOST:PORT) or ``$CTXSIM_ADMIN``."""
    text = text or os.environ.get(ADMIN_ENV)
    if not text:
        raise CliError(
            "--admin is missing: give the proxy's admin address (ctxsim proxy --admin HOST:PORT), "
            f"e.g. --admin 127.0.0.1:8475, or set {ADMIN_ENV}"
        )
    url = text if "://" in text else f"http://{text}"
    parsed = httpx.URL(url)
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise CliError(f"--admin {text!r}: expected HOST:PORT or http://HOST:PORT")
    return url.rstrip("/")


def _call(base: str, method: str, path: str, document: dict[str, Any] | None = None) -> Any:
    try:
        with httpx.Client(trust_env=False, timeout=TIMEOUT_S) as client:
            response = client.request(method, base + path, json=document)
    except httpx.HTTPError as exc:
        raise CliError(
            f"cannot reach the admin API at {redact_url(base)} (is `ctxsim proxy --admin …` "
            f"running?): {type(exc).__name__}: {exc}"
        ) from None
    if response.status_code >= 400:
        try:
            message = response.json()["error"]
        except (ValueError, KeyError, TypeError):
            message = response.text.strip()[:200] or response.reason_phrase
        raise AdminRefused(f"the admin API refused {method} {path}: {message}", status=response.status_code)
    return response.json() if response.content else None


def _command(args: argparse.Namespace, *words: str) -> str:
    """``ctxsim fault WORDS…`` with the ``--admin`` the user gave (none when it came from the environment)."""
    admin = ("--admin", args.admin) if args.admin else ()
    return shlex.join(("ctxsim", "fault", *words, *admin))


def _add(base: str, args: argparse.Namespace) -> None:
    """``fault add``: a name taken (409), or missing with ``--replace`` (404), names the CLI's way out."""
    document: dict[str, Any] = {"name": args.name, "spec": args.spec}
    toxicity = () if args.toxicity is None else ("--toxicity", f"{args.toxicity:g}")
    if args.toxicity is not None:
        document["toxicity"] = args.toxicity
    path = f"/faults/{args.name}" if args.replace else "/faults"
    try:
        fault = _call(base, "POST", path, document)
    except AdminRefused as refused:
        if refused.status == HTTPStatus.CONFLICT and not args.replace:
            replace = _command(args, "add", args.name, args.spec, "--replace", *toxicity)
            remove = _command(args, "remove", args.name)
            raise CliError(
                f"a fault named {args.name!r} already exists on the proxy; replace it in place with "
                f"`{replace}`, or remove it first with `{remove}`"
            ) from None
        if refused.status == HTTPStatus.NOT_FOUND and args.replace:
            add = _command(args, "add", args.name, args.spec, *toxicity)
            raise CliError(
                f"no fault named {args.name!r} to replace on the proxy (`{_command(args, 'list')}` lists "
                f"them); add it with `{add}`"
            ) from None
        raise
    done = "replaced" if args.replace else "added"
    print(f"{done} {fault['name']}: {fault['spec'] or fault['fields']}")


def run(args: argparse.Namespace) -> int:
    base = admin_url(args.admin)
    if args.action == "list":
        faults = _call(base, "GET", "/faults")["faults"]
        if args.json:
            print(json.dumps(faults, indent=2, ensure_ascii=False))
        elif not faults:
            print("no faults: every request is forwarded")
        else:
            width = max(len(f["name"]) for f in faults)
            for fault in faults:
                spec = fault["spec"] or json.dumps(fault["fields"], ensure_ascii=False)
                print(f"{fault['name']:<{width}}  toxicity {fault['toxicity']:<4g}  {spec}")
    elif args.action == "add":
        _add(base, args)
    elif args.action == "remove":
        _call(base, "DELETE", f"/faults/{args.name}")
        print(f"removed {args.name}")
    else:
        _call(base, "POST", "/reset")
        print("removed every fault: every request is forwarded")
    return EXIT_OK


def _toxicity(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a probability within [0, 1], got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a probability within [0, 1], got {text!r}")
    return value


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``fault`` subcommand to ``commands``."""
    parser = commands.add_parser(
        "fault", help="list, add or remove faults on a running proxy (--admin)", description=DESCRIPTION
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--admin",
        default=None,
        metavar="URL",
        help=f"the proxy's admin API: HOST:PORT or http://HOST:PORT (default ${ADMIN_ENV})",
    )
    listing = actions.add_parser("list", parents=[common], help="the faults, in the order they are tried")
    listing.add_argument("--json", action="store_true", help="print the admin API's JSON")
    adding = actions.add_parser("add", parents=[common], help="add a fault (or --replace one)")
    adding.add_argument("name", help="its name, e.g. cap")
    adding.add_argument("spec", help="KIND[:VALUE...][:key=value...], e.g. body-cap:128KB:waf-403-html")
    adding.add_argument(
        "--toxicity", type=_toxicity, default=None, help="the probability it fires (default 1)"
    )
    adding.add_argument("--replace", action="store_true", help="replace the fault of that name in place")
    removing = actions.add_parser("remove", parents=[common], help="remove a fault by name")
    removing.add_argument("name")
    actions.add_parser("reset", parents=[common], help="remove every fault")
    parser.set_defaults(handler=run)
