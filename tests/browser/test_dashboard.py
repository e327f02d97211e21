"""The replay dashboard in a real browser: Voilà serves its notebook, headless Chromium moves a slider.

Voilà (not JupyterLab) because it serves a notebook as a page with its widgets live and its code
hidden: one process, one URL, nothing to click through before the dashboard shows. The browser is
Debian's ``chromium`` driven through Debian's ``chromedriver`` (both paths passed explicitly, so
Selenium Manager never downloads anything; ``.ci/run`` installs them). In CI (``CI`` set) a missing
browser fails the test; elsewhere it skips, naming the packages to install.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "06_replay_dashboard.ipynb"
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--window-size=1400,1600",
    # Nothing leaves the machine: Voilà's page links CDN stylesheets (fonts, icons) that a closed
    # network may leave hanging; every name but the loopback server's fails at once instead.
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
)
SERVER_START_S = 60.0
RENDER_S = 90.0  # the notebook's cells run before the page is complete (5 s here, about 20 s on 2 busy cores)
# Voilà sometimes runs every cell yet never ends the page's stream: the browser shows its spinner and
# heartbeats for ever (voila-dashboards/voila#1446; seen here about once in eight loads, in curl too). A
# page that shows nothing within RENDER_S is loaded again — a new page, a new kernel — at most this often.
PAGE_LOADS = 3
REPLAY_S = 120.0
SLIDER = "budget ratio"
DRAG_PX = -90  # about a third of the track to the left: 0.60 → about 0.3
T = TypeVar("T")


def _browser_or_skip() -> None:
    missing = [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not path.exists()]
    if not missing:
        return
    message = f"{', '.join(missing)} missing: apt-get install chromium chromium-driver"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait(what: str, timeout: float, probe: Callable[[], T | None], explain: Callable[[], str] = str) -> T:
    """Poll ``probe`` until it returns something; on timeout fail with what ``explain`` tells."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n{explain()}")


def _tail(log: Path, lines: int = 40) -> str:
    return "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])


@pytest.fixture
def voila_url(tmp_path: Path) -> Iterator[str]:
    """Voilà serving the dashboard notebook on 127.0.0.1 (its log in the test's tmp dir)."""
    port = _free_port()
    log = (tmp_path / "voila.log").open("w", encoding="utf-8")
    command = [
        sys.executable,
        "-m",
        "voila",
        str(NOTEBOOK),
        "--no-browser",
        f"--port={port}",
        "--Voila.ip=127.0.0.1",
        "--VoilaExecutor.timeout=180",
    ]
    server = subprocess.Popen(command, cwd=NOTEBOOK.parent, stdout=log, stderr=subprocess.STDOUT)

    def listening() -> bool:
        if server.poll() is not None:
            pytest.fail(f"voila exited with {server.returncode}: {(tmp_path / 'voila.log').read_text()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            return False
        return True

    try:
        _wait("Voilà to listen", SERVER_START_S, listening)
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


@pytest.fixture
def chromium(tmp_path: Path) -> Iterator[object]:
    """Debian's headless Chromium with a fresh profile, driven by Debian's chromedriver."""
    _browser_or_skip()
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = str(CHROMIUM)
    # Voilà streams the page while the notebook's cells run, so even DOMContentLoaded can take minutes on
    # busy cores; ``get`` returns at once and the test waits for the widgets itself (RENDER_S).
    options.page_load_strategy = "none"
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def test_moving_a_slider_replays_and_redraws_the_table_and_the_figure(
    voila_url: str, chromium: object, tmp_path: Path
) -> None:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver

    assert isinstance(chromium, WebDriver)
    driver = chromium
    started = time.monotonic()

    def output() -> tuple[str, str] | None:
        """The dashboard's output: its figure (PNG data URL) and its summary table's text; None while
        it is missing or being redrawn (an element found a moment ago replaced by the new output)."""
        try:
            images = driver.find_elements(By.CSS_SELECTOR, ".widget-output img")
            tables = driver.find_elements(By.CSS_SELECTOR, ".widget-output table")
            if not images or not tables:
                return None
            return images[0].get_attribute("src") or "", tables[0].text
        except StaleElementReferenceException:
            return None

    def explain() -> str:
        page = driver.find_element(By.TAG_NAME, "body").text[-2000:]
        return f"page text:\n{page}\nvoila.log:\n{_tail(tmp_path / 'voila.log')}"

    # The first load is timed on its own: it is the one a user meets (a fresh kernel, cold caches);
    # a reload after a stalled page (voila#1446) is reported, never folded into its time.
    loads: list[tuple[int, float, bool]] = []  # (load, seconds, rendered)
    for load in range(1, PAGE_LOADS + 1):
        load_started = time.monotonic()
        driver.get(voila_url)
        try:
            before = _wait("the dashboard's first replay", RENDER_S, output, explain)
        except AssertionError:
            loads.append((load, time.monotonic() - load_started, False))
            if load == PAGE_LOADS:
                raise
            continue
        loads.append((load, time.monotonic() - load_started, True))
        break
    rendered = time.monotonic() - started
    _load, first_seconds, first_rendered = loads[0]
    print(
        f"first page load: {'rendered' if first_rendered else 'showed nothing'} in {first_seconds:.1f} s"
        + ("" if first_rendered else f"; load {loads[-1][0]} rendered in {loads[-1][1]:.1f} s")
    )
    (slider,) = [s for s in driver.find_elements(By.CSS_SELECTOR, ".widget-slider") if SLIDER in s.text]
    readout = slider.find_element(By.CSS_SELECTOR, ".widget-readout")
    assert readout.text == "0.60" and "recovered" in before[1]

    handle = slider.find_element(By.CSS_SELECTOR, ".noUi-handle")
    ActionChains(driver).click_and_hold(handle).move_by_offset(DRAG_PX, 0).release().perform()

    moved_to = _wait("the slider to move", 10, lambda: readout.text if readout.text != "0.60" else None)
    after = _wait(
        "the replay with the new budget ratio",
        REPLAY_S,
        lambda: (
            (now := output())
            and now != before
            and f"budget_ratio {float(moved_to):g}" in " ".join(now[1].split())
            and now
        ),
        explain,
    )
    driver.save_screenshot(str(tmp_path / "dashboard.png"))

    assert float(moved_to) < 0.6
    assert after[0] != before[0], "the budget curve was not redrawn"
    assert after[1] != before[1], "the summary table did not change"
    rows = dict(line.split(" ", 1) for line in after[1].splitlines() if " " in line)
    assert rows["chars_lost"] == "0"
    assert (tmp_path / "dashboard.png").stat().st_size > 10_000
    replayed = time.monotonic() - started - rendered
    print(
        f"dashboard rendered in {rendered:.1f} s (page load {load}); {SLIDER} {moved_to}: "
        f"replayed in {replayed:.1f} s; screenshot {tmp_path / 'dashboard.png'}"
    )
