"""What the simulator runs: the deployment choices (`PolicySetup`), one per scaler mode.

The timings it runs them on (profiles, the batching law) are tts_fleet/scaling/physics.py.
Kept apart from the event loop (tts_fleet/sim/engine.py) so the choices can be read, quoted
in docs/simulate.md and changed without touching the engine.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tts_fleet.config.models import ScalingConfig
from tts_fleet.scaling.bands import Scaling
from tts_fleet.scaling.pools import PlacementParams, PoolSpec

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
    mode: str  # which scaler drives the service: one of MODES
    cold_start_work: float  # κ, controller mode only (scaling.coldStartWork)
    # Capacity pools (gpu.pools, issue #22), priced; () is one service, as before them.
    pools: tuple[PoolSpec, ...] = ()
    placement: PlacementParams | None = None  # their timeout and cooldown, with pools

    def with_windows(self, idle_minutes: int, host_idle_seconds: int) -> PolicySetup:
        return replace(
            self,
            scaling=replace(self.scaling, idle_minutes=idle_minutes),
            host_idle_seconds=host_idle_seconds,
        )


def seed_policy() -> PolicySetup:
    """The AWS sample as a config of the very same policy code, not a separate path.

    Its one step — ExactCapacity 1 whenever the queue has work, MaxCapacity 1 — is exactly
    `bands(Scaling(0, 1, 1, 5))`: one open-ended band [0, ∞) → 1. Its
    scale-in (5 minutes of an empty queue → 0) is AlarmModel's idle rule with idle_minutes=5.
    The sample keeps no idle host for reuse (every scale-out from zero pays provisioning and
    the 14 GB pull again) and processes one job at a time.
    Its alarms read ApproximateNumberOfMessagesVisible alone (the scaler's `visible_only`):
    a message a worker already holds is not "work" to it.
    """
    scaling = Scaling(min_workers=0, max_workers=1, jobs_per_worker=1, idle_minutes=5)
    # κ is the controller's; the seed has none, so no value of it can matter here.
    return PolicySetup("seed", scaling, 0, concurrency=1, mode="seed", cold_start_work=0.0)


def fleet_policy(
    scaling: Scaling,
    host_idle_seconds: int,
    concurrency: int,
    name: str = "fleet",
    *,
    mode: str,
    cold_start_work: float,
) -> PolicySetup:
    if mode not in MODES:
        raise ValueError(f"unknown policy mode {mode!r} (known: {', '.join(MODES)})")
    return PolicySetup(name, scaling, host_idle_seconds, concurrency, mode, cold_start_work)


def stack_policy(cfg: ScalingConfig, concurrency: int, name: str = "fleet") -> PolicySetup:
    """What a stack's `tts-fleet:scaling` deploys: its mode, bounds, windows and κ."""
    scaling = Scaling(cfg.min_workers, cfg.max_workers, cfg.jobs_per_worker, cfg.idle_minutes)
    return fleet_policy(
        scaling,
        cfg.host_idle_seconds,
        concurrency,
        name,
        mode=cfg.mode,
        cold_start_work=cfg.cold_start_work,
    )


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
    # A peer has one capacity type: the stack's own (gpu.capacityType), no pools.
    return replace(
        base, name=mode, mode=mode, host_idle_seconds=host_idle, pools=(), placement=None
    )
