"""`tts-fleet local`: the whole pipeline on this machine (tts_fleet/local/run.py does the work)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.console import Console

from tts_fleet.cli.errors import BadInput, bad_config
from tts_fleet.cli.options import project_dir_option, split_chars_option, stack_file_option
from tts_fleet.cli.sources import lexicon_option, read_lexicon
from tts_fleet.client.books import JoinReport, join_parts
from tts_fleet.client.voices import VoiceError
from tts_fleet.config.models import ConfigError
from tts_fleet.exit_codes import ExitCode
from tts_fleet.scaling.policy import MODES
from tts_fleet.sim.capacity import CapacityError, Outage, parse_outage
from worker.settings import TASK_TYPES

if TYPE_CHECKING:
    from tts_fleet.config.models import StackConfig
    from tts_fleet.local.report import Summary
    from tts_fleet.local.run import LocalOptions
    from worker.jobs import Job

INTERRUPTED_EXIT = ExitCode.INTERRUPTED
NEXT_STEPS = (
    "Next: change the policy (--jobs-per-worker 4, --idle-ticks 2, --cold-start-ticks 5, "
    "--stack dev), run your own text (--input jobs.jsonl), or deploy to AWS with "
    "`pulumi up` (see the README)."
)


@click.command()
@click.option("--demo", type=click.IntRange(1, 10_000), help="Submit N built-in sample texts.")
@click.option(
    "--input",
    "input_path",
    type=click.Path(exists=True, path_type=str),
    help="Submit jobs from a JSONL file, a directory of .txt files or an EPUB (one job per "
    "chapter; its book record goes to --out/books/).",
)
@stack_file_option("Use Pulumi.<STACK>.yaml's config (default: the defaults).")
@project_dir_option()
@click.option("--max-workers", type=click.IntRange(1, 64), help="Override scaling.maxWorkers.")
@click.option("--jobs-per-worker", type=click.IntRange(1), help="Override scaling.jobsPerWorker.")
@click.option(
    "--idle-ticks",
    type=click.IntRange(1, 1440),
    help="Override scaling.idleMinutes (one tick = one minute).",
)
@click.option(
    "--mode",
    type=click.Choice(MODES),
    help="Override scaling.mode: `controller` (the default) or `alarms`.",
)
@click.option(
    "--tick",
    type=click.FloatRange(0.05, 60),
    default=1.0,
    show_default=True,
    help="Seconds per scaler tick; one tick stands for one CloudWatch minute.",
)
@click.option(
    "--cold-start-ticks",
    type=click.IntRange(0, 1000),
    default=0,
    show_default=True,
    help="Ticks before a new worker starts (the seed's GPU cold start is ~13).",
)
@click.option(
    "--capacity-outage",
    "capacity_outages",
    multiple=True,
    metavar="POOL:START_H:HOURS[:silent]",
    callback=lambda ctx, param, values: _outages(values),
    help="With the stack's gpu.pools: POOL gives no new worker from hour START_H for HOURS "
    "(the fleet's hours: 60 ticks), its new workers stay pending and the controller moves "
    "the demand to the next pool; `silent`: no placement-failure events, only the "
    "provisioning timeout. Repeatable.",
)
@click.option(
    "--backend",
    type=click.Choice(["espeak", "tone", "piper"]),
    default="espeak",
    show_default=True,
    help="Speech server backend (tone: for load runs).",
)
@click.option(
    "--speech-latency-ms",
    type=click.FloatRange(0),
    default=0.0,
    help="Extra model time per request, to mimic a GPU.",
)
@click.option(
    "--visibility-timeout",
    type=click.IntRange(5, 43_200),
    default=30,
    show_default=True,
    help="Queue visibility here (short, so a killed worker's job "
    "returns quickly; the stack's value is sized for a GPU).",
)
@click.option(
    "--stop-timeout",
    type=click.FloatRange(0.5, 120),
    default=5.0,
    show_default=True,
    help="Seconds a stopped worker may drain before SIGKILL.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("out"),
    show_default=True,
    help="Where audio, manifests, timeline and logs go.",
)
@click.option(
    "--events",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write a JSON-lines event log (one line per scaling decision).",
)
@click.option(
    "--skip-invalid", is_flag=True, help="With --input: run the valid jobs even if some are not."
)
@click.option(
    "--task-type",
    type=click.Choice(TASK_TYPES),
    help="Override worker.taskType (and serve its checkpoint): Base and VoiceDesign jobs "
    "name voices of the library (--library-voice).",
)
@click.option(
    "--library-voice",
    "library_voices",
    multiple=True,
    metavar="NAME=PATH",
    help="Add a voice to the run's library: REF.wav with its transcript in REF.txt (Base), "
    "or DESC.txt (VoiceDesign). Repeatable.",
)
@click.option("--voice", help="Voice for jobs that do not set one (the demo's too).")
@click.option("--language", help="Language for jobs that do not set one (the demo's too).")
@split_chars_option
@lexicon_option
@click.option(
    "--faults",
    metavar="KIND=SHARE,...",
    help="Make that share of pieces come out bad, as a real model's sometimes do: runaway, "
    "truncate, silence, drop, garble (e.g. runaway=0.04,garble=0.04); the workers' checks "
    "should catch and re-render them.",
)
@click.option(
    "--fault-seed",
    type=int,
    default=0,
    show_default=True,
    help="Which pieces get a fault (with each request's text, voice and seed).",
)
@click.option("--json", "json_output", is_flag=True, help="Print the summary as JSON.")
@click.option(
    "--keep-running",
    is_flag=True,
    help="Stay up after the jobs (if any) for `tts-fleet submit` from elsewhere.",
)
@click.option(
    "--resume",
    is_flag=True,
    help="After a run was killed: skip the jobs whose output is already in --out "
    "(give the same --demo/--input as that run).",
)
def local(input_path: str | None, skip_invalid: bool, resume: bool, **kwargs: object) -> None:
    """Run the whole pipeline here: emulated SQS/S3, espeak speech, real workers, local scaler.

    Submits the jobs, scales worker processes with the policy the stack's scaling.mode
    deploys in AWS (the controller, or the alarms), and when the queue has drained and the
    fleet is back to zero, downloads the outputs into --out with a summary and
    out/timeline.png. Ctrl-C stops everything cleanly.
    """
    from tts_fleet.local.run import LocalOptions, jobs_for, local_pools, resolve_config

    options = LocalOptions(input=input_path, **kwargs)  # type: ignore[arg-type]
    if options.demo and options.input:
        raise click.UsageError("give --demo or --input, not both")
    if not (options.demo or options.input or options.keep_running):
        raise click.UsageError("nothing to do: give --demo N, --input PATH or --keep-running")
    check_faults(options.faults)
    read_lexicon(options.lexicon)  # a bad lexicon fails before anything starts
    try:
        cfg = resolve_config(options)
    except ConfigError as error:
        raise bad_config(error.problems) from None
    except FileNotFoundError as error:
        raise BadInput(f"no stack file: {error.filename}") from None

    try:  # an outage of a pool the stack does not have fails before anything starts
        local_pools(cfg, options)
    except CapacityError as error:
        raise BadInput(str(error)) from None
    try:
        jobs, invalid = jobs_for(options, cfg)
    except VoiceError as error:  # a --library-voice that cannot be a voice
        raise BadInput(str(error)) from None
    err = Console(stderr=True, soft_wrap=True)
    for line in invalid:
        err.print(f"invalid: {line}", markup=False, highlight=False)
    if invalid and not skip_invalid:
        raise BadInput(
            f"{len(invalid)} invalid input(s) in {options.input}; nothing was sent "
            "(fix them, or pass --skip-invalid to run the valid jobs)"
        )
    if options.input and not jobs and not options.keep_running:
        raise BadInput(f"no valid jobs in {options.input}; nothing was sent")
    if resume:
        jobs = not_done_yet(jobs, options.out, err)
    _run(options, cfg, jobs, len(invalid))


def check_faults(spec: str | None) -> None:
    """A bad --faults fails before anything starts, as a usage error naming the flag."""
    from tts_fleet.local.speech_faults import FaultPlan, FaultSpecError

    try:
        FaultPlan.parse(spec or "")
    except FaultSpecError as error:
        raise click.BadParameter(str(error), param_hint="--faults") from None


def not_done_yet(jobs: list[Job], out: Path, err: Console) -> list[Job]:
    """The jobs of a killed run whose manifest never reached --out (outputs are fetched as each
    job finishes, so what is there is done; the emulator died with the run, the rest is redone:
    the worker's manifest check makes a redo of a finished job write nothing twice)."""
    left = [job for job in jobs if not (out / f"{job.job_id}.json").exists()]
    err.print(f"resuming: {len(jobs) - len(left)} done already in {out}, {len(left)} to run",
              markup=False, highlight=False)  # fmt: skip
    return left


def _run(options: LocalOptions, cfg: StackConfig, jobs: list[Job], invalid: int) -> None:
    from tts_fleet.local.run import LocalRun, describe_env, summary_json
    from tts_fleet.local.view import summary_table

    console = Console(stderr=options.json_output, soft_wrap=True)

    def ready(run: LocalRun) -> None:
        console.print(
            f"emulator {run.aws.endpoint} · speech {run.speech_url} · "
            f"{len(run.jobs)} jobs · logs in {run.log_dir}",
            markup=False,
            highlight=False,
        )
        if run.options.keep_running:
            console.print("From another terminal:", markup=False)
            for line in describe_env(run.connection_env()):
                console.print(f"  {line}", markup=False, highlight=False)
            console.print("  tts-fleet submit jobs.jsonl    (Ctrl-C here to stop)")

    run = LocalRun(options, cfg, jobs, console)
    try:
        summary = run.execute(ready)
    except RuntimeError as error:
        if run.stopper.stop.is_set():  # Ctrl-C during start-up: nothing was submitted
            console.print("interrupted during start-up; nothing was submitted", markup=False)
            raise SystemExit(INTERRUPTED_EXIT) from None
        raise click.ClickException(str(error)) from None
    summary = dataclasses.replace(summary, invalid_lines=invalid)
    joined = join_parts(Path(summary.out_dir), run.submitted) if options.split_chars else None
    if options.json_output:
        click.echo(summary_json(summary))
    else:
        console.print(summary_table(summary))
        for line in [*joined_lines(joined), *closing_lines(summary)]:
            console.print(line, markup=False, highlight=False)
    raise SystemExit(exit_code(summary, options.keep_running))


def joined_lines(joined: JoinReport | None) -> list[str]:
    """What --split-chars put back together in --out, and what it could not."""
    if joined is None:
        return []
    lines = [f"joined {len(joined.joined)} split text(s): {', '.join(joined.joined)}"]
    lines += [f"not joined: {base}: {len(parts)} part(s) not done" for base, parts in
              sorted(joined.incomplete.items())]  # fmt: skip
    lines += [f"not joined: {base}: {reason}" for base, reason in sorted(joined.failed.items())]
    return lines


def closing_lines(summary: Summary) -> list[str]:
    """Where to look first, then what to try: the end of the output a newcomer reads."""
    lines = []
    wavs = sorted(Path(summary.out_dir).glob("*.wav"))
    if wavs and summary.timeline:
        lines.append(f"Listen to {wavs[0]}; the scaling story is in {summary.timeline}.")
    return [*lines, NEXT_STEPS]


def exit_code(summary: Summary, keep_running: bool) -> int:
    """130 when stopped with work left (or before settling); Ctrl-C is how a
    --keep-running fleet ends, so there it is 0 when nothing was left; 1 on any failure."""
    if summary.interrupted and (summary.unfinished or not keep_running):
        return INTERRUPTED_EXIT
    return ExitCode.OK if summary.ok else ExitCode.FAILED


def _outages(values: tuple[str, ...]) -> tuple[Outage, ...]:
    try:
        return tuple(parse_outage(value) for value in values)
    except CapacityError as error:
        raise click.BadParameter(str(error)) from None
