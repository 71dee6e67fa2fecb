"""What worker/vllm_args.py and the cold-start notes rely on in vLLM-Omni 0.30, read from the
installed wheel's source (`pip install --no-deps "vllm-omni==0.30.*"`; importing it would pull
in torch and vLLM, so it is read as text and parsed)."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

from worker.vllm_args import stage_overrides


@pytest.fixture(scope="module")
def omni() -> Path:
    spec = importlib.util.find_spec("vllm_omni")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail('vllm-omni is not installed: pip install --no-deps "vllm-omni==0.30.*"')
    return Path(next(iter(spec.submodule_search_locations)))


def dataclass_fields(path: Path, name: str) -> set[str]:
    tree = ast.parse(path.read_text())
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == name)
    return {
        item.target.id
        for item in node.body
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
    }


def test_the_talker_overrides_are_stage_fields_vllm_serve_accepts(omni: Path) -> None:
    fields = dataclass_fields(omni / "config" / "stage_config.py", "StageDeployConfig")
    for stage, overrides in stage_overrides(4).items():
        assert set(overrides) <= fields, stage
    assert '"--stage-overrides"' in (omni / "entrypoints" / "cli" / "serve.py").read_text()
    # The talker is stage 0 of the Qwen3-TTS deploy file, and its graphs are on by default.
    deploy = (omni / "deploy" / "qwen3_tts.yaml").read_text()
    assert "  - stage_id: 0\n    max_num_seqs: 64\n" in deploy


def test_parallel_stage_init_is_not_a_vllm_serve_flag_in_0_30(omni: Path) -> None:
    # Why the entrypoint does not pass it (docs/deploy.md#cold-start-phase-budget).
    assert "parallel-stage-init" not in (omni / "entrypoints" / "cli" / "serve.py").read_text()
    assert "parallel_stage_init" in dataclass_fields(
        omni / "config" / "omni_config.py", "VllmOmniOrchestratorConfig"
    )


@pytest.mark.parametrize("stage", ["qwen3_tts_code2wav.py", "qwen3_tts_talker.py"])
def test_both_stages_load_speech_tokenizer_through_the_default_loader(
    omni: Path, stage: str
) -> None:
    # So `--load-format runai_streamer`, which DefaultModelLoader refuses ("Unknown
    # load_format"), cannot serve Qwen3-TTS: the weights are fetched to local disk instead.
    source = (omni / "model_executor" / "models" / "qwen3_tts" / stage).read_text()
    assert "DefaultModelLoader(self.vllm_config.load_config)" in source
    assert "speech_tokenizer" in source
