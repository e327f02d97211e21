"""Level-2 summarization: protocol, input budget, prompt, quality gate, HTTP summarizer, context engines."""

from ctxrecover.cancel import CancelToken
from ctxrecover.summarize.context_engine import ContextEngine, ContextEngineSummarizer
from ctxrecover.summarize.gate import (
    GatedSummary,
    SummarizationFailed,
    check_summary,
    gated_summary,
    summarize_with_gate,
    summary_min_chars,
)
from ctxrecover.summarize.http import HttpSummarizer
from ctxrecover.summarize.prompt import (
    SEGMENT_HEADER,
    SUMMARY_PROMPT,
    build_prompt,
    render_segment,
    summary_input_budget,
)
from ctxrecover.summarize.protocol import (
    SummarizeCall,
    SummarizeFlow,
    Summarizer,
    SummaryResult,
    run_summaries,
)

__all__ = [
    "CancelToken",
    "ContextEngine",
    "ContextEngineSummarizer",
    "GatedSummary",
    "HttpSummarizer",
    "SEGMENT_HEADER",
    "SUMMARY_PROMPT",
    "SummarizationFailed",
    "SummarizeCall",
    "SummarizeFlow",
    "Summarizer",
    "SummaryResult",
    "build_prompt",
    "check_summary",
    "gated_summary",
    "render_segment",
    "run_summaries",
    "summarize_with_gate",
    "summary_input_budget",
    "summary_min_chars",
]
