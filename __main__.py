"""tts-fleet Pulumi program: wiring only (DESIGN §2). Everything else lives in components/."""

from __future__ import annotations

from pathlib import Path

import pulumi
import pulumi_aws as aws

from components.platform import Platform, PlatformArgs
from components.stack_config import load_stack_config
from tts_fleet.spec.config import ConfigError

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

# Every resource carries the cost-allocation tags (budgets and `tts-fleet cost` use them).
# An explicit provider reads only AWS_REGION unless told, so pass the stack's `aws:region`.
provider = aws.Provider(
    "aws",
    region=aws.config.region,
    default_tags={"tags": {"tts-fleet:stack": stack, "tts-fleet:project": PROJECT}},
)
platform = Platform(
    PROJECT,
    PlatformArgs(config=config, stack=stack, worker_dir=str(WORKER_DIR)),
    opts=pulumi.ResourceOptions(providers=[provider]),
)

pulumi.export("queueUrl", platform.queue_url)
pulumi.export("dlqUrl", platform.dlq_url)
pulumi.export("bucketName", platform.bucket_name)
pulumi.export("clusterName", platform.cluster_name)
pulumi.export("serviceName", platform.service_name)
pulumi.export("producerPolicyArn", platform.producer_policy_arn)
pulumi.export("imageUri", platform.image_uri)
pulumi.export("dashboardUrl", platform.dashboard_url)
pulumi.export("alertsTopicArn", platform.alerts_topic_arn)
