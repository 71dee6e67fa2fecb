"""tts_fleet/config/stack_file.py: the one reader of a stack file, its region and overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from tts_fleet.config.models import ConfigError
from tts_fleet.config.stack_file import StackFile, stack_config, stack_region, with_overrides

STACK = """\
config:
  aws:region: eu-west-1
  tts-fleet:scaling:
    maxWorkers: 8
    jobsPerWorker: 3
  tts-fleet:worker:
    maxTextChars: 50000
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "Pulumi.t.yaml").write_text(STACK)
    return tmp_path


def test_region_raw_entries_and_validated_config(project: Path) -> None:
    stack = StackFile.of_stack("t", project)
    assert stack.region == "eu-west-1"
    assert stack.raw == {
        "scaling": {"maxWorkers": 8, "jobsPerWorker": 3},
        "worker": {"maxTextChars": 50000},
    }
    cfg = stack.config()
    assert (cfg.scaling.max_workers, cfg.worker.max_text_chars) == (8, 50000)


def test_flags_override_the_file_and_none_leaves_it(project: Path) -> None:
    cfg = stack_config("t", project, {"scaling": {"maxWorkers": 5, "jobsPerWorker": None}})
    assert (cfg.scaling.max_workers, cfg.scaling.jobs_per_worker) == (5, 3)


def test_no_stack_is_the_defaults_with_the_flags() -> None:
    cfg = stack_config(None, ".", {"scaling": {"maxWorkers": 7}})
    assert cfg.scaling.max_workers == 7
    assert stack_region(None) is None


def test_a_bad_override_names_the_full_key(project: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        stack_config("t", project, {"scaling": {"maxWorkers": 0}})
    assert any(p.startswith("tts-fleet:scaling.maxWorkers:") for p in raised.value.problems)


def test_a_missing_stack_file_is_one_clear_problem(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        StackFile.of_stack("nope", tmp_path)
    assert raised.value.problems == [
        f"{tmp_path / 'Pulumi.nope.yaml'}: no such stack file (stacks are Pulumi.<stack>.yaml)"
    ]
    assert stack_region("nope", tmp_path) is None


def test_overrides_replace_a_non_mapping_section() -> None:
    assert with_overrides({"scaling": None}, {"scaling": {"maxWorkers": 2}}) == {
        "scaling": {"maxWorkers": 2}
    }
