"""WorkerService: the GPU task definition, its two roles, its log group and the ECS service.

One container runs vLLM-Omni (the model server on 127.0.0.1:SPEECH_PORT) and the worker
(`worker/entrypoint.sh`). The service starts at desired count 0 and ignores `desiredCount`
afterwards: the scaling mode owns it (the controller or the step policy), and `pulumi up`
must not reset a running fleet to 0.

`force_new_deployment` is on: changing `gpu.capacityType` replaces the capacity provider, so
the service's capacity provider strategy changes, and the ECS provider under pulumi-aws
refuses that update without it ("force_new_deployment should be true when
capacity_provider_strategy is being updated"). It starts a deployment only when the service
is updated, which a new task definition does anyway.

One service per capacity pool (`gpu.pools`, issue #22), each with its own pool's provider and
the same task definition, network and roles: a strategy cannot be changed without a new
deployment, so the controller steers pools by each service's desired count. Without
`gpu.pools` the one service keeps its name (`<name>-service`); with them each is
`<name>-service-<pool>`, the first aliased to the old name so its running tasks carry on.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

import pulumi
import pulumi_aws as aws
from pydantic import Field

from components.args import ComponentArgs, StrInput
from components.iam import same_account_condition, trust_policy
from components.service_policies import (
    CONTAINER_NAME,
    execution_policy,
    task_policy,
    task_protection_arn,
)
from tts_fleet.config.models import QueueConfig, WorkerConfig, memory_reservation_mib
from tts_fleet.scaling.pools import PoolSpec
from worker.settings import (
    DATA_DIR,
    DEFAULT_ASR_URL,
    DEFAULT_SPEECH_URL,
    WEIGHTS_DIR,
    WEIGHTS_DIR_ENV,
    WEIGHTS_URI_ENV,
    weights_prefix,
    worker_env,
)

LOG_RETENTION_DAYS = 30
# `worker.weights: s3`: the task's scratch volume for the fetched weights (and the caches). No
# host path: ECS gives the task its own directory on the host's data volume (the NVMe
# instance store with `gpu.localStorage`), removed when the task stops.
DATA_VOLUME = "data"
# Read by vLLM, not by the worker: load the image's CUDA forward-compatibility libraries.
CUDA_COMPATIBILITY_ENV = "VLLM_ENABLE_CUDA_COMPATIBILITY"


def worker_environment(
    worker: WorkerConfig,
    queue: QueueConfig,
    *,
    queue_url: str,
    dlq_url: str,
    bucket: str,
    region: str,
    stack: str,
    pool_usd_per_hour: Mapping[str, float] | None = None,
) -> list[dict[str, str]]:
    """The env contract of `python -m worker` (DESIGN §3.4), written by the worker's own
    `worker_env`; called with resolved values, inside the task definition's `apply`. Plus
    vLLM's own CUDA-compatibility switch when `worker.cudaCompatibility` is set."""
    values = worker_env(
        queue_url=queue_url,
        dlq_url=dlq_url,
        output_bucket=bucket,
        output_prefix="",
        aws_region=region,
        speech_url=DEFAULT_SPEECH_URL,  # vLLM-Omni beside the worker, in the same container
        speech_model=worker.model,
        speech_task_type=worker.task_type,  # the checkpoint's task (library voices' kind)
        concurrency=worker.concurrency,
        visibility_timeout=queue.visibility_timeout_seconds,
        max_text_chars=worker.max_text_chars,
        stop_timeout_seconds=worker.stop_timeout_seconds,
        stack_name=stack,
        # Output checks (worker/qa/); the ASR server is beside vLLM-Omni (worker/asr_server.sh).
        qa_mode=worker.qa.mode,
        qa_retries=worker.qa.retries,
        qa_max_wer=worker.qa.max_wer,
        qa_on_fail=worker.qa.on_fail,
        asr_url=DEFAULT_ASR_URL,
        asr_model=worker.qa.asr_model,
    )
    if pool_usd_per_hour:
        # One task definition serves every pool: the worker picks its price by its host's
        # life cycle (worker/throughput.py).
        prices = json.dumps(dict(sorted(pool_usd_per_hour.items())), separators=(",", ":"))
        values.update(worker_env(pool_usd_per_hour=prices))
    if worker.cuda_compatibility:
        values[CUDA_COMPATIBILITY_ENV] = "1"
    if worker.weights == "s3":
        # Read by worker/entrypoint.sh: fetch the snapshot here, into the data volume.
        prefix = weights_prefix(worker.model, worker.model_revision)
        values[WEIGHTS_URI_ENV] = f"s3://{bucket}/{prefix}"
        values[WEIGHTS_DIR_ENV] = WEIGHTS_DIR
    return [{"name": k, "value": v} for k, v in values.items()]


def pool_prices(pools: Iterable[PoolSpec]) -> dict[str, float]:
    """Each capacity type's worker-hour price: its first pool's in the stack's order (the
    preferred one), for the manifest's cost estimate (POOL_USD_PER_HOUR)."""
    prices: dict[str, float] = {}
    for pool in pools:
        prices.setdefault(pool.capacity_type, pool.usd_per_hour)
    return prices


class WorkerServiceArgs(ComponentArgs):
    worker: WorkerConfig
    queue: QueueConfig
    gpu_count: int = Field(ge=1)
    min_memory_gib: int = Field(ge=1)
    cluster_arn: str | pulumi.Output[str]
    cluster_name: str | pulumi.Output[str]
    capacity_provider_name: str | pulumi.Output[str]
    subnet_ids: list[str] | pulumi.Output[list[str]]
    security_group_id: str | pulumi.Output[str]
    image_uri: str | pulumi.Output[str]
    repository_arns: list[str] | pulumi.Output[list[str]]
    queue_url: str | pulumi.Output[str]
    queue_arn: str | pulumi.Output[str]
    dlq_url: str | pulumi.Output[str]
    dlq_arn: str | pulumi.Output[str]
    bucket_name: str | pulumi.Output[str]
    bucket_arn: str | pulumi.Output[str]
    region: str | pulumi.Output[str]  # the stack's, resolved once by Platform
    # Each pool's capacity provider by pool name, in the stack's order (gpu.pools); empty: one
    # service on `capacity_provider_name`, as before pools.
    pool_providers: dict[str, StrInput] = Field(default_factory=dict)
    # pool_prices(the stack's priced pools): POOL_USD_PER_HOUR; empty: no cost estimate.
    pool_usd_per_hour: dict[str, float] = Field(default_factory=dict)


class WorkerService(pulumi.ComponentResource):
    service_name: pulumi.Output[str]  # the first pool's
    # Each pool's service name by pool name, in the stack's order; empty without gpu.pools.
    service_names: dict[str, pulumi.Output[str]]
    log_group_name: pulumi.Output[str]
    task_definition_arn: pulumi.Output[str]
    task_role_arn: pulumi.Output[str]

    def __init__(
        self, name: str, args: WorkerServiceArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("tts-fleet:service:WorkerService", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        logs = aws.cloudwatch.LogGroup(
            f"{name}-logs", retention_in_days=LOG_RETENTION_DAYS, opts=child
        )
        execution_role = self._role(
            name, "execution", execution_policy(args.repository_arns, logs.arn), args.cluster_arn
        )
        protection = task_protection_arn(args.cluster_arn, args.cluster_name)
        permissions = task_policy(
            queue_arn=args.queue_arn,
            dlq_arn=args.dlq_arn,
            bucket_arn=args.bucket_arn,
            protection_arn=protection,
            s3_weights=args.worker.weights == "s3",
            voices=args.worker.task_type != "CustomVoice",  # its jobs name library voices
        )
        task_role = self._role(name, "task", permissions, args.cluster_arn)
        task_definition = aws.ecs.TaskDefinition(
            f"{name}-task",
            family=f"{pulumi.get_project()}-{pulumi.get_stack()}-worker",
            requires_compatibilities=["MANAGED_INSTANCES"],
            network_mode="awsvpc",
            execution_role_arn=execution_role.arn,
            task_role_arn=task_role.arn,
            container_definitions=self._containers(args, logs.name),
            volumes=[{"name": DATA_VOLUME}] if args.worker.weights == "s3" else None,
            opts=child,
        )
        pools = list(args.pool_providers.items())
        self.service_names = {
            pool: self._service(name, args, task_definition, provider, pool, first=i == 0)
            for i, (pool, provider) in enumerate(pools)
        }
        self.service_name = (
            next(iter(self.service_names.values()))
            if pools
            else self._service(name, args, task_definition, args.capacity_provider_name)
        )
        self.log_group_name = logs.name
        self.task_definition_arn = task_definition.arn
        self.task_role_arn = task_role.arn  # the one writer of outputs/ and failures/
        self.register_outputs(
            {
                "service_name": self.service_name,
                "log_group_name": self.log_group_name,
                # Only with gpu.pools: a stack without them registers what it always did.
                **({"service_names": self.service_names} if pools else {}),
            }
        )

    def _service(
        self,
        name: str,
        args: WorkerServiceArgs,
        task_definition: aws.ecs.TaskDefinition,
        capacity_provider: StrInput,
        pool: str | None = None,
        first: bool = True,
    ) -> pulumi.Output[str]:
        """One pool's service (None: the one service of a stack without gpu.pools)."""
        moved = pool is not None and first  # takes over the service a stack without pools had
        service = aws.ecs.Service(
            f"{name}-service" if pool is None else f"{name}-service-{pool}",
            cluster=args.cluster_arn,
            task_definition=task_definition.arn,
            desired_count=0,
            capacity_provider_strategies=[
                {"capacity_provider": capacity_provider, "weight": 1, "base": 0}
            ],
            network_configuration={
                "subnets": args.subnet_ids,
                "security_groups": [args.security_group_id],
                "assign_public_ip": False,
            },
            deployment_circuit_breaker={"enable": True, "rollback": True},
            propagate_tags="SERVICE",
            enable_ecs_managed_tags=True,
            force_new_deployment=True,
            # The scaling mode owns desiredCount; `pulumi up` must not reset a busy fleet to 0.
            opts=pulumi.ResourceOptions(
                parent=self,
                ignore_changes=["desiredCount"],
                aliases=[pulumi.Alias(name=f"{name}-service")] if moved else None,
            ),
        )
        return service.name

    def _role(
        self, name: str, kind: str, policy: dict, cluster_arn: pulumi.Input[str]
    ) -> aws.iam.Role:
        child = pulumi.ResourceOptions(parent=self)
        role = aws.iam.Role(
            f"{name}-{kind}-role",
            assume_role_policy=pulumi.Output.json_dumps(
                trust_policy(
                    "ecs-tasks.amazonaws.com",
                    same_account_condition(cluster_arn, "ecs"),
                )
            ),
            opts=child,
        )
        aws.iam.RolePolicy(
            f"{name}-{kind}-policy",
            role=role.id,
            policy=pulumi.Output.json_dumps(policy),
            opts=child,
        )
        return role

    @staticmethod
    def _containers(args: WorkerServiceArgs, log_group: pulumi.Output[str]) -> pulumi.Output[str]:
        # Checked here, while the program runs, not inside the apply.
        reservation = memory_reservation_mib(args.min_memory_gib, args.worker.shared_memory_mib)
        stack = pulumi.get_stack()

        def render(values: list[str]) -> str:
            image, queue_url, dlq_url, bucket, group, region = values
            container = {
                "name": CONTAINER_NAME,
                "image": image,
                "essential": True,
                "memoryReservation": reservation,
                "resourceRequirements": [{"type": "GPU", "value": str(args.gpu_count)}],
                # vLLM's processes share tensors through /dev/shm; Docker's default is 64 MiB.
                # The API reference excludes sharedMemorySize only for Fargate.
                # https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_LinuxParameters.html
                "linuxParameters": {"sharedMemorySize": args.worker.shared_memory_mib},
                "stopTimeout": args.worker.stop_timeout_seconds,
                "environment": worker_environment(
                    args.worker,
                    args.queue,
                    queue_url=queue_url,
                    dlq_url=dlq_url,
                    bucket=bucket,
                    region=region,
                    stack=stack,
                    pool_usd_per_hour=args.pool_usd_per_hour,
                ),
                "logConfiguration": {
                    "logDriver": "awslogs",
                    "options": {
                        "awslogs-group": group,
                        "awslogs-region": region,
                        "awslogs-stream-prefix": "worker",
                    },
                },
            }
            if args.worker.weights == "s3":
                container["mountPoints"] = [
                    {"sourceVolume": DATA_VOLUME, "containerPath": DATA_DIR}
                ]
            return json.dumps([container])

        return pulumi.Output.all(
            args.image_uri, args.queue_url, args.dlq_url, args.bucket_name, log_group, args.region
        ).apply(render)
