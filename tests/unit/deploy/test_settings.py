"""`--set` parsing and merging (tts_fleet/deploy/settings.py), exact values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tts_fleet.config.models import ConfigError
from tts_fleet.deploy.settings import (
    Setting,
    SettingError,
    apply_setting,
    parse_setting,
    parse_value,
    validate,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("12", 12),
        ("-3", -3),
        ("true", True),
        ("false", False),
        ("2.5", 2.5),
        ("1e3", 1000.0),
        ("nat", "nat"),
        ("yes", "yes"),  # YAML 1.1 would say True; Pulumi stores the string
        ("True", "True"),
        ("", ""),
        ("cron(0 8 ? * MON-FRI *)", "cron(0 8 ? * MON-FRI *)"),
    ],
)
def test_parse_value(text: str, value: Any) -> None:
    parsed = parse_value(text)
    assert parsed == value and type(parsed) is type(value)


@pytest.mark.parametrize(
    ("arg", "key", "text", "path"),
    [
        ("scaling.maxWorkers=12", "tts-fleet:scaling.maxWorkers", "12", ["scaling", "maxWorkers"]),
        ("tts-fleet:scaling.idleMinutes=15", "tts-fleet:scaling.idleMinutes", "15", None),
        ("aws:region=eu-west-1", "aws:region", "eu-west-1", ["region"]),
        ("alerts.email=a=b@x.io", "tts-fleet:alerts.email", "a=b@x.io", None),
        (
            "scaling.schedules[0].minWorkers=1",
            "tts-fleet:scaling.schedules[0].minWorkers",
            "1",
            ["scaling", "schedules", 0, "minWorkers"],
        ),
    ],
)
def test_parse_setting(arg: str, key: str, text: str, path: list[Any] | None) -> None:
    setting = parse_setting(arg)
    assert (setting.key, setting.text) == (key, text)
    if path is not None:
        assert setting.path == path


@pytest.mark.parametrize("arg", ["scaling.maxWorkers", "=3", "scaling..x=1", "a b=1", ":x=1"])
def test_malformed_settings(arg: str) -> None:
    with pytest.raises(SettingError) as caught:
        parse_setting(arg)
    assert "\n" not in str(caught.value) and repr(arg) in str(caught.value)


def test_apply_setting_with_path_semantics() -> None:
    raw: dict[str, Any] = {"scaling": {"maxWorkers": 4, "schedules": [{"cron": "a"}]}}
    for arg in (
        "scaling.maxWorkers=12",
        "scaling.schedules[0].minWorkers=1",
        "scaling.schedules[1].cron=b",
        "network.mode=endpoints",
    ):
        apply_setting(raw, parse_setting(arg))
    assert raw == {
        "scaling": {"maxWorkers": 12, "schedules": [{"cron": "a", "minWorkers": 1}, {"cron": "b"}]},
        "network": {"mode": "endpoints"},
    }


def test_apply_setting_past_the_end_of_a_list() -> None:
    with pytest.raises(SettingError, match=r"index \[3\] is past the end"):
        apply_setting({"scaling": {"schedules": []}}, parse_setting("scaling.schedules[3].cron=x"))


def test_apply_setting_into_a_scalar() -> None:
    with pytest.raises(SettingError, match="inside a non-object value"):
        apply_setting({"scaling": {"maxWorkers": 4}}, parse_setting("scaling.maxWorkers.x=1"))


def test_validate_merges_the_stack_file(project: Path) -> None:
    config = validate(project, "dev", [parse_setting("scaling.maxWorkers=12")])
    assert (config.scaling.min_workers, config.scaling.max_workers) == (0, 12)
    # Other namespaces are Pulumi's business, not the model's.
    assert validate(project, "dev", [Setting("aws:region", "x", "x")]).scaling.max_workers == 4


def test_validate_lists_every_problem(project: Path) -> None:
    settings = [parse_setting("scaling.maxWorkers=0"), parse_setting("queue.retentionDays=99")]
    with pytest.raises(ConfigError) as caught:
        validate(project, "dev", settings)
    assert caught.value.problems == [
        "tts-fleet:scaling.maxWorkers: must be >= 1 (got 0)",
        "tts-fleet:queue.retentionDays: must be <= 14 (got 99)",
    ]


def test_a_missing_stack_file_is_all_defaults(tmp_path: Path) -> None:
    assert validate(tmp_path, "nope", []).scaling.max_workers == 4
