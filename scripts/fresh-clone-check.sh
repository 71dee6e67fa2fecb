#!/usr/bin/env bash
# The README's two commands, as a new user runs them: clone this repository (its committed
# HEAD) into a temporary directory, then `make demo` and `make test` there, with nothing
# but Python 3.11+ and make. Not run by CI on every change: it builds a fresh virtualenv.
#
#   scripts/fresh-clone-check.sh            # KEEP=1 keeps the clone for a look afterwards
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/tts-fleet-fresh.XXXXXX")"
cleanup() {
    if [ "${KEEP:-0}" = 1 ]; then echo "kept the clone in $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

clock() { date +%s; }
say() { printf '\n== %s\n' "$*"; }

say "cloning $repo (HEAD $(git -C "$repo" rev-parse --short HEAD)) into $work"
git clone --quiet "$repo" "$work/tts-fleet"
cd "$work/tts-fleet"
# A new user's shell: no emulator endpoint or credentials from whoever runs this check.
unset AWS_ENDPOINT_URL AWS_PROFILE AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN

say "install (.venv with .[local]: what make demo does first)"
t0=$(clock)
make .venv/.installed-local
t1=$(clock)

say "make demo"
make demo
t2=$(clock)
wavs=$(find out -maxdepth 1 -name '*.wav' | wc -l)
[ "$wavs" -eq 40 ] || { echo "FAIL: expected 40 WAV files in out/, found $wavs"; exit 1; }
[ -s out/timeline.png ] || { echo "FAIL: out/timeline.png is missing"; exit 1; }

say "make test"
make test
t3=$(clock)

say "fresh clone OK"
echo "install:    $((t1 - t0)) s"
echo "make demo:  $((t2 - t1)) s after the install (40 WAVs, out/timeline.png)"
echo "make test:  $((t3 - t2)) s (includes installing .[dev])"
