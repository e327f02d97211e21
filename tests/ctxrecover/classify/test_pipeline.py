"""Classification is a one-way pipeline: gather once into a frozen Evidence, then decide from it alone."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path
from types import MappingProxyType

import httpx
import pytest

from ctxrecover.classify import FailureKind, classify
from ctxrecover.classify.decide import decide
from ctxrecover.classify.evidence import Evidence, gather

DECIDE_SOURCE = Path(__file__).parents[3] / "ctxrecover" / "classify" / "decide.py"


def test_evidence_is_frozen_and_its_json_is_read_only() -> None:
    evidence = gather(status=400, body='{"error": {"message": "prompt is too long", "items": [1, 2]}}')
    with pytest.raises(dataclasses.FrozenInstanceError):
        evidence.status = 413  # type: ignore[misc]
    (doc,) = evidence.body_objects
    assert isinstance(doc, MappingProxyType)
    with pytest.raises(TypeError):
        doc["error"] = None  # type: ignore[index]
    assert isinstance(doc["error"]["items"], tuple)  # type: ignore[index]


def test_gather_reads_every_input_once() -> None:
    request = httpx.Request("POST", "https://api.openai.com/v1/chat/completions", content=b"x" * 64)
    response = httpx.Response(
        413, text="Request Entity Too Large", headers={"Server": "nginx"}, request=request
    )
    error = httpx.HTTPStatusError("Client error '413 Payload Too Large'", request=request, response=response)
    evidence = gather(error, history_chars=1234.0)
    assert evidence.status == 413
    assert evidence.headers["server"] == "nginx"
    assert "request entity too large" in evidence.text
    assert evidence.request_bytes == 64
    assert evidence.history_chars == 1234
    assert ("HTTPStatusError", "httpx") in evidence.classes
    assert evidence.has_error


def test_decide_works_on_a_hand_built_evidence_value() -> None:
    evidence = Evidence(status=400, text="prompt is too long: 250000 tokens > 200000 maximum")
    failure = decide(evidence)
    assert failure.kind is FailureKind.CONTEXT_OVERFLOW
    assert failure.context_limit_tokens == 200_000


def test_classify_is_decide_of_gather() -> None:
    body = json.dumps({"error": {"code": "context_length_exceeded", "message": "too long"}})
    assert classify(status=400, body=body) == decide(gather(None, 400, body))


def test_decision_never_calls_back_into_gathering() -> None:
    tree = ast.parse(DECIDE_SOURCE.read_text(encoding="utf-8"))
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "ctxrecover.classify.evidence"
        for alias in node.names
    }
    assert imported <= {"Evidence", "gather", "http_status"}
    callers = {
        func.name
        for func in ast.walk(tree)
        if isinstance(func, ast.FunctionDef)
        for node in ast.walk(func)
        if isinstance(node, ast.Name) and node.id == "gather"
    }
    assert callers == {"classify"}  # the entry point composes the two steps; nothing else gathers
