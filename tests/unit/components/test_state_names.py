"""What stack state stores by name: moving or renaming these replaces resources on `pulumi up`.

A dynamic provider is pickled into state with its class's module path and qualified name,
so both must stay importable where they are. The step policies and alarms were children of
the one autoscaling component; now that each mode has its own component, each carries an
alias to its URN under the target component, whose type token and name are unchanged.
"""

from __future__ import annotations

from typing import Any

import pulumi

from components.autoscaling import (
    TARGET_TYPE,
    ModeArgs,
    SafetyNet,
    ScalableTarget,
    ScalableTargetArgs,
    StepScaling,
)
from components.capacity_ready import CapacityProviderReady, CapacityProviderReadyProvider
from components.image_build import WorkerImageBuild, WorkerImageBuildProvider
from tests.lib.pulumi_harness import run_program
from tts_fleet.config.models import ScalingConfig


def test_the_dynamic_providers_stay_where_stack_state_finds_them() -> None:
    paths = {
        (cls.__module__, cls.__qualname__)
        for cls in (WorkerImageBuildProvider, CapacityProviderReadyProvider)
    }
    assert paths == {
        ("components.image_build", "WorkerImageBuildProvider"),
        ("components.capacity_ready", "CapacityProviderReadyProvider"),
    }
    # And the resources that pickle them are still dynamic resources of these modules.
    assert issubclass(WorkerImageBuild, pulumi.dynamic.Resource)
    assert issubclass(CapacityProviderReady, pulumi.dynamic.Resource)


def registrations(mode_component: type[StepScaling] | type[SafetyNet]) -> list[tuple[Any, ...]]:
    """(type, name, parent, aliases) of every resource a target plus one mode registers."""
    seen: list[tuple[Any, ...]] = []

    def record(args: pulumi.ResourceTransformationArgs) -> None:
        seen.append((args.type_, args.name, args.opts.parent, list(args.opts.aliases or [])))

    def program() -> None:
        pulumi.runtime.register_stack_transformation(record)
        cfg = ScalingConfig(mode="alarms" if mode_component is StepScaling else "controller")
        target = ScalableTarget(
            "tts-autoscaling", ScalableTargetArgs(cluster_name="c", service_name="s", scaling=cfg)
        )
        on_target = ModeArgs(
            target=target, queue_name="q", cluster_name="c", service_name="s", scaling=cfg
        )
        mode_component("tts-autoscaling", on_target, opts=pulumi.ResourceOptions(parent=target))

    run_program(program)
    return seen


def test_the_target_component_keeps_its_type_token_and_name() -> None:
    first = registrations(StepScaling)[0]
    assert (first[0], first[1]) == ("tts-fleet:autoscaling:QueueAutoscaling", "tts-autoscaling")
    assert TARGET_TYPE == "tts-fleet:autoscaling:QueueAutoscaling"


def test_each_modes_resources_are_aliased_to_their_place_under_the_target() -> None:
    for mode, names in (
        (StepScaling, {"tts-autoscaling-scale-out", "tts-autoscaling-idle"}),
        (SafetyNet, {"tts-autoscaling-safety-net"}),
    ):
        seen = registrations(mode)
        moved = [r for r in seen if r[0].startswith("aws:") and r[1] != "tts-autoscaling-target"]
        # A policy and an alarm per name, each with one alias that keeps its name and type
        # (Ellipsis: unset) and names the target component as its parent: the old URN.
        assert {r[1] for r in moved} == names and len(moved) == 2 * len(names)
        for _, _, _, aliases in moved:
            (alias,) = aliases
            assert alias.name is ... and alias.type_ is ...
            assert isinstance(alias.parent, ScalableTarget)
