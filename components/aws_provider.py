"""The explicit AWS provider's arguments, from the stack's own `aws:` config.

An explicit `aws.Provider` reads none of the stack's `aws:` keys by itself (only the
environment), so a stack file's `aws:region`, `aws:profile`, `aws:assumeRoles` and
`aws:allowedAccountIds` would be silently ignored: the deploy would go to whatever account the
shell's credentials name. Each key is passed on when set, and only then.
https://www.pulumi.com/registry/packages/aws/api-docs/provider/
"""

from __future__ import annotations

import re
from typing import Any

import pulumi
import pulumi_aws as aws

_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


def snake_keys(value: Any) -> Any:
    """`{"roleArn": …, "sessionName": …}` (config spelling) -> `{"role_arn": …, …}` (SDK)."""
    if isinstance(value, dict):
        return {_CAMEL.sub("_", k).lower(): snake_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [snake_keys(v) for v in value]
    return value


def provider_args(stack: str, project: str, config: pulumi.Config | None = None) -> dict:
    """Keyword arguments for `aws.Provider`: the region, the cost-allocation default tags, and
    the credentials-selecting keys the stack's `aws:` config sets."""
    aws_config = config or pulumi.Config("aws")
    args: dict[str, Any] = {
        "region": aws_config.get("region"),
        # Every resource carries the cost-allocation tags (budgets and `tts-fleet cost` use them).
        "default_tags": {"tags": {"tts-fleet:stack": stack, "tts-fleet:project": project}},
    }
    profile = aws_config.get("profile")
    if profile:
        args["profile"] = profile
    roles = aws_config.get_object("assumeRoles")
    if roles:
        # One role or a chain; each entry's keys as the config spells them (roleArn, ...).
        # Typed args: the engine gets the schema's names, and an unknown key is a TypeError.
        entries = snake_keys(roles if isinstance(roles, list) else [roles])
        args["assume_roles"] = [aws.ProviderAssumeRoleArgs(**entry) for entry in entries]
    accounts = aws_config.get_object("allowedAccountIds")
    if accounts:
        args["allowed_account_ids"] = [str(a) for a in accounts]
    return args
