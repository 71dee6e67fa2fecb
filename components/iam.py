"""IAM statements shared by the components: service trust policies and the TLS-only deny."""

from __future__ import annotations

import json

import pulumi


def deny_insecure_transport(
    resource: pulumi.Input[str] | list[str] | list[pulumi.Output[str]], actions: str
) -> dict:
    """The statement every queue, bucket and topic policy carries: no request without TLS."""
    return {
        "Sid": "DenyInsecureTransport",
        "Effect": "Deny",
        "Principal": "*",
        "Action": actions,
        "Resource": resource,
        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
    }


def assume_role(service: str) -> str:
    return json.dumps(trust_policy(service))


def trust_policy(service: str, condition: dict | None = None) -> dict:
    """A service trust policy; `condition` guards against the confused deputy."""
    statement: dict = {
        "Effect": "Allow",
        "Principal": {"Service": service},
        "Action": "sts:AssumeRole",
    }
    if condition:
        statement["Condition"] = condition
    return {"Version": "2012-10-17", "Statement": [statement]}


def same_account_condition(resource_arn: pulumi.Input[str], service: str) -> dict:
    """Only this account's `service` resources may assume the role (ARN fields 2–4)."""
    parts = pulumi.Output.from_input(resource_arn).apply(lambda arn: arn.split(":"))
    return {
        "StringEquals": {"aws:SourceAccount": parts.apply(lambda p: p[4])},
        "ArnLike": {
            "aws:SourceArn": parts.apply(lambda p: f"arn:{p[1]}:{service}:{p[3]}:{p[4]}:*")
        },
    }


def cluster_task_arns(cluster_arn: str, cluster: str) -> str:
    """Every task of this cluster: `arn:<partition>:ecs:<region>:<account>:task/<cluster>/*`."""
    _, partition, _, region, account = cluster_arn.split(":")[:5]
    return f"arn:{partition}:ecs:{region}:{account}:task/{cluster}/*"
