"""Output checks (issue 21, DESIGN §5.3): every piece the speech server answers is measured
before the pieces are joined; a bad one is asked for again with a new seed.

- `checks.py`: what a piece should last, the `max_new_tokens` ceiling sent with it, and the
  signal checks (duration, silence, sanity, runaway);
- `wer.py`: the transcript check's normalisation and word error rate;
- `asr.py`: the client of the ASR server (`POST /v1/audio/transcriptions`);
- `guard.py`: the policy (mode, retries, seeds) and the report a manifest carries.
"""
