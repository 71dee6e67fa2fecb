"""The stage configuration vLLM-Omni is started with, matched to the worker's concurrency
(issue 24): `python -m worker.vllm_args` prints the `--stage-overrides` JSON that
worker/entrypoint.sh passes to `vllm serve`.

vLLM-Omni 0.30's Qwen3-TTS deploy config (`vllm_omni/deploy/qwen3_tts.yaml`) sizes the talker
(stage 0) for 64 sequences, and vLLM captures a CUDA graph for every capture size up to that
bound at start. The worker never has more than CONCURRENCY requests in flight (the speech
client sends one piece of a job at a time), so graphs for larger batches are start-up time
spent for nothing. Stage 0 is therefore given `max_num_seqs = CONCURRENCY` and
`compilation_config.cudagraph_capture_sizes` = the powers of two below it plus CONCURRENCY
itself. Both are `StageDeployConfig` fields, which `--stage-overrides` accepts
(`vllm_omni/config/stage_config.py deploy_runtime_override_keys`); the talker aligns its code
predictor's buckets with exactly these sizes (`qwen3_tts_talker.py`, `cudagraph_capture_sizes`
≤ `max_num_seqs`, plus 1 and `max_num_seqs`).

Stage 1 (code2wav) gets the same `max_num_seqs = CONCURRENCY` (issue 23): with `async_chunk`
every request the talker runs streams its codec chunks to it, so it must take as many at once
as the talker, or finished talker work waits for a decoder slot; the deploy file's 64
("tuned for Base voice clone; CustomVoice / VoiceDesign are TTFA-optimal at 1") is more than
the worker ever sends, and vLLM sizes a stage's persistent batch buffers by it. Its decoder
graph shapes are not a stage field (with `async_chunk` they come from the connector's chunk
settings), nor is the connector's `decode_batch_max_size` (4 in the shipped file): both stay
as shipped, as in the sweep the default concurrency is chosen from (docs/worker.md#concurrency).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from dataclasses import fields

from worker.settings import Settings

TALKER_STAGE = "0"
CODE2WAV_STAGE = "1"
CONCURRENCY_ENV = "CONCURRENCY"
DEFAULT_CONCURRENCY = next(f.default for f in fields(Settings) if f.name == "concurrency")


def capture_sizes(concurrency: int) -> list[int]:
    """1, 2, 4, … below `concurrency`, and `concurrency` itself."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1 (got {concurrency})")
    sizes = {concurrency}
    size = 1
    while size < concurrency:
        sizes.add(size)
        size *= 2
    return sorted(sizes)


def stage_overrides(concurrency: int) -> dict[str, dict[str, object]]:
    return {
        TALKER_STAGE: {
            "max_num_seqs": concurrency,
            "compilation_config": {"cudagraph_capture_sizes": capture_sizes(concurrency)},
        },
        CODE2WAV_STAGE: {"max_num_seqs": concurrency},
    }


def main(environ: Mapping[str, str] = os.environ) -> int:
    raw = environ.get(CONCURRENCY_ENV) or str(DEFAULT_CONCURRENCY)
    try:
        concurrency = int(raw)
        overrides = stage_overrides(concurrency)
    except ValueError:
        print(f"{CONCURRENCY_ENV}={raw!r} must be an integer >= 1", file=sys.stderr)
        return 2
    print(json.dumps(overrides, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
