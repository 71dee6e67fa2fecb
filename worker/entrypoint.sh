#!/usr/bin/env bash
# GPU task entrypoint: one container runs vLLM-Omni (the speech server) and the worker.
#
# 1. `vllm serve "$MODEL" --omni --port 8091` starts in the background.
# 2. Wait for its /health (a GPU model load takes about a minute; fail fast if it dies).
# 3. Run `python -m worker` in the foreground of this script and forward SIGTERM/SIGINT to it.
#    The worker drains (finishes in-flight jobs within stopTimeout, releases the rest) and
#    only after it exits is vLLM stopped, so no in-flight synthesis loses its server.
#    (A plain `exec python -m worker` would make the worker PID 1 but leave vLLM to be
#    SIGKILLed with the container; supervising it here stops vLLM cleanly, in order.)
# 4. Exit with the worker's exit code. If vLLM dies while the worker runs, the worker is
#    stopped too, so ECS replaces the task instead of keeping a worker with no server.
set -uo pipefail

MODEL="${SPEECH_MODEL:-${MODEL:-}}"
PORT="${SPEECH_PORT:-8091}"
HEALTH_TIMEOUT_SECONDS="${HEALTH_TIMEOUT_SECONDS:-900}"
VLLM_STOP_SECONDS="${VLLM_STOP_SECONDS:-10}"
PYTHON="${PYTHON:-python3}"

log() { echo "entrypoint: $*" >&2; }

if [[ -z "$MODEL" ]]; then
  log "SPEECH_MODEL (or MODEL) is not set"
  exit 2
fi

worker_pid=""
stopping=0
on_term() {
  stopping=1
  if [[ -n "$worker_pid" ]]; then kill -TERM "$worker_pid" 2>/dev/null || true; fi
}
trap on_term TERM INT

vllm serve "$MODEL" --omni --port "$PORT" &
vllm_pid=$!

stop_vllm() {
  kill -TERM "$vllm_pid" 2>/dev/null || return 0
  local tenths=$((VLLM_STOP_SECONDS * 10))
  for ((i = 0; i < tenths; i++)); do
    if ! kill -0 "$vllm_pid" 2>/dev/null; then break; fi
    sleep 0.1
  done
  kill -KILL "$vllm_pid" 2>/dev/null || true
  wait "$vllm_pid" 2>/dev/null || true
}

healthy() {
  "$PYTHON" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
    "http://127.0.0.1:${PORT}/health" >/dev/null 2>&1
}

deadline=$((SECONDS + HEALTH_TIMEOUT_SECONDS))
until healthy; do
  if ((stopping)); then
    log "stopped before the speech server was ready"
    stop_vllm
    exit 0
  fi
  if ! kill -0 "$vllm_pid" 2>/dev/null; then
    log "speech server exited before /health answered"
    exit 1
  fi
  if ((SECONDS >= deadline)); then
    log "speech server not healthy after ${HEALTH_TIMEOUT_SECONDS}s"
    stop_vllm
    exit 1
  fi
  sleep 1
done
log "speech server healthy on :${PORT}; starting the worker"

"$PYTHON" -m worker &
worker_pid=$!
if ((stopping)); then kill -TERM "$worker_pid" 2>/dev/null || true; fi

# `wait` returns early whenever a trapped signal arrives; keep waiting until the worker is gone.
while kill -0 "$worker_pid" 2>/dev/null; do
  wait -n 2>/dev/null || true
  if ((!stopping)) && ! kill -0 "$vllm_pid" 2>/dev/null; then
    log "speech server exited; stopping the worker"
    on_term
  fi
done
wait "$worker_pid"
status=$?
log "worker exited with ${status}; stopping the speech server"
stop_vllm
exit "$status"
