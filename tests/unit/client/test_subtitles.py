"""SRT and WebVTT from sentence timings (tts_fleet/client/subtitles.py)."""

from __future__ import annotations

from pathlib import Path

from tts_fleet.client.subtitles import cues, job_subtitles, render
from worker.jobs import Manifest, Segment


def segment(start: float, end: float, text: str) -> Segment:
    return Segment(start=start, end=end, text=text)


def test_srt_has_numbered_cues_with_comma_milliseconds() -> None:
    found = cues([segment(0.0, 1.25, "Hello there."), segment(1.25, 3661.5, "A <b> & c.")])
    assert render(found, "srt") == (
        "1\n00:00:00,000 --> 00:00:01,250\nHello there.\n\n"
        "2\n00:00:01,250 --> 01:01:01,500\nA <b> & c.\n"
    )


def test_vtt_has_its_header_and_escapes_markup() -> None:
    text = render(cues([segment(0.5, 1.0, "x --> y & <i>")]), "vtt")
    assert text == "WEBVTT\n\n00:00:00.500 --> 00:00:01.000\nx --&gt; y &amp; &lt;i&gt;\n"


def test_cues_stay_in_order_and_inside_the_audio() -> None:
    # Untrusted timings: overlapping, backwards, past the end, blank, a planted blank line.
    found = cues(
        [segment(0, 2, "One."), segment(1.5, 1.0, "Two.\n\n3\n00:00"), segment(3, 9, "Three."),
         segment(4, 5, "  ")],
        shift=10.0,
        length=15.0,
    )  # fmt: skip
    assert [(c.start, c.end) for c in found] == [(10, 12), (12, 12), (13, 15)]
    assert found[1].text == "Two. 3 00:00"
    assert render(found, "srt").count("-->") == 3


def test_long_sentences_wrap_at_42_characters() -> None:
    words = "word " * 30
    lines = render(cues([segment(0, 5, words)]), "srt").splitlines()[2:]
    assert len(lines) > 1 and all(len(line) <= 42 for line in lines)


def test_each_downloaded_job_gets_its_file_and_others_none(tmp_path: Path) -> None:
    def manifest(job_id: str, segments: list[Segment] | None) -> Manifest:
        return Manifest(
            id=job_id, request={}, audio_key=f"outputs/{job_id}.wav", duration_s=2.0,
            sample_rate=24_000, model="m", voice="Vivian", synth_s=1, queue_wait_s=0,
            attempts=1, pieces=1, worker="w", finished_at="t", segments=segments,
        )  # fmt: skip

    timed = [segment(0, 1, "One."), segment(1, 2.5, "Two.")]
    (tmp_path / "a.json").write_bytes(manifest("a", timed).to_json())
    (tmp_path / "b.json").write_bytes(manifest("b", None).to_json())  # an older worker's
    (tmp_path / "c.json").write_bytes(manifest("other", timed).to_json())  # not its own
    written = job_subtitles(tmp_path, ["a", "b", "c", "../x"], "srt")
    assert list(written) == ["a"]
    assert (tmp_path / "a.srt").read_text().endswith("00:00:01,000 --> 00:00:02,000\nTwo.\n")
