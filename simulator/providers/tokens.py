"""The mock providers' token estimate: English at 4 chars a token, denser text as tokenizers count it.

Real tokenizers (byte-level BPE: OpenAI's, Anthropic's, Gemini's SentencePiece)
spend about one token per 4 chars of English (OpenAI: "one token generally
corresponds to ~4 characters of text for common English text",
https://help.openai.com/en/articles/4936856) but far more on text with fewer
chars per token: CJK, emoji, base64 data, minified code. :func:`dense_tokens`
estimates those from the text's char classes (:data:`ASCII_CLASS_TOKENS`) and its
UTF-8 widths (:data:`UTF8_WIDTH_TOKENS`: a byte-level tokenizer sees a 3-byte CJK
char as about one token and a 4-byte emoji as about two). A text costs
``len / chars_per_token``, or that estimate when it is unmistakably larger, so ordinary
text counts as it always did and token-dense text fills a mock window as it fills a
real one.

>>> counter = TokenCounter()
>>> counter.add("The quick brown fox jumps over the lazy dog.")
>>> counter.tokens
11
>>> counter.add("数据库连接失败" * 10)  # 70 CJK chars: about 70 tokens, not 18
>>> counter.tokens
81
"""

from __future__ import annotations

import math
import re
import string
from collections import OrderedDict

__all__ = [
    "ASCII_CLASS_TOKENS",
    "DENSE_MARGIN",
    "DENSE_MIN_CHARS",
    "TokenCounter",
    "UTF8_WIDTH_TOKENS",
    "dense_tokens",
]

# Tokens per ASCII char by class: lowercase runs are whole words (~4.5 chars a token with their space);
# capitals, digits and punctuation split runs (mixed-case base64 ≈ 2.7 chars a token, minified code ≈ 2.3).
ASCII_CLASS_TOKENS: dict[str, float] = {
    "lower": 0.24,
    "upper": 0.45,
    "digit": 0.40,
    "punct": 0.80,
    "space": 0.05,
}
# Tokens per non-ASCII char by its UTF-8 width: accented Latin, Greek, Cyrillic, Arabic, Hebrew (2 bytes);
# CJK, kana, Hangul, BMP symbols (3 bytes); emoji and other astral chars (4 bytes).
UTF8_WIDTH_TOKENS: dict[int, float] = {2: 0.5, 3: 1.0, 4: 2.0}
# Only unmistakably dense text costs more than the English rate: a text of at least DENSE_MIN_CHARS chars
# whose estimate exceeds len / chars_per_token by more than DENSE_MARGIN (short strings and prose with
# some punctuation or capitals are the English rate's own noise).
DENSE_MIN_CHARS = 64
DENSE_MARGIN = 1.25
CACHE_ENTRIES = 8192  # texts whose excess is remembered, the oldest forgotten first

_CLASS_OF = {
    **dict.fromkeys(string.ascii_lowercase, "l"),
    **dict.fromkeys(string.ascii_uppercase, "u"),
    **dict.fromkeys(string.digits, "d"),
    **dict.fromkeys(string.punctuation, "p"),
    **dict.fromkeys(string.whitespace, "s"),
}
_REPEAT_RE = re.compile(r"(.)\1{2,}", re.DOTALL)
_CLASS_TABLE = str.maketrans({char: cls for char, cls in _CLASS_OF.items()})
_CLASS_LETTERS = (("l", "lower"), ("u", "upper"), ("d", "digit"), ("p", "punct"), ("s", "space"))


def dense_tokens(text: str) -> float:
    """Tokens a byte-level tokenizer spends on ``text``, from its char classes and UTF-8 widths; a run of
    one repeated char counts as two of it (tokenizer vocabularies hold long runs: ``====``, ``AAAA``)."""
    text = _REPEAT_RE.sub(r"\1\1", text)
    classes = text.translate(_CLASS_TABLE)
    tokens = 0.0
    ascii_chars = 0
    for letter, name in _CLASS_LETTERS:
        count = classes.count(letter)
        ascii_chars += count
        tokens += count * ASCII_CLASS_TOKENS[name]
    if ascii_chars == len(text):
        return tokens
    wide = len(text) - ascii_chars  # chars outside the ASCII classes (other controls count as 2-byte)
    astral = len(text.encode("utf-16-le", "surrogatepass")) // 2 - len(text)
    utf8 = len(text.encode("utf-8", "surrogatepass")) - ascii_chars
    three = max(0, utf8 - 4 * astral - 2 * (wide - astral))
    two = max(0, wide - astral - three)
    return tokens + two * UTF8_WIDTH_TOKENS[2] + three * UTF8_WIDTH_TOKENS[3] + astral * UTF8_WIDTH_TOKENS[4]


class TokenCounter:
    """The tokens of many texts: ``ceil(chars / chars_per_token + Σ excess)``, where a text's excess is
    how much :func:`dense_tokens` exceeds its ``len / chars_per_token`` (0 for ordinary text)."""

    __slots__ = ("chars", "chars_per_token", "excess")
    _cache: OrderedDict[tuple[str, float], float] = OrderedDict()

    def __init__(self, chars_per_token: float = 4.0) -> None:
        self.chars_per_token = chars_per_token
        self.chars = 0
        self.excess = 0.0

    def add(self, text: str) -> None:
        """Count ``text``."""
        self.chars += len(text)
        self.excess += self.excess_of(text)

    def excess_of(self, text: str) -> float:
        """The tokens ``text`` costs beyond ``len / chars_per_token``: 0 unless it is unmistakably dense
        (:data:`DENSE_MIN_CHARS`, :data:`DENSE_MARGIN`); remembered however short (a history resends its
        texts, decoded anew after an earlier message changed)."""
        if len(text) < DENSE_MIN_CHARS:
            return 0.0
        key = (text, self.chars_per_token)
        cache = TokenCounter._cache
        found = cache.get(key)
        if found is None:
            found = cache[key] = self._excess(text)
            if len(cache) > CACHE_ENTRIES:
                cache.popitem(last=False)
        return found

    def _excess(self, text: str) -> float:
        english = len(text) / self.chars_per_token
        dense = dense_tokens(text)
        return dense - english if dense > english * DENSE_MARGIN else 0.0

    @property
    def tokens(self) -> int:
        """The tokens of every text added."""
        return math.ceil(self.chars / self.chars_per_token + self.excess)
