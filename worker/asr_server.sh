# shellcheck shell=bash
# The recognizer of the output checks' transcript (QA_MODE=asr, worker/qa/asr.py): a second
# vLLM server on the same GPU, sourced by worker/entrypoint.sh after vLLM-Omni is healthy.
#
# - `vllm serve "$ASR_MODEL" --host 127.0.0.1 --port 8092`: loopback only, like vLLM-Omni
#   (the worker beside it is its one client, and it has no API key). vLLM serves Whisper-class
#   models through the OpenAI-compatible POST /v1/audio/transcriptions, resampling to 16 kHz
#   and cutting audio past the model's 30-s window into chunks (vllm/config/speech_to_text.py,
#   SpeechToTextConfig.max_audio_clip_s).
# - Memory: vLLM-Omni's Qwen3-TTS stages take 0.3 + 0.3 of the GPU
#   (vllm_omni/deploy/qwen3_tts.yaml, gpu_memory_utilization per stage); this server takes
#   ASR_GPU_MEMORY_UTILIZATION of it (default 0.25), leaving 0.15 for CUDA contexts and
#   fragmentation. It starts after vLLM-Omni is healthy, so each finds its share free when it
#   profiles. openai/whisper-large-v3-turbo (the default ASR_MODEL) has 809 M parameters
#   (its model card): 1.6 GB of fp16 weights; 0.25 of a 24-GB L4 or A10G is 6 GB.
# - Its weights must be in the image (HF_HUB_OFFLINE=1): see docs/worker.md#output-checks.
#
# Functions (the entrypoint's `log`, `now`, `pause` and `stopping` are used):
#   asr_start TENTHS  start it and wait up to TENTHS for its /health; 1 if it dies or is late
#   asr_watch PID     in the background: if the server dies while the worker runs, stop PID
#                     (vLLM-Omni), so the entrypoint's own rule fails the task (exit 1)
#   asr_stop_begin    SIGTERM (sent just before vLLM-Omni's, so both stop inside its budget)
#   asr_stop_end TENTHS  SIGKILL if it is still running TENTHS later; reaped

ASR_PORT="${ASR_PORT:-8092}"
ASR_MODEL="${ASR_MODEL:-openai/whisper-large-v3-turbo}"
ASR_GPU_MEMORY_UTILIZATION="${ASR_GPU_MEMORY_UTILIZATION:-0.25}"
asr_pid=""
asr_stopping_flag="${TMPDIR:-/tmp}/asr-server-stopping.$$"
rm -f "$asr_stopping_flag"

asr_healthy() {
  "$PYTHON" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
    "http://127.0.0.1:${ASR_PORT}/health" >/dev/null 2>&1
}

asr_start() {
  vllm serve "$ASR_MODEL" --host 127.0.0.1 --port "$ASR_PORT" \
    --gpu-memory-utilization "$ASR_GPU_MEMORY_UTILIZATION" &
  asr_pid=$!
  now && local deadline=$((REPLY + $1))
  until asr_healthy; do
    if ((${stopping:-0})); then
      log "stopped before the ASR server was ready"
      return 1
    fi
    if ! kill -0 "$asr_pid" 2>/dev/null; then
      log "ASR server ($ASR_MODEL) exited before /health answered"
      return 1
    fi
    if now && ((REPLY >= deadline)); then
      log "ASR server not healthy after $(seconds_text "$1")s"
      return 1
    fi
    pause 1
  done
  log "ASR server healthy on :${ASR_PORT} ($ASR_MODEL)"
}

asr_watch() {
  local speech_pid=$1
  (
    while kill -0 "$asr_pid" 2>/dev/null; do sleep 1; done
    if [[ ! -e "$asr_stopping_flag" ]]; then
      log "ASR server exited while the worker ran; stopping the speech server to fail the task"
      kill -TERM "$speech_pid" 2>/dev/null || true
    fi
  ) &
}

asr_stop_begin() {
  : >"$asr_stopping_flag"
  if [[ -n "$asr_pid" ]]; then kill -TERM "$asr_pid" 2>/dev/null || true; fi
}

asr_stop_end() {
  [[ -n "$asr_pid" ]] || return 0
  now && local deadline=$((REPLY + $1))
  while kill -0 "$asr_pid" 2>/dev/null && now && ((REPLY < deadline)); do
    sleep 0.1
  done
  kill -KILL "$asr_pid" 2>/dev/null || true
  wait "$asr_pid" 2>/dev/null || true
  rm -f "$asr_stopping_flag"
}
