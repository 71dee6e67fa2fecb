"""Capacity pools in the local fleet (issue #22), without processes: which pools a run has, the
--capacity-outage flag, and how the view and the timeline show the groups and the fallback."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from tts_fleet.cli.local import local
from tts_fleet.config.models import ConfigError
from tts_fleet.local.report import pool_changes, pool_names, write_timeline
from tts_fleet.local.run import LocalOptions, local_placement, local_pools, resolve_config
from tts_fleet.local.scaler import Tick
from tts_fleet.local.view import pools_text, status_line
from tts_fleet.scaling.pools import PlacementParams
from tts_fleet.sim.capacity import CapacityError, Outage

POOLS_STACK = """\
config:
  tts-fleet:scaling:
    maxWorkers: 8
  tts-fleet:gpu:
    pools:
      - name: spot
        capacityType: spot
        maxWorkers: 6
      - name: od
        capacityType: on-demand
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "Pulumi.pools.yaml").write_text(POOLS_STACK)
    (tmp_path / "Pulumi.plain.yaml").write_text(
        "config:\n  tts-fleet:gpu:\n    capacityType: spot\n"
    )
    return tmp_path


def options(project: Path, stack: str, **more: object) -> LocalOptions:
    return LocalOptions(stack=stack, project_dir=project, **more)  # type: ignore[arg-type]


def test_a_stack_with_pools_runs_one_group_per_pool_cheapest_known(project: Path) -> None:
    chosen = options(project, "pools")
    specs = local_pools(resolve_config(chosen), chosen)
    assert [(s.name, s.capacity_type, s.max_workers, s.service) for s in specs] == [
        ("spot", "spot", 6, ""),
        ("od", "on-demand", 8, ""),
    ]
    # Priced from the cost tables, so the placement fills Spot first as the controller would.
    assert 0 < specs[0].usd_per_hour < specs[1].usd_per_hour


def test_without_gpu_pools_the_fleet_is_one_group(project: Path) -> None:
    plain = options(project, "plain")
    assert local_pools(resolve_config(plain), plain) == ()


def test_pools_in_alarms_mode_are_refused_as_the_stack_config_refuses_them(
    project: Path,
) -> None:
    # Application Auto Scaling sizes one service: `local --mode alarms` on a pooled stack is
    # the config error `deploy` would meet, before anything starts.
    with pytest.raises(ConfigError, match=r"2 pools need scaling\.mode: controller"):
        resolve_config(options(project, "pools", mode="alarms"))


def test_max_workers_caps_each_pool_as_it_caps_schedules(project: Path) -> None:
    capped = options(project, "pools", max_workers=3)
    specs = local_pools(resolve_config(capped), capped)
    assert [s.max_workers for s in specs] == [3, 3]


def test_the_placement_timings_are_the_stacks_on_the_fleets_clock(project: Path) -> None:
    cfg = resolve_config(options(project, "pools"))
    assert local_placement(cfg) == PlacementParams(
        provisioning_timeout_s=float(cfg.gpu.provisioning_timeout_seconds),
        cooldown_s=float(cfg.gpu.pool_cooldown_seconds),
    )


def test_an_outage_must_name_one_of_the_runs_pools(project: Path) -> None:
    outage = (Outage("spto", 0.0, 3600.0),)
    wrong = options(project, "pools", capacity_outages=outage)
    with pytest.raises(CapacityError, match="no pool named spto"):
        local_pools(resolve_config(wrong), wrong)
    without = options(project, "plain", capacity_outages=(Outage("spot", 0.0, 3600.0),))
    with pytest.raises(CapacityError, match="--capacity-outage needs capacity pools"):
        local_pools(resolve_config(without), without)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--capacity-outage", "spot:0"], "expected POOL:START_H:HOURS[:silent]"),
        (["--capacity-outage", "spot:0:0"], "HOURS must be > 0"),
        (["--capacity-outage", "spto:0:1"], "no pool named spto (pools: od, spot)"),
    ],
)
def test_a_bad_outage_flag_exits_2_before_anything_starts(
    project: Path, args: list[str], message: str
) -> None:
    runner = CliRunner()
    argv = ["--demo", "1", "--stack", "pools", "--project-dir", str(project), *args]
    result = runner.invoke(local, argv)
    assert result.exit_code == 2
    assert message in result.output


def sample(tick: int, spot: dict[str, object], od: dict[str, object]) -> Tick:
    base = {"pending": 0, "available": True, "cause": "", "refusing": False, "change": ""}
    pools: list[dict[str, object]] = [
        {**base, "pool": "spot", **spot},
        {**base, "pool": "od", **od},
    ]
    desired = sum(int(str(p["desired"])) for p in pools)
    running = sum(int(str(p["running"])) for p in pools)
    return Tick(
        tick=tick, t=float(tick), visible=4, in_flight=0, outstanding=4, failed=0,
        completed=0, alarm="controller", desired=desired, running=running, pending=0,
        stopping=0, minute=tick / 6, reason="backlog", pools=pools,
    )  # fmt: skip


TIMELINE = [
    sample(
        1,
        {"desired": 2, "running": 0, "pending": 2, "refusing": True},
        {"desired": 0, "running": 0},
    ),
    sample(
        2,
        {"desired": 0, "running": 0, "refusing": True, "available": False,
         "cause": "provisioning-timeout", "change": "unavailable"},
        {"desired": 2, "running": 0, "pending": 2},
    ),
    sample(3, {"desired": 0, "running": 0, "change": "available"}, {"desired": 2, "running": 2}),
]  # fmt: skip


def test_the_status_line_shows_each_pool_and_why_one_is_skipped() -> None:
    assert pools_text(TIMELINE[0]) == "spot 0/2 (pending 2) outage, od 0/0"
    assert pools_text(TIMELINE[1]) == (
        "spot 0/0 outage skipped: provisioning-timeout, od 0/2 (pending 2)"
    )
    assert status_line(TIMELINE[2], 4).endswith("controller backlog  pools spot 0/0, od 2/2")


def test_a_run_without_pools_shows_no_pools() -> None:
    plain = Tick(
        tick=1, t=1.0, visible=0, in_flight=0, outstanding=0, failed=0, completed=0,
        alarm="controller", desired=0, running=0, pending=0, stopping=0, reason="idle-release",
    )  # fmt: skip
    assert "pools" not in status_line(plain, 0)


def test_the_timeline_marks_where_the_demand_moved_and_came_back(tmp_path: Path) -> None:
    assert pool_names(TIMELINE) == ["spot", "od"]
    assert pool_changes(TIMELINE) == [
        (1, "spot", "spot skipped: provisioning-timeout"),
        (2, "spot", "spot back"),
    ]
    path = write_timeline(TIMELINE, tmp_path / "timeline.png", "pools")
    assert path.read_bytes().startswith(b"\x89PNG")
