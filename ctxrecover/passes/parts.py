"""Move message parts to the archive behind a marker: old images, or a whole message set aside.

Images weigh their wire size (SPEC §11), so a few screenshots can be most of a
request. :func:`archive_images` moves the inline images of older messages to the
archive — each as a ``data:`` URL, byte for byte — and leaves a one-line note with
its recall marker in the message's text, so compaction can drop or summarise the
message later without losing a pixel. :func:`set_aside` does the same for one
whole message, e.g. the one a gateway's content rule refuses to carry.

>>> from ctxrecover.archive import MemoryArchive
>>> from ctxrecover.messages import Image
>>> old = Message.user("screenshot", images=(Image(data="iVBORw0K" * 1000),))
>>> history, report = archive_images([old, Message.user("now")], archive=MemoryArchive(), keep_recent=1)
>>> report.images_archived, history[0].images, history[0].content.splitlines()[1][:22]
(1, (), '[image archived — imag')
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ctxrecover.archive import Archive, marker
from ctxrecover.errors import ConfigError
from ctxrecover.messages import Message
from ctxrecover.sizes import format_payload_size, image_chars, weight

__all__ = [
    "IMAGES_NOTICE",
    "IMAGE_ARCHIVED_NOTE",
    "SET_ASIDE_NOTE",
    "ImageReport",
    "archive_images",
    "set_aside",
]

#: What an archived image leaves in its message's text: media type, size, recall marker.
IMAGE_ARCHIVED_NOTE = "[image archived — %s, %s — recoverable via @recall %s]"
#: The report line of :func:`archive_images`, in the style of SPEC §3.5's skill aging.
IMAGES_NOTICE = "images: %d archived, %s freed (recoverable via @recall)"
#: What a message set aside leaves: its size and recall marker.
SET_ASIDE_NOTE = (
    "[message set aside — %s that a gateway refused to carry; full content recoverable via @recall %s]"
)


@dataclass(frozen=True, slots=True)
class ImageReport:
    """What :func:`archive_images` did: images moved to the archive and the weight they freed."""

    images_archived: int = 0
    chars_freed: int = 0

    @property
    def notice(self) -> str:
        """``images: %d archived, %s freed (recoverable via @recall)``."""
        return IMAGES_NOTICE % (self.images_archived, format_payload_size(self.chars_freed))


def _without_images(msg: Message, archive: Archive) -> Message:
    """``msg`` with each inline image archived and replaced by a note in its text (URLs stay)."""
    notes: list[str] = []
    kept = []
    for image in msg.images:
        if image.data is None:
            kept.append(image)
            continue
        key = archive.put(f"data:{image.media_type};base64,{image.data}")
        size = format_payload_size(len(image.data))
        notes.append(IMAGE_ARCHIVED_NOTE % (image.media_type, size, marker(key)))
    text = "\n".join([msg.content, *notes] if msg.content else notes)
    return msg.replace(content=text, images=tuple(kept))


def archive_images(
    history: Sequence[Message],
    *,
    archive: Archive,
    keep_recent: int,
    user_first: bool = True,
    shed_chars: int | None = None,
) -> tuple[list[Message], ImageReport]:
    """Archive the inline images of every message a compaction keeping ``keep_recent`` may drop.

    The kept tail is the last ``keep_recent`` messages; with ``user_first`` (recovery's
    ``keep_last``) it starts at their first user message, since leading non-user
    messages are dropped too. Without it (planned compaction) the tail loses only the
    messages before the history's first user message, when the history does not start
    with one. Every message before the tail gives its images to the archive; system
    messages (the floor) and ``preserve_verbatim`` messages keep theirs. With ``shed_chars``,
    messages give their images oldest first only until that much weight is freed (the retry
    that fills the cap, SPEC §12). Returns the input list itself when there is nothing to archive.
    """
    if keep_recent < 0:
        raise ConfigError(f"archive_images needs keep_recent >= 0 (got {keep_recent})")
    end = max(0, len(history) - keep_recent)
    roles = [m.role for m in history]
    if user_first:
        end = next((i for i in range(end, len(history)) if roles[i] == "user"), len(history))
    else:
        first = next((i for i, role in enumerate(roles) if role != "system"), len(history))
        if first < len(history) and roles[first] != "user" and "user" in roles[first:]:
            end = max(end, roles.index("user", first))
    targets = [
        i
        for i in range(end)
        if history[i].role != "system"
        and not history[i].preserve_verbatim
        and any(image.data is not None for image in history[i].images)
    ]
    if not targets or shed_chars == 0:
        return history if isinstance(history, list) else list(history), ImageReport()
    result = list(history)
    count = freed = 0
    for i in targets:
        if shed_chars is not None and freed >= shed_chars:
            break
        msg = result[i]
        count += sum(image.data is not None for image in msg.images)
        result[i] = _without_images(msg, archive)
        freed += weight(msg) - weight(result[i])
    return result, ImageReport(images_archived=count, chars_freed=freed)


def set_aside(history: Sequence[Message], index: int, *, archive: Archive) -> tuple[list[Message], str]:
    """Archive message ``index`` whole (text and images) and leave a stub with its recall marker.

    Tool calls and the tool-call id stay, so pairing holds. Returns the new history
    and the archive key of the message's text.
    """
    if not -len(history) <= index < len(history):
        raise ConfigError(f"set_aside: no message #{index} in a history of {len(history)}")
    msg = history[index]
    size = format_payload_size(len(msg.content) + image_chars(msg))
    stripped = _without_images(msg, archive)
    key = archive.put(stripped.content)
    result = list(history)
    result[index] = stripped.replace(content=SET_ASIDE_NOTE % (size, marker(key)), preserve_verbatim=False)
    return result, key
