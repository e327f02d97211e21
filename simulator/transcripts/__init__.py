"""Transcripts: the model, loaders and writers for every supported format, and the seeded generator."""

from simulator.transcripts.generator import generate_session, generate_to_file
from simulator.transcripts.loaders import (
    FORMATS,
    Fact,
    Transcript,
    TranscriptError,
    load_runs,
    load_transcript,
    transcript_chars,
    transcript_from_messages,
    write_jsonl,
)

__all__ = [
    "FORMATS",
    "Fact",
    "Transcript",
    "TranscriptError",
    "generate_session",
    "generate_to_file",
    "load_runs",
    "load_transcript",
    "transcript_chars",
    "transcript_from_messages",
    "write_jsonl",
]
