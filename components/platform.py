"""Platform: the whole stack from one StackConfig — the only thing `__main__.py` builds.

Composes Network → JobQueue, OutputBucket, WorkerImage → GpuCapacity → WorkerService →
ScalableTarget + the scaling mode (StepScaling for `scaling.mode: alarms`; SafetyNet and
ScalingController for `controller`) and Observability,
and exposes what users and the operator tools need as Outputs.
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws
from pydantic import model_validator

from components.args import ComponentArgs
from components.autoscaling import (
    ModeArgs,
    SafetyNet,
    ScalableTarget,
    ScalableTargetArgs,
    StepScaling,
)
from components.capacity import EndpointEgress, GpuCapacity, GpuCapacityArgs
from components.controller import (
    ScalingController,
    ScalingControllerArgs,
    function_name,
    pool_dashboard_widget,
)
from components.controller import dashboard_widget as controller_widget
from components.image import WorkerImage, WorkerImageArgs
from components.network import Network, NetworkArgs
from components.notifications import CompletionEvents, CompletionEventsArgs
from components.observability import Observability, ObservabilityArgs, Widget
from components.queue import JobQueue, JobQueueArgs
from components.service import WorkerService, WorkerServiceArgs
from components.storage import BucketWriters, BucketWritersArgs, OutputBucket, OutputBucketArgs
from tts_fleet.config import topology
from tts_fleet.config.models import StackConfig
from tts_fleet.scaling.pools import PoolSpec


class PlatformArgs(ComponentArgs):
    config: StackConfig
    stack: str
    worker_dir: str
    # The stack's pools priced from the cost tables (tts_fleet/cost/pools.py::pool_specs, which
    # components may not import: __main__.py passes them), for the controller's environment and
    # the dashboard. Used with gpu.pools only, where their names must be config.pools()'s.
    pools: tuple[PoolSpec, ...] = ()

    @model_validator(mode="after")
    def _pools_are_the_configs(self) -> PlatformArgs:
        if self.config.gpu.pools:
            want = [pool.name for pool in self.config.pools()]
            if [pool.name for pool in self.pools] != want:
                raise ValueError(f"pools must be the priced gpu.pools {want}: pool_specs(config)")
        return self


class Platform(pulumi.ComponentResource):
    queue_url: pulumi.Output[str]
    queue_arn: pulumi.Output[str]
    queue_name: pulumi.Output[str]
    dlq_url: pulumi.Output[str]
    dlq_arn: pulumi.Output[str]
    dlq_name: pulumi.Output[str]
    producer_policy_arn: pulumi.Output[str]
    reader_policy_arn: pulumi.Output[str] | None
    bucket_name: pulumi.Output[str]
    bucket_arn: pulumi.Output[str]
    cluster_name: pulumi.Output[str]
    cluster_arn: pulumi.Output[str]
    service_name: pulumi.Output[str]
    image_uri: pulumi.Output[str]
    image_layer_bytes: pulumi.Output[list[int]] | None  # None: a prebuilt worker.image
    log_group_name: pulumi.Output[str]
    dashboard_url: pulumi.Output[str]
    alerts_topic_arn: pulumi.Output[str]
    controller_function_arn: pulumi.Output[str] | None  # None: scaling.mode is alarms
    events_queue_url: pulumi.Output[str] | None  # None: notifications.enabled is false
    events_consumer_policy_arn: pulumi.Output[str] | None

    def __init__(
        self, name: str, args: PlatformArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("tts-fleet:platform:Platform", name, None, opts)
        cfg, child = args.config, pulumi.ResourceOptions(parent=self)
        # gpu.pools, resolved and priced; both empty without gpu.pools (one pool, as before).
        explicit = cfg.pools() if cfg.gpu.pools else ()
        priced = args.pools if cfg.gpu.pools else ()
        # The provider's region (`aws:region`), partition and account, looked up once here for
        # every component that needs them.
        invoke = pulumi.InvokeOutputOptions(parent=self)
        region = aws.get_region_output(opts=invoke).region
        partition = aws.get_partition_output(opts=invoke).partition
        account_id = aws.get_caller_identity_output(opts=invoke).account_id
        controller_name = (
            function_name(pulumi.get_project(), args.stack)
            if cfg.scaling.mode == "controller"
            else None
        )
        network = Network(
            f"{name}-network",
            NetworkArgs(
                config=cfg.network, region=region, account_id=account_id, partition=partition
            ),
            opts=child,
        )
        bucket = OutputBucket(
            f"{name}-outputs",
            OutputBucketArgs(
                expire_days=cfg.outputs.expire_days,
                on_destroy=cfg.outputs.on_destroy,
                reader_policy=True,
                policy="named-writers",  # BucketWriters, once the writers' roles exist
            ),
            opts=child,
        )
        queue = JobQueue(
            f"{name}-queue",
            JobQueueArgs(
                config=cfg.queue,
                producer_principal_arns=cfg.producers.principal_arns,
                controller_function_name=controller_name,
                books_bucket_arn=bucket.bucket_arn,  # `submit BOOK.epub` writes its record
            ),
            opts=child,
        )
        image = WorkerImage(
            f"{name}-image",
            WorkerImageArgs(
                image=cfg.worker.image,
                worker_dir=args.worker_dir,
                model=cfg.worker.model,
                model_revision=cfg.worker.model_revision,
                base_image=cfg.worker.base_image,
                docker_hub_secret_arn=cfg.worker.docker_hub_secret_arn,
                weights=cfg.worker.weights,
            ),
            opts=child,
        )
        capacity = GpuCapacity(
            f"{name}-capacity",
            GpuCapacityArgs(
                gpu=cfg.gpu,
                host_idle_seconds=cfg.scaling.host_idle_seconds,
                vpc_id=network.vpc_id,
                subnet_ids=network.private_subnet_ids,
                partition=partition,
                region=region,
                endpoints=endpoint_egress(network),
                pools=explicit,
            ),
            opts=child,
        )
        service = WorkerService(
            f"{name}-worker",
            worker_service_args(cfg, network, queue, bucket, image, capacity, region),
            opts=child,
        )
        target = ScalableTarget(
            f"{name}-autoscaling",
            ScalableTargetArgs(
                cluster_name=capacity.cluster_name,
                service_name=service.service_name,
                scaling=cfg.scaling,
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[service]),
        )
        on_target = ModeArgs(
            target=target,
            queue_name=queue.queue_name,
            cluster_name=capacity.cluster_name,
            service_name=service.service_name,
            scaling=cfg.scaling,
            pool_service_names=list(service.service_names.values()),
        )
        # The mode, chosen once: the step policy and its alarms, or the controller function
        # with its safety net and its graph on the dashboard.
        scaling_widget: Widget | None = None
        pool_scaling_widget: Widget | None = None
        self.controller_function_arn = controller_role_arn = None
        on_it = pulumi.ResourceOptions(parent=target)
        if controller_name is None:
            StepScaling(f"{name}-autoscaling", on_target, opts=on_it)
        else:
            SafetyNet(f"{name}-autoscaling", on_target, opts=on_it)
            controller = ScalingController(
                f"{name}-controller",
                ScalingControllerArgs(
                    stack=args.stack,
                    function_name=controller_name,
                    params=topology.controller_params(cfg),
                    queue_url=queue.queue_url,
                    queue_arn=queue.queue_arn,
                    cluster_name=capacity.cluster_name,
                    cluster_arn=capacity.cluster_arn,
                    service_name=service.service_name,
                    bucket_name=bucket.bucket_name,
                    bucket_arn=bucket.bucket_arn,
                    pools=priced,
                    pool_services=service.service_names,
                    placement=cfg.placement() if priced else None,
                ),
                # After the scalable target: the function reads its bounds.
                opts=pulumi.ResourceOptions(parent=self, depends_on=[target]),
            )
            self.controller_function_arn = controller.function_arn
            controller_role_arn = controller.role_arn
            scaling_widget = controller_widget(args.stack)
            if priced:
                pool_scaling_widget = pool_dashboard_widget(args.stack, priced)
        # After both writers' roles: each role's policy names the bucket, its policy names them.
        BucketWriters(
            f"{name}-outputs-writers",
            BucketWritersArgs(
                bucket=bucket,
                task_role_arn=service.task_role_arn,
                controller_role_arn=controller_role_arn,
                break_glass_principal_arns=cfg.outputs.break_glass_principal_arns,
                cache_writer=cfg.worker.weights == "s3",
            ),
            opts=child,
        )
        observability = Observability(
            f"{name}-observability",
            ObservabilityArgs(
                stack=args.stack,
                region=region,
                queue_name=queue.queue_name,
                dlq_name=queue.dlq_name,
                cluster_name=capacity.cluster_name,
                service_name=service.service_name,
                alerts=cfg.alerts,
                scaling_widget=scaling_widget,
                account_id=account_id,
                partition=partition,
                controller_function_name=controller_name,
                pools=priced,
                pool_services=service.service_names,
                pool_scaling_widget=pool_scaling_widget,
            ),
            opts=child,
        )
        self.events_queue_url = self.events_consumer_policy_arn = None
        if cfg.notifications.enabled:
            events = CompletionEvents(
                f"{name}-events", CompletionEventsArgs(bucket_name=bucket.bucket_name), opts=child
            )
            self.events_queue_url = events.queue_url
            self.events_consumer_policy_arn = events.consumer_policy_arn
        self.dashboard_url = observability.dashboard_url
        self.alerts_topic_arn = observability.alerts_topic_arn
        self._expose(queue, bucket, capacity, service, image)
        self.register_outputs(
            {
                "queue_url": self.queue_url,
                "dlq_url": self.dlq_url,
                "producer_policy_arn": self.producer_policy_arn,
                "reader_policy_arn": self.reader_policy_arn,
                "bucket_name": self.bucket_name,
                "cluster_name": self.cluster_name,
                "service_name": self.service_name,
                "image_uri": self.image_uri,
                "log_group_name": self.log_group_name,
                "dashboard_url": self.dashboard_url,
                "alerts_topic_arn": self.alerts_topic_arn,
                "controller_function_arn": self.controller_function_arn,
                "events_queue_url": self.events_queue_url,
                "events_consumer_policy_arn": self.events_consumer_policy_arn,
            }
        )

    def _expose(
        self,
        queue: JobQueue,
        bucket: OutputBucket,
        capacity: GpuCapacity,
        service: WorkerService,
        image: WorkerImage,
    ) -> None:
        self.queue_url, self.queue_arn, self.queue_name = (
            queue.queue_url,
            queue.queue_arn,
            queue.queue_name,
        )
        self.dlq_url, self.dlq_arn, self.dlq_name = queue.dlq_url, queue.dlq_arn, queue.dlq_name
        self.producer_policy_arn = queue.producer_policy_arn
        self.bucket_name, self.bucket_arn = bucket.bucket_name, bucket.bucket_arn
        self.reader_policy_arn = bucket.reader_policy_arn
        self.cluster_name, self.cluster_arn = capacity.cluster_name, capacity.cluster_arn
        self.service_name = service.service_name
        self.image_uri = image.image_uri
        self.image_layer_bytes = image.layer_bytes
        self.log_group_name = service.log_group_name


def endpoint_egress(network: Network) -> EndpointEgress | None:
    """The hosts' egress targets when the network has endpoints (`endpoints` mode)."""
    group, prefix_list = network.endpoints_security_group_id, network.s3_prefix_list_id
    if group is None or prefix_list is None:
        return None
    return EndpointEgress(security_group_id=group, s3_prefix_list_id=prefix_list)


def worker_service_args(
    cfg: StackConfig,
    network: Network,
    queue: JobQueue,
    bucket: OutputBucket,
    image: WorkerImage,
    capacity: GpuCapacity,
    region: pulumi.Output[str],
) -> WorkerServiceArgs:
    """Everything the worker task needs to know, from the config and its sibling components."""
    return WorkerServiceArgs(
        worker=cfg.worker,
        queue=cfg.queue,
        gpu_count=cfg.gpu.gpu_count,
        min_memory_gib=cfg.gpu.memory_gib.min,
        cluster_arn=capacity.cluster_arn,
        cluster_name=capacity.cluster_name,
        capacity_provider_name=capacity.capacity_provider_name,
        subnet_ids=network.private_subnet_ids,
        security_group_id=capacity.security_group_id,
        image_uri=image.image_uri,
        repository_arns=image.repository_arns,
        queue_url=queue.queue_url,
        queue_arn=queue.queue_arn,
        dlq_url=queue.dlq_url,
        dlq_arn=queue.dlq_arn,
        bucket_name=bucket.bucket_name,
        bucket_arn=bucket.bucket_arn,
        region=region,
        pool_providers=capacity.capacity_provider_names,
    )
