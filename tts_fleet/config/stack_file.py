"""The one reader of a `Pulumi.<stack>.yaml` outside the Pulumi engine.

Every command that takes `--stack` with a project directory (`scaling`, `simulate`, `advise`,
`cost`, `local --stack`, `preflight`, `deploy`) reads the file through `StackFile`: its
region, its raw `tts-fleet:*` entries, and the validated `StackConfig` with the command's
flags laid over the file's own values. `pulumi up` reads the same keys through
`components/stack_config.py` and validates them with the same `StackConfig.from_raw`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tts_fleet.config.models import NAMESPACE, ConfigError, StackConfig

REGION_KEY = "aws:region"


def stack_file_path(stack: str, project_dir: str | Path = ".") -> Path:
    return Path(project_dir) / f"Pulumi.{stack}.yaml"


@dataclass(frozen=True)
class StackFile:
    """One stack file's `config:` mapping, as written (nothing validated yet)."""

    path: Path
    entries: Mapping[str, Any]

    @classmethod
    def load(cls, path: str | Path) -> StackFile:
        """ConfigError (file:line:column) when the file is not a Pulumi stack file's YAML;
        a missing file stays FileNotFoundError."""
        return cls(Path(path), _config_entries(Path(path)))

    @classmethod
    def of_stack(cls, stack: str, project_dir: str | Path = ".") -> StackFile:
        """The file of `stack` in `project_dir`; ConfigError when there is none."""
        path = stack_file_path(stack, project_dir)
        if not path.is_file():
            raise ConfigError([f"{path}: no such stack file (stacks are Pulumi.<stack>.yaml)"])
        return cls.load(path)

    @property
    def region(self) -> str | None:
        region = self.entries.get(REGION_KEY)
        return str(region) if region else None

    @property
    def raw(self) -> dict[str, Any]:
        """The `tts-fleet:*` entries as `{section: value}`, as written."""
        prefix = f"{NAMESPACE}:"
        return {
            str(key)[len(prefix) :]: value
            for key, value in self.entries.items()
            if str(key).startswith(prefix)
        }

    def config(self, overrides: Mapping[str, Mapping[str, Any]] | None = None) -> StackConfig:
        """The validated config, with `overrides` (`{section: {key: value}}`, None values
        ignored) laid over the file's own keys. ConfigError names every bad key."""
        return StackConfig.from_raw(with_overrides(self.raw, overrides or {}))


def with_overrides(
    raw: Mapping[str, Any], overrides: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """`raw` with each section's non-None override values set over it (one level deep)."""
    merged = dict(raw)
    for section, values in overrides.items():
        present = {key: value for key, value in values.items() if value is not None}
        if present:
            base = merged.get(section)
            merged[section] = {**(base if isinstance(base, Mapping) else {}), **present}
    return merged


def stack_config(
    stack: str | None,
    project_dir: str | Path = ".",
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> StackConfig:
    """The stack's config (the defaults without a stack) with `overrides` on top."""
    if stack is None:
        return StackConfig.from_raw(with_overrides({}, overrides or {}))
    return StackFile.of_stack(stack, project_dir).config(overrides)


def stack_region(stack: str | None, project_dir: str | Path = ".") -> str | None:
    """The stack file's `aws:region`, if it has a file and sets one."""
    if stack is None:
        return None
    path = stack_file_path(stack, project_dir)
    return StackFile.load(path).region if path.is_file() else None


def _config_entries(path: Path) -> dict[Any, Any]:
    import yaml

    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except UnicodeDecodeError as error:
        raise ConfigError([f"{path}: not UTF-8 text (byte {error.start})"]) from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = getattr(error, "problem", None) or "cannot be parsed"
        raise ConfigError([f"{where}: not valid YAML: {problem}"]) from None
    if not isinstance(document, dict):
        kind = type(document).__name__
        raise ConfigError([f"{path}: a stack file is a mapping with a `config:` key, not a {kind}"])
    entries = document.get("config") or {}
    if not isinstance(entries, dict):
        raise ConfigError([f"{path}: `config:` must be a mapping of keys to values"])
    return entries
