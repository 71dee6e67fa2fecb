"""What ships: the wheel holds `tts_fleet` and `worker` only, installs and runs the CLI without
the Pulumi SDKs, and the Pulumi program still builds from a plain copy of the project, where
it loads `components/` from the project directory (it is not in the wheel).

Slow (a wheel build, a fresh venv with the base dependencies from the package index, two
program runs): about half a minute.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tts_fleet.deploy.driver import MISSING_SDK

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = {"tts_fleet", "worker"}
PRICES = "tts_fleet/cost/data/prices.json"
ENTRY = "from tts_fleet.cli.main import main; main()"  # what the `tts-fleet` console script runs
# Runs __main__.py under the recording mocks from the current directory (tests/lib/ is tracked,
# so a copy of the project has it) and prints where components/ came from and what was built.
PROGRAM = """
import json, sys
import components
from tests.lib.stack_support import run_main, stack_file_config
mocks, exports = run_main(stack_file_config("dev"), "dev")
print(json.dumps({"components": components.__file__, "counts": mocks.counts(),
                  "exports": sorted(exports)}))
"""


def run(
    argv: list[str], cwd: Path, timeout: float = 300, **kwargs: Any
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, **kwargs)


def clean_env() -> dict[str, str]:
    """This environment without anything that would point Python or Pulumi back at the repo."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("PULUMI")}


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The files a clone would have: tracked ones, plus new ones not yet committed (so the
    test checks the tree as it is), never ignored ones (.venv, egg-info, out/)."""
    if not (ROOT / ".git").exists():  # make test and CI run in a checkout: a gap is a failure
        pytest.fail("test_packaging.py copies `git ls-files`: run it in a git checkout")
    listed = run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], ROOT, check=True
    ).stdout
    target = tmp_path_factory.mktemp("clone") / "tts-fleet"
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():  # a tracked file deleted in the work tree is not copied
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


@pytest.fixture(scope="module")
def wheel(copy: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # From the copy, so the build leaves no build/ or egg-info in the work tree.
    built = run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), "."], copy, 600
    )
    assert built.returncode == 0, built.stderr
    (path,) = out.glob("tts_fleet-*.whl")
    return path


@pytest.fixture(scope="module")
def bare_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel and its base dependencies only (no extras)."""
    venv = tmp_path_factory.mktemp("venv") / "bare"
    # Without pip of its own (ensurepip is most of a venv's start-up): this pip installs into it.
    made = run([sys.executable, "-m", "venv", "--without-pip", str(venv)], venv.parent, 120)
    assert made.returncode == 0, made.stderr
    python = str(venv / "bin" / "python")
    installed = run(
        [sys.executable, "-m", "pip", "--python", python, "install", "-q", str(wheel)],
        venv.parent,
        600,
    )
    assert installed.returncode == 0, installed.stderr
    return venv


def top_level(names: list[str]) -> set[str]:
    return {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}


def test_the_wheel_ships_exactly_tts_fleet_and_worker_and_the_prices(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (record,) = [n for n in names if n.endswith(".dist-info/RECORD")]
        recorded = [line.split(",")[0] for line in archive.read(record).decode().splitlines()]
        tops = [n for n in names if n.endswith(".dist-info/top_level.txt")]
        declared = set(archive.read(tops[0]).decode().split()) if tops else SHIPPED
    assert top_level(names) == SHIPPED
    assert top_level(recorded) == SHIPPED
    assert declared == SHIPPED
    assert PRICES in names
    assert not [n for n in names if n.startswith(("components/", "tests/", "benchmarks/"))]


def test_a_base_install_runs_submit_help_without_pulumi(bare_venv: Path, tmp_path: Path) -> None:
    python, cli = bare_venv / "bin" / "python", bare_venv / "bin" / "tts-fleet"
    no_pulumi = run([str(python), "-c", "import pulumi"], tmp_path, env=clean_env())
    assert no_pulumi.returncode != 0 and "No module named 'pulumi'" in no_pulumi.stderr
    helped = run([str(cli), "submit", "--help"], tmp_path, env=clean_env())
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith("Usage: tts-fleet submit")
    prices = run(
        [str(python), "-c", "import tts_fleet.cost.report as r; print(r.__file__)"],
        tmp_path,
        env=clean_env(),  # a PYTHONPATH naming the work tree would shadow the installed copy
    )
    assert str(bare_venv) in prices.stdout  # the installed copy, not the work tree


def test_a_base_install_names_the_infra_extra_on_deploy(bare_venv: Path, copy: Path) -> None:
    deployed = run(
        [str(bare_venv / "bin" / "tts-fleet"), "deploy", "preview", "--stack", "dev"],
        copy,
        env=clean_env(),
    )
    assert deployed.returncode == 3
    assert deployed.stderr.splitlines() == [f"Error: {MISSING_SDK}"]


@pytest.mark.parametrize("blocked", ["pulumi", "pulumi.automation"])
def test_an_unimportable_pulumi_is_one_line_naming_the_infra_extra(blocked: str) -> None:
    # A None entry in sys.modules makes `import` raise ImportError, as if never installed.
    code = f"import sys; sys.modules[{blocked!r}] = None; {ENTRY}"
    argv = [sys.executable, "-c", code, "deploy", "preview", "--stack", "dev"]
    result = run(argv, ROOT, env=clean_env())
    assert result.returncode == 3
    assert result.stderr.splitlines() == [f"Error: {MISSING_SDK}"]
    assert "pip install 'tts-fleet[infra]'" in MISSING_SDK
    assert "Traceback" not in result.stderr


def program_in(directory: Path) -> dict[str, Any]:
    result = run([sys.executable, "-c", PROGRAM], directory, env=clean_env())
    assert result.returncode == 0, result.stderr
    built: dict[str, Any] = json.loads(result.stdout.splitlines()[-1])
    return built


def test_the_program_builds_under_mocks_from_a_copy_of_the_project(copy: Path) -> None:
    here, there = program_in(ROOT), program_in(copy)
    assert Path(str(there["components"])).is_relative_to(copy)  # loaded from the project dir
    assert here["counts"]["aws:sqs/queue:Queue"] == 2  # the real program ran, not an empty one
    assert there["counts"] == here["counts"]
    assert there["exports"] == here["exports"]
    assert "queueUrl" in there["exports"]
