"""The stack config as the running Pulumi program sees it: `pulumi.Config` -> StackConfig.

The models and their rules are pure (`tts_fleet.config.models`), so the CLI validates stack
files without the Pulumi engine; only this loader needs the Pulumi runtime.
"""

from __future__ import annotations

from typing import Any

import pulumi
from pulumi.runtime import config as runtime_config

from tts_fleet.config.models import NAMESPACE, StackConfig


def load_stack_config() -> StackConfig:
    """Reads the `tts-fleet` namespace of the running Pulumi stack; raises ConfigError."""
    config = pulumi.Config(NAMESPACE)
    raw: dict[str, Any] = {}
    for full_key in _pulumi_config_keys():
        namespace, _, name = full_key.partition(":")
        if namespace != NAMESPACE:
            continue
        try:
            raw[name] = config.get_object(name)
        except pulumi.ConfigTypeError:
            raw[name] = config.get(name)  # not JSON: let the model say what it expected
    return StackConfig.from_raw(raw)


def _pulumi_config_keys() -> list[str]:
    return sorted({*runtime_config.CONFIG.get(), *runtime_config.get_config_env()})
