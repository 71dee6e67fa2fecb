#!/usr/bin/env bash
# GPU task entrypoint: one container runs vLLM-Omni (the speech server) and the worker.
#
# 0. Skip repeated work (issue 24). With WEIGHTS_URI set (`worker.weights: s3`), the weights
#    are fetched into WEIGHTS_DIR first (`python -m worker.weights fetch`, worker/weights.py)
#    and served from there under the model's name. vLLM's compile caches (VLLM_CACHE_ROOT,
#    Triton's beneath it) are restored from S3 for this GPU type (`cache/` beside `weights/`)
#    (worker/compile_cache.py), and the talker's CUDA-graph sizes are matched to CONCURRENCY
#    (`--stage-overrides`, worker/vllm_args.py).
# 1. `vllm serve "$MODEL" --omni --host 127.0.0.1 --port 8091` starts in the background, on
#    the loopback interface only: the worker beside it is its one client, and the server has no
#    API key, so nothing else on the task's network may reach it.
# 2. Wait for its /health (a GPU model load takes about a minute; fail fast if it dies). Once
#    healthy, the compile caches are saved for the next start on this GPU type (in the
#    background: the worker does not wait for the upload).
# 3. Run `python -m worker` and forward SIGTERM/SIGINT to it. The worker drains (finishes
#    in-flight jobs, releases the rest) and only after it exits is vLLM stopped, so no
#    in-flight synthesis loses its server. (A plain `exec python -m worker` would make the
#    worker PID 1 but leave vLLM to be SIGKILLed with the container.)
# 4. Exit with the worker's exit code, or 1 if vLLM died while the worker ran: the worker is
#    then stopped too (it drains and exits 0), and ECS must see a failed task, not a clean
#    stop, so that it replaces the task and counts the failure.
#
# The stop budget. ECS SIGKILLs the whole container stopTimeout seconds after SIGTERM, and
# STOP_TIMEOUT_SECONDS (the task definition sets it to stopTimeout) is that whole budget.
# vLLM gets VLLM_STOP_SECONDS of it (at most a quarter), the worker is handed the rest less
# EXIT_SLACK_TENTHS×2 as its own STOP_TIMEOUT_SECONDS, and a worker still running when its
# share is over is SIGKILLed, so the vLLM stop still fits: worker + vLLM ≤ stopTimeout.
#
# Durations may be given with decimals ("900", "12.5"): bash has integer arithmetic only, so
# every one is read once into tenths of a second, and anything that is not a number of
# seconds exits 2 with one line.
#
# Every step is timed: `mark NAME` appends `NAME <epoch seconds>` to COLDSTART_MARKS, which
# the worker turns into `ColdStartSeconds` lines with ECS's own timestamps (worker/coldstart.py).
set -uo pipefail

EXIT_SLACK_TENTHS=5 # a SIGKILL, the reaping and this script's exit
PYTHON="${PYTHON:-python3}"

log() { echo "entrypoint: $*" >&2; }

# tenths NAME DEFAULT -> REPLY: $NAME (or DEFAULT) in tenths of a second; exits 2 if not a number.
tenths() {
  local name=$1 value=${!1:-$2}
  if [[ ! $value =~ ^[[:space:]]*([0-9]+)(\.([0-9]*))?[[:space:]]*$ ]]; then
    log "$name='$value' must be a number of seconds"
    exit 2
  fi
  local whole=${BASH_REMATCH[1]} digit=${BASH_REMATCH[3]:0:1}
  REPLY=$((10#$whole * 10 + 10#${digit:-0}))
}

# now -> REPLY: a monotonic-enough clock in tenths ($EPOCHREALTIME without its separator,
# which follows the locale, is microseconds).
now() {
  local micros=${EPOCHREALTIME//[!0-9]/}
  REPLY=$((10#$micros / 100000))
}

seconds_text() { printf '%d.%d' $(($1 / 10)) $(($1 % 10)); } # tenths -> "12.5"

export COLDSTART_MARKS="${COLDSTART_MARKS:-${TMPDIR:-/tmp}/coldstart-marks}"
: >"$COLDSTART_MARKS"
# mark NAME: this moment, in epoch seconds with a '.' whatever the locale's separator.
mark() {
  local micros=${EPOCHREALTIME//[!0-9]/}
  printf '%s %d.%06d\n' "$1" $((10#$micros / 1000000)) $((10#$micros % 1000000)) >>"$COLDSTART_MARKS"
}

MODEL="${SPEECH_MODEL:-${MODEL:-}}"
PORT="${SPEECH_PORT:-8091}"
tenths HEALTH_TIMEOUT_SECONDS 900 && health_timeout=$REPLY
tenths STOP_TIMEOUT_SECONDS 120 && stop_total=$REPLY
tenths VLLM_STOP_SECONDS 10 && vllm_stop=$REPLY
((vllm_stop > stop_total / 4)) && vllm_stop=$((stop_total / 4))
worker_stop=$((stop_total - vllm_stop - 2 * EXIT_SLACK_TENTHS))
((worker_stop < 0)) && worker_stop=0 # the worker refuses a budget it cannot drain in

if [[ -z "$MODEL" ]]; then
  log "SPEECH_MODEL (or MODEL) is not set"
  exit 2
fi
if ! stage_overrides=$("$PYTHON" -m worker.vllm_args); then
  exit 2 # it said which setting, in one line
fi

worker_pid=""
stopping=0
stop_at=0
vllm_died=0
on_term() {
  if ((stopping)); then return; fi
  stopping=1
  now && stop_at=$REPLY
  if [[ -n "$worker_pid" ]]; then kill -TERM "$worker_pid" 2>/dev/null || true; fi
}
trap on_term TERM INT

# step CMD...: a start-up step, run in the background so that a stop ends it at once instead
# of after it (the weights fetch resumes where it stopped; a cache restore only saves time).
# Its status; on a stop, exit 0 as a stop during start-up always does.
step() {
  "$@" &
  local pid=$! code
  while true; do
    wait "$pid"
    code=$?
    if ((stopping)); then
      kill -TERM "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null
      log "stopped during start-up"
      exit 0
    fi
    kill -0 "$pid" 2>/dev/null || return "$code" # else a signal interrupted the wait
  done
}

# The weights: from S3 onto the task's disk when WEIGHTS_URI is set; else baked in the image.
serve=("$MODEL")
if [[ -n "${WEIGHTS_URI:-}" ]]; then
  WEIGHTS_DIR="${WEIGHTS_DIR:-${TMPDIR:-/tmp}/weights}"
  mark weights-start
  if ! step "$PYTHON" -m worker.weights fetch "$WEIGHTS_URI" "$WEIGHTS_DIR"; then
    log "the weights could not be fetched from ${WEIGHTS_URI}"
    exit 1
  fi
  mark weights-end
  serve=("$WEIGHTS_DIR" --served-model-name "$MODEL")
fi

# Beside the fetched weights (the task's data volume, NVMe with gpu.localStorage), else /tmp.
if [[ -n "${WEIGHTS_URI:-}" ]]; then cache_home="${WEIGHTS_DIR%/*}"; else cache_home="${TMPDIR:-/tmp}"; fi
export VLLM_CACHE_ROOT="${VLLM_CACHE_ROOT:-$cache_home/vllm-cache}"
export TRITON_CACHE_DIR="${TRITON_CACHE_DIR:-$VLLM_CACHE_ROOT/triton}"
mark cache-start
step "$PYTHON" -m worker.compile_cache restore # never fails the start: a miss only costs time
mark cache-end

mark server-start
vllm serve "${serve[@]}" --omni --host 127.0.0.1 --port "$PORT" \
  --stage-overrides "$stage_overrides" &
vllm_pid=$!

# stop_vllm TENTHS: SIGTERM, then SIGKILL once TENTHS have passed.
stop_vllm() {
  kill -TERM "$vllm_pid" 2>/dev/null || return 0
  now && local deadline=$((REPLY + $1))
  while kill -0 "$vllm_pid" 2>/dev/null && now && ((REPLY < deadline)); do
    sleep 0.1
  done
  kill -KILL "$vllm_pid" 2>/dev/null || true
  wait "$vllm_pid" 2>/dev/null || true
}

healthy() {
  "$PYTHON" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
    "http://127.0.0.1:${PORT}/health" >/dev/null 2>&1
}

# A trapped signal interrupts `wait`, not `sleep`: pause without delaying a stop.
pause() {
  sleep "$1" &
  wait $! 2>/dev/null
}

wait_for_health() {
  now && local deadline=$((REPLY + health_timeout))
  until healthy; do
    if ((stopping)); then
      log "stopped before the speech server was ready"
      stop_vllm "$vllm_stop"
      exit 0
    fi
    if ! kill -0 "$vllm_pid" 2>/dev/null; then
      log "speech server exited before /health answered"
      exit 1
    fi
    if now && ((REPLY >= deadline)); then
      log "speech server not healthy after $(seconds_text "$health_timeout")s"
      stop_vllm "$vllm_stop"
      exit 1
    fi
    pause 1
  done
}

# Until the worker exits (its status in worker_status): notice vLLM dying while the worker
# runs, and keep the worker inside its share of the stop budget once a stop has begun.
supervise() {
  local exited code
  while kill -0 "$worker_pid" 2>/dev/null; do
    if ((stopping)); then
      now
      if ((REPLY >= stop_at + stop_total - vllm_stop - EXIT_SLACK_TENTHS)); then
        log "worker still running at the end of its stop budget; killing it"
        kill -KILL "$worker_pid" 2>/dev/null || true
        break
      fi
      if (((REPLY - stop_at) % 10 == 9)); then kill -TERM "$worker_pid" 2>/dev/null || true; fi
      pause 0.1
      continue
    fi
    unset exited # wait -p leaves it unset when a signal ends the wait
    wait -n -p exited 2>/dev/null # a child exited (its pid in exited), or a signal came
    code=$?
    if [[ "${exited:-}" == "$worker_pid" ]]; then
      worker_status=$code
    elif [[ "${exited:-}" == "$vllm_pid" ]] && ((!stopping)); then
      log "speech server exited with ${code} while the worker ran; stopping the worker"
      vllm_died=1
      on_term
    fi
  done
}

wait_for_health
mark server-healthy
"$PYTHON" -m worker.compile_cache save &
# QA_MODE=asr: the transcript check's recognizer, a second vLLM server (worker/asr_server.sh).
if [[ "${QA_MODE:-}" == asr ]]; then
  source "${BASH_SOURCE[0]%/*}/asr_server.sh"
  if ! asr_start "$health_timeout"; then
    asr_stop_begin
    stop_vllm "$vllm_stop"
    asr_stop_end 0
    exit $((stopping ? 0 : 1))
  fi
  asr_watch "$vllm_pid"
fi
log "speech server healthy on :${PORT}; starting the worker" \
  "(stop budget $(seconds_text "$stop_total")s: worker $(seconds_text "$worker_stop")s," \
  "vLLM $(seconds_text "$vllm_stop")s)"

# Started with SIGTERM/SIGINT ignored (an ignored signal stays ignored across exec) until
# Python installs its handlers, so a stop that lands while the interpreter starts is not a
# -15; supervise re-sends it every second until the worker is gone.
(
  trap '' TERM INT
  STOP_TIMEOUT_SECONDS=$(seconds_text "$worker_stop") exec "$PYTHON" -m worker
) &
worker_pid=$!
if ((stopping)); then kill -TERM "$worker_pid" 2>/dev/null || true; fi
worker_status=""
supervise
if [[ -z "$worker_status" ]]; then
  wait "$worker_pid"
  worker_status=$?
fi
status=$worker_status
log "worker exited with ${status}; stopping the speech server"
if declare -F asr_stop_begin >/dev/null; then asr_stop_begin; fi # inside vLLM's stop budget
stop_vllm "$vllm_stop"
if declare -F asr_stop_end >/dev/null; then asr_stop_end 0; fi
if ((vllm_died)); then
  log "exiting 1: the speech server died while the worker ran"
  exit 1
fi
exit "$status"
