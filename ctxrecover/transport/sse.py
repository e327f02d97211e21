"""Server-sent events read incrementally from the bytes of a streamed answer, with no I/O.

:class:`SSEDecoder` follows the WHATWG event-stream rules
(https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation):
UTF-8 text, one leading BOM dropped; lines end with CRLF, LF or CR (a CR at the end of
one chunk may pair with the LF opening the next); a blank line dispatches the event;
``:`` opens a comment (OpenRouter's ``: OPENROUTER PROCESSING`` keep-alives);
``data:`` lines join with LF; one space after the colon is dropped. An event
whose blank line never came is dispatched at the end of the stream when its
lines are whole; a line cut by the end of the stream is dropped, as the rules say.

>>> decoder = SSEDecoder()
>>> decoder.feed(b"event: ping\\ndata: {}\\n\\ndata: [DO")
[ServerSentEvent(event='ping', data='{}')]
>>> decoder.feed(b"NE]\\r\\n\\r\\n")
[ServerSentEvent(event=None, data='[DONE]')]
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

__all__ = ["SSEDecoder", "ServerSentEvent"]

_LINE_END = re.compile(r"\r\n|\r|\n")
_BOM = "\ufeff"


@dataclass(frozen=True, slots=True)
class ServerSentEvent:
    """One dispatched event: its ``event:`` name (None when it has none) and its joined ``data:``."""

    event: str | None
    data: str


class SSEDecoder:
    """Bytes of an event stream in, the events they complete out (see the module docstring)."""

    def __init__(self) -> None:
        self._text = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._partial: list[str] = []  # the pieces of a line whose end has not arrived yet
        self._after_cr = False  # the last chunk ended with CR: a LF opening the next one belongs to it
        self._started = False
        self._event: str | None = None
        self._data: list[str] = []

    def feed(self, data: bytes) -> list[ServerSentEvent]:
        """The events ``data`` completes, in order."""
        return self._lines(self._text.decode(data))

    def flush(self) -> list[ServerSentEvent]:
        """The end of the stream: the event still waiting for its blank line, when its lines are whole."""
        events = self._lines(self._text.decode(b"", final=True))
        self._partial = []  # a line the stream cut is not a line
        if self._data:
            events.append(self._dispatch())
        return events

    def _lines(self, text: str) -> list[ServerSentEvent]:
        if not self._started and text:
            self._started = True
            text = text.removeprefix(_BOM)
        if self._after_cr and text:
            self._after_cr = False
            text = text.removeprefix("\n")
        events: list[ServerSentEvent] = []
        start = 0
        for end in _LINE_END.finditer(text):
            self._partial.append(text[start : end.start()])
            line = "".join(self._partial)
            self._partial = []
            start = end.end()
            self._after_cr = end.group() == "\r" and start == len(text)
            if not line:
                if self._data:
                    events.append(self._dispatch())
                self._event = None
            elif not line.startswith(":"):
                self._field(line)
        if start < len(text):
            self._partial.append(text[start:])
        return events

    def _field(self, line: str) -> None:
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)

    def _dispatch(self) -> ServerSentEvent:
        event = ServerSentEvent(self._event, "\n".join(self._data))
        self._event, self._data = None, []
        return event
