"""Failure classification: gather an exchange's evidence once, then decide its kind from tables of data."""

from ctxrecover.classify.decide import Failure, FailureKind, classify, content_refusal, refused

__all__ = ["Failure", "FailureKind", "classify", "content_refusal", "refused"]
