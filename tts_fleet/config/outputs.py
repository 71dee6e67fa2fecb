"""The stack's output names: exported by `__main__.py`, read by `tts_fleet/client/stack.py`.

Pure constants, so the Pulumi program and the operator tools share them without importing
each other.
"""

from __future__ import annotations

QUEUE_URL = "queueUrl"
DLQ_URL = "dlqUrl"
BUCKET_NAME = "bucketName"
CLUSTER_NAME = "clusterName"
SERVICE_NAME = "serviceName"
PRODUCER_POLICY_ARN = "producerPolicyArn"
READER_POLICY_ARN = "readerPolicyArn"
IMAGE_URI = "imageUri"
# The compressed size of each worker image layer in pull order; null for a prebuilt image.
IMAGE_LAYER_BYTES = "imageLayerBytes"
DASHBOARD_URL = "dashboardUrl"
ALERTS_TOPIC_ARN = "alertsTopicArn"
CONTROLLER_FUNCTION_ARN = "controllerFunctionArn"  # only with scaling.mode: controller
EVENTS_QUEUE_URL = "eventsQueueUrl"  # null unless notifications.enabled
EVENTS_CONSUMER_POLICY_ARN = "eventsConsumerPolicyArn"  # null unless notifications.enabled
# worker.maxTextChars: the longest text the workers take, so submit, wait and results read a
# job file with the limit the deployed stack applies (not the stack file on this machine).
MAX_TEXT_CHARS = "maxTextChars"
# scaling.deadlineMinutes (issue #23): the deadline `submit` gives a batch sent without
# --deadline/--within; 0 or absent (a stack deployed before it): no deadline.
DEADLINE_MINUTES = "deadlineMinutes"

ALL = (
    QUEUE_URL,
    DLQ_URL,
    BUCKET_NAME,
    CLUSTER_NAME,
    SERVICE_NAME,
    PRODUCER_POLICY_ARN,
    READER_POLICY_ARN,
    IMAGE_URI,
    IMAGE_LAYER_BYTES,
    DASHBOARD_URL,
    ALERTS_TOPIC_ARN,
    CONTROLLER_FUNCTION_ARN,
    EVENTS_QUEUE_URL,
    EVENTS_CONSUMER_POLICY_ARN,
    MAX_TEXT_CHARS,
    DEADLINE_MINUTES,
)
