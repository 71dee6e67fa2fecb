"""tts-fleet Pulumi program: wiring only (DESIGN §2). Everything else lives in components/."""

from __future__ import annotations

from pathlib import Path

import pulumi
import pulumi_aws as aws

from components.aws_provider import provider_args
from components.platform import Platform, PlatformArgs
from components.stack_config import load_stack_config
from tts_fleet.config import outputs
from tts_fleet.config.models import ConfigError
from tts_fleet.cost.pools import pool_specs
from tts_fleet.cost.report import BASE_REGION

PROJECT = "tts-fleet"
WORKER_DIR = Path(__file__).resolve().parent / "worker"

stack = pulumi.get_stack()
try:
    config = load_stack_config()
except ConfigError as error:
    # RunError prints just the message: one line per problem, no traceback.
    raise pulumi.RunError(
        f"invalid stack config for '{stack}':\n" + "\n".join(error.problems)
    ) from None

# An explicit provider reads only the environment unless told, so it gets the stack's `aws:`
# region, profile, assumed roles and allowed accounts, and the cost-allocation default tags.
provider = aws.Provider("aws", **provider_args(stack, PROJECT))
platform = Platform(
    PROJECT,
    PlatformArgs(
        config=config,
        stack=stack,
        worker_dir=str(WORKER_DIR),
        # What a worker of each pool costs an hour, priced in the stack's region; the
        # components cannot read the cost tables themselves.
        pools=pool_specs(config, pulumi.Config("aws").get("region") or BASE_REGION),
    ),
    opts=pulumi.ResourceOptions(providers=[provider]),
)

exports = {
    outputs.QUEUE_URL: platform.queue_url,
    outputs.DLQ_URL: platform.dlq_url,
    outputs.BUCKET_NAME: platform.bucket_name,
    outputs.CLUSTER_NAME: platform.cluster_name,
    outputs.SERVICE_NAME: platform.service_name,
    outputs.PRODUCER_POLICY_ARN: platform.producer_policy_arn,
    outputs.READER_POLICY_ARN: platform.reader_policy_arn,
    outputs.IMAGE_URI: platform.image_uri,
    # Always exported, null for a prebuilt worker.image (not built, so not measured here).
    outputs.IMAGE_LAYER_BYTES: platform.image_layer_bytes,
    outputs.DASHBOARD_URL: platform.dashboard_url,
    outputs.ALERTS_TOPIC_ARN: platform.alerts_topic_arn,
    # Always exported, null when off, so a client reads "no events queue" and polls S3.
    outputs.EVENTS_QUEUE_URL: platform.events_queue_url,
    outputs.EVENTS_CONSUMER_POLICY_ARN: platform.events_consumer_policy_arn,
}
if platform.controller_function_arn is not None:  # scaling.mode: controller
    exports[outputs.CONTROLLER_FUNCTION_ARN] = platform.controller_function_arn
for name, value in exports.items():
    pulumi.export(name, value)
pulumi.export(outputs.MAX_TEXT_CHARS, config.worker.max_text_chars)
pulumi.export(outputs.DEADLINE_MINUTES, config.scaling.deadline_minutes)
