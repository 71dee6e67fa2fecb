"""What the simulator assumes: timing profiles, the batching model, and the two policies.

Kept apart from the event loop (tts_fleet/sim/engine.py) so the numbers can be read, quoted in
docs/simulate.md and changed without touching the engine.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tts_fleet.scaling.bands import Scaling

# A 14 GB image: vLLM + CUDA + the Qwen3-TTS weights baked in (AWS blog; tts-fleet's Dockerfile
# bakes the weights too, so both profiles pull the same size).
SEED_IMAGE_GB = 14.0


@dataclass(frozen=True)
class Batching:
    """Per-job latency with `c` requests in flight on one GPU: base · (1 + alpha · (c − 1)).

    Throughput at c in flight is c ÷ latency(c): alpha = 0 is perfect batching (c× the
    throughput), alpha = 1 is none (a serial GPU). A job's latency is fixed by the number in
    flight when it starts, which is exact when the slots stay full (a draining backlog).
    """

    base_s: float = 2.0
    alpha: float = 0.0

    def latency(self, in_flight: int) -> float:
        return self.base_s * (1.0 + self.alpha * (in_flight - 1))

    def throughput(self, in_flight: int) -> float:
        return in_flight / self.latency(in_flight)


@dataclass(frozen=True)
class Profile:
    """Timings of one environment. Cold path: placement → provisioning → pull → load → warm-up."""

    name: str
    metric_lag_s: float = 60.0  # SQS metrics reach CloudWatch about a minute late
    task_placement_s: float = 10.0  # service scheduler places the task, asks for a host
    host_provisioning_s: float = 360.0  # launch + boot + ECS agent registration of a GPU host
    host_provisioning_jitter_s: float = 60.0  # each launch takes base + uniform(0, jitter)
    image_gb: float = SEED_IMAGE_GB
    pull_mb_per_s: float = 100.0  # ECR layers through the S3 gateway endpoint, and unpack
    model_load_s: float = 60.0  # weights from the local image into GPU memory
    warmup_s: float = 30.0  # first inference (CUDA graphs, kernels) before the first real job
    batching: Batching = Batching()
    concurrency: int = 1  # worker slots when neither a flag nor a stack file sets them

    @property
    def pull_s(self) -> float:
        return self.image_gb * 1000.0 / self.pull_mb_per_s

    @property
    def cold_task_s(self) -> float:
        """Desired count raised → task ready on a new host (mean provisioning)."""
        return (
            self.task_placement_s
            + self.host_provisioning_s
            + self.host_provisioning_jitter_s / 2
            + self.pull_s
            + self.model_load_s
            + self.warmup_s
        )

    @property
    def warm_task_s(self) -> float:
        """Desired count raised → task ready on a warm host (image already pulled)."""
        return self.task_placement_s + self.model_load_s + self.warmup_s


# The AWS blog's figures: ≈2 min for the alarm (1-minute period + ≈1 min metric lag), 8–9 min
# of GPU host and 14 GB pull (6–7 min + 140 s at 100 MB/s), ≈1 min model load, ≈30 s first
# inference, ≈2 s per warm job on a serial worker: 120 + 10 + 360..420 + 140 + 60 + 30 + 2 s
# = 12.0–13.0 min to the first result (the blog rounds it to ≈13).
# The blog measured a serial worker only, so this profile assumes no batching gain (alpha 1:
# more in flight, same throughput, longer per-job latency).
SEED_PROFILE = Profile(name="seed", batching=Batching(2.0, 1.0))

# tts-fleet's defaults: the same AWS timings (they are AWS's, not ours), but the worker keeps
# `worker.concurrency` = 4 requests in flight so vLLM batches them. alpha = 0.25 is an
# assumption (4 in flight: 3.5 s each, 1.14 jobs/s against 0.5); measure your model and pass
# --job-seconds and --batch-alpha.
DEFAULT_PROFILE = Profile(name="default", batching=Batching(2.0, 0.25), concurrency=4)

PROFILES: dict[str, Profile] = {p.name: p for p in (SEED_PROFILE, DEFAULT_PROFILE)}


# The scalers the simulator knows (tts_fleet/sim/scalers.py): this project's two modes, the
# AWS sample it started from, and the peers a user would otherwise pick.
MODES = ("seed", "aws-sample", "keda", "sagemaker", "alarms", "controller")


@dataclass(frozen=True)
class PolicySetup:
    """Everything the deployment decides: the scaling math's inputs and the host/worker knobs."""

    name: str
    scaling: Scaling
    host_idle_seconds: int  # Managed Instances scaleInAfter; -1 keeps idle hosts forever
    concurrency: int
    mode: str = "alarms"  # which scaler drives the service: one of MODES
    cold_start_work: float = 0.12  # κ, controller mode only (scaling.coldStartWork)

    def with_windows(self, idle_minutes: int, host_idle_seconds: int) -> PolicySetup:
        return replace(
            self,
            scaling=replace(self.scaling, idle_minutes=idle_minutes),
            host_idle_seconds=host_idle_seconds,
        )


def seed_policy() -> PolicySetup:
    """The AWS sample as a config of the very same policy code, not a separate path.

    Its one step — ExactCapacity 1 whenever the queue has work, MaxCapacity 1 — is exactly
    `bands(Scaling(max_workers=1, jobs_per_worker=1))`: one open-ended band [0, ∞) → 1. Its
    scale-in (5 minutes of an empty queue → 0) is AlarmModel's idle rule with idle_minutes=5.
    The sample keeps no idle host for reuse (every scale-out from zero pays provisioning and
    the 14 GB pull again) and processes one job at a time.
    Its alarms read ApproximateNumberOfMessagesVisible alone (the scaler's `visible_only`):
    a message a worker already holds is not "work" to it.
    """
    scaling = Scaling(min_workers=0, max_workers=1, jobs_per_worker=1, idle_minutes=5)
    return PolicySetup("seed", scaling, host_idle_seconds=0, concurrency=1, mode="seed")


def fleet_policy(
    scaling: Scaling,
    host_idle_seconds: int,
    concurrency: int,
    name: str = "fleet",
    *,
    mode: str = "alarms",
    cold_start_work: float = 0.12,
) -> PolicySetup:
    if mode not in MODES:
        raise ValueError(f"unknown policy mode {mode!r} (known: {', '.join(MODES)})")
    return PolicySetup(name, scaling, host_idle_seconds, concurrency, mode, cold_start_work)


# The peers run on the same physics (hosts, pull, model load, jobs) with their own scaling
# and their own host lifetime: a Kubernetes node (Karpenter consolidation of an empty node)
# and a SageMaker instance go with their pod/instance; the aws-sample runs on ECS Managed
# Instances like this project, so it keeps the stack's hostIdleSeconds.
PEER_HOST_IDLE_SECONDS = {"keda": 0, "sagemaker": 0}


def peer_policy(mode: str, base: PolicySetup) -> PolicySetup:
    """`mode` with the base's maxWorkers, minWorkers and worker slots (a user's own fleet
    size), the base's hosts for ECS-hosted peers, and each peer's documented defaults."""
    host_idle = PEER_HOST_IDLE_SECONDS.get(mode, base.host_idle_seconds)
    if mode == "seed":
        return seed_policy()
    return replace(base, name=mode, mode=mode, host_idle_seconds=host_idle)
