"""The bundled data is found the same way from a checkout and from an installed wheel.

A wheel carries ``fixtures/`` as ``simulator/_data/fixtures`` (hatch ``force-include``); here a
wheel's layout is laid out by hand in a temporary site directory (the packages copied, the data
linked), so the resolver is exercised without building anything. ``.ci/run`` builds the real
wheel, installs it into a fresh virtualenv and runs the main command from another directory.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from simulator.proxy.pages import PAGES_DIR
from simulator.proxy.scenario import SCENARIOS_DIR
from simulator.resources import DATA_KINDS, data_dir, data_root
from simulator.workloads import FIXTURE_TRANSCRIPTS_DIR

ROOT = Path(__file__).resolve().parents[3]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
README = (ROOT / "README.md").read_text(encoding="utf-8")
CI = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
README_CLASSIFY = re.compile(r"`(ctxsim classify [^`]*)`")


def test_a_checkout_reads_its_own_fixtures_folder() -> None:
    assert data_root() == ROOT / "fixtures"
    assert all(data_dir(kind) == ROOT / "fixtures" / kind for kind in DATA_KINDS)
    assert (SCENARIOS_DIR, PAGES_DIR, FIXTURE_TRANSCRIPTS_DIR) == (
        data_dir("scenarios"),
        data_dir("pages"),
        data_dir("transcripts"),
    )
    with pytest.raises(ValueError, match="unknown data folder 'logs'"):
        data_dir("logs")


def test_the_wheel_maps_fixtures_into_the_package_and_ships_py_typed() -> None:
    wheel = PYPROJECT["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert wheel["force-include"] == {"fixtures": "simulator/_data/fixtures"}
    assert set(wheel["packages"]) == {"ctxrecover", "simulator"}
    assert (ROOT / "ctxrecover" / "py.typed").is_file() and (ROOT / "simulator" / "py.typed").is_file()
    assert PYPROJECT["project"]["scripts"]["ctxsim"] == "simulator.cli:main"


def fake_install(site: Path, *, with_data: bool) -> Path:
    """The two packages as a wheel installs them into ``site`` (the data linked, not copied)."""
    ignore = shutil.ignore_patterns("__pycache__")
    for package in ("ctxrecover", "simulator"):
        shutil.copytree(ROOT / package, site / package, ignore=ignore)
    if with_data:
        (site / "simulator" / "_data").mkdir()
        (site / "simulator" / "_data" / "fixtures").symlink_to(ROOT / "fixtures", target_is_directory=True)
    return site


def run_python(site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def test_an_installed_package_finds_its_packaged_data_from_any_directory(tmp_path: Path) -> None:
    site = fake_install(tmp_path / "site", with_data=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    found = run_python(site, elsewhere, "-c", "from simulator.resources import data_root; print(data_root())")
    assert found.returncode == 0, found.stderr
    assert Path(found.stdout.strip()) == site / "simulator" / "_data" / "fixtures"

    replayed = run_python(
        site, elsewhere, "-m", "simulator", "replay", "--scenario", "rate-limit-429", "--json"
    )
    assert replayed.returncode == 0, replayed.stderr
    run = json.loads(replayed.stdout)["run"]
    assert (run["outcome"], run["transcript"]) == ("no_compaction", "swe-agent-fc-ledgerline")


def test_a_package_without_its_data_says_so(tmp_path: Path) -> None:
    site = fake_install(tmp_path / "site", with_data=False)

    broken = run_python(site, tmp_path, "-m", "simulator", "run")

    assert broken.returncode != 0
    assert "the simulator's bundled data is missing" in broken.stderr
    assert "reinstall ctxrecover" in broken.stderr


def test_the_readme_classify_example_works_from_an_installed_package(tmp_path: Path) -> None:
    (command, *_) = README_CLASSIFY.findall(README)
    site = fake_install(tmp_path / "site", with_data=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    done = run_python(site, elsewhere, "-m", "simulator", *shlex.split(command)[1:])

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["kind"] == "waf_rejection"


def test_ci_runs_the_readme_classify_example_from_the_wheel() -> None:
    wheel_block = CI.split('mkdir "$scratch/elsewhere"', 1)[1].split("\n)\n", 1)[0]
    assert "grep -o 'ctxsim classify bundled:[^`]*' \"$repo/README.md\"" in wheel_block
    assert '"$scratch/wheel-venv/bin/${classify_example[0]}"' in wheel_block
    assert README_CLASSIFY.findall(README)[0].startswith("ctxsim classify bundled:")
