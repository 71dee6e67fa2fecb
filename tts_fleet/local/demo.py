"""Built-in sample jobs for `tts-fleet local --demo N`: short texts in a few voices."""

from __future__ import annotations

from worker.jobs import Job

# Qwen3-TTS CustomVoice speakers; the local speech server maps each to an espeak voice.
VOICES = ("Vivian", "Ryan", "Serena", "Dylan")
TEXTS = (
    "Hello from tts-fleet. This audio was made by a local worker.",
    "The queue grew, the alarm fired, and the fleet scaled out to meet it.",
    "Each worker deletes a message only after its audio is safely stored.",
    "When the backlog drains, the idle alarm brings the fleet back to zero.",
    "A worker holds scale-in protection while it has a job in flight.",
    "In AWS, this voice would come from a GPU running Qwen three TTS.",
    "Outstanding work counts messages in flight, so busy workers are not stopped.",
    "One tick of the local scaler stands for one CloudWatch minute.",
)


def demo_jobs(count: int) -> list[Job]:
    """`count` jobs with stable ids (demo-001, ...), cycling through texts and voices."""
    return [
        Job(
            id=f"demo-{index + 1:03d}",
            text=TEXTS[index % len(TEXTS)],
            voice=VOICES[index % len(VOICES)],
        )
        for index in range(count)
    ]
