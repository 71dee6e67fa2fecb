"""`--set key=value` for `tts-fleet deploy`: parse, merge into the stack file, validate.

Everything here runs before Pulumi is touched, so a bad value fails at once with the full
key and the rule from tts_fleet/config/models.py, e.g.
`tts-fleet:scaling.maxWorkers: must be >= 1 (got 0)`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tts_fleet.config.models import NAMESPACE, ConfigError, StackConfig
from tts_fleet.config.stack_file import StackFile, stack_file_path

# A Pulumi config path: name segments joined by dots, list indexes in brackets
# (`scaling.schedules[0].cron`), the same syntax `pulumi config set --path` takes.
_PATH = re.compile(r"^[A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*|\[\d+\])*$")
_SEGMENT = re.compile(r"[A-Za-z_][\w-]*|\[(\d+)\]")
_NAMESPACE = re.compile(r"^[A-Za-z][\w-]*$")
_INT = re.compile(r"^[+-]?\d+$")
_FLOAT = re.compile(r"^[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?$")


class SettingError(ValueError):
    """A malformed `--set`; the message is one line."""


@dataclass(frozen=True)
class Setting:
    """One `--set`: the full Pulumi key, the text Pulumi receives, the value we validate."""

    key: str  # e.g. "tts-fleet:scaling.maxWorkers"
    text: str  # e.g. "12": `pulumi config set --path` stores it as the number 12
    value: Any  # e.g. 12

    @property
    def namespace(self) -> str:
        return self.key.partition(":")[0]

    @property
    def path(self) -> list[str | int]:
        """The key below its namespace as segments: ["scaling", "schedules", 0, "cron"]."""
        rest = self.key.partition(":")[2]
        return [int(m[1]) if m[1] else m[0] for m in _SEGMENT.finditer(rest)]


def parse_value(text: str) -> Any:
    """The scalar `pulumi config set --path` stores for `text`: bool, int, float or str.

    YAML 1.1 would also turn `yes`/`on`/`012` into bools and octals, which Pulumi does not,
    so only the unambiguous forms are converted.
    """
    if text in ("true", "false"):
        return text == "true"
    if _INT.match(text):
        return int(text)
    if _FLOAT.match(text):
        return float(text)
    return text


def parse_setting(arg: str) -> Setting:
    """`scaling.maxWorkers=12` → Setting("tts-fleet:scaling.maxWorkers", "12", 12)."""
    key, sep, text = arg.partition("=")
    key = key.strip()
    if not sep or not key:
        raise SettingError(f"--set {arg!r}: expected key=value, e.g. scaling.maxWorkers=12")
    namespace, colon, path = key.partition(":") if ":" in key else (NAMESPACE, "", key)
    if colon and not _NAMESPACE.match(namespace):
        raise SettingError(f"--set {arg!r}: {namespace!r} is not a config namespace")
    if not _PATH.match(path):
        raise SettingError(
            f"--set {arg!r}: {path!r} is not a config path; use dots and [index], "
            f"e.g. scaling.schedules[0].minWorkers"
        )
    return Setting(key=f"{namespace}:{path}", text=text, value=parse_value(text))


def parse_settings(args: Iterable[str]) -> tuple[Setting, ...]:
    return tuple(parse_setting(arg) for arg in args)


def apply_setting(raw: dict[str, Any], setting: Setting) -> None:
    """Sets `setting` into `raw` with Pulumi's path semantics (creating objects on the way)."""
    path = setting.path
    node: Any = raw
    for depth, segment in enumerate(path):
        last = depth == len(path) - 1
        child: Any = setting.value if last else ({} if isinstance(path[depth + 1], str) else [])
        if isinstance(segment, int):
            if not isinstance(node, list) or segment > len(node):
                raise SettingError(f"{setting.key}: index [{segment}] is past the end of the list")
            if segment == len(node):
                node.append(child)
            elif last:
                node[segment] = child
        else:
            if not isinstance(node, dict):
                raise SettingError(f"{setting.key}: {segment!r} is inside a non-object value")
            if last or segment not in node:
                node[segment] = child
        node = node[segment]


def validate(project_dir: Path, stack: str, settings: Iterable[Setting]) -> StackConfig:
    """The stack file merged with the settings, validated; raises ConfigError or SettingError."""
    path = stack_file_path(stack, project_dir)
    raw = StackFile.load(path).raw if path.exists() else {}
    for setting in settings:
        if setting.namespace == NAMESPACE:
            apply_setting(raw, setting)
    return StackConfig.from_raw(raw)


__all__ = [
    "ConfigError",
    "Setting",
    "SettingError",
    "apply_setting",
    "parse_setting",
    "parse_settings",
    "parse_value",
    "validate",
]
