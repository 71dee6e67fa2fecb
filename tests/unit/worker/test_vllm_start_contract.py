"""What worker/vllm_args.py and the cold-start notes rely on in vLLM-Omni 0.30, read from the
installed wheel's source (`pip install --no-deps "vllm-omni==0.30.*"`; importing it would pull
in torch and vLLM, so it is read as text and parsed)."""

from __future__ import annotations

import ast
import importlib.util
import json
from pathlib import Path

import pytest
import yaml

from worker.vllm_args import main as vllm_args_main
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


def deploy_stages(omni: Path) -> dict[str, dict[str, object]]:
    deploy = yaml.safe_load((omni / "deploy" / "qwen3_tts.yaml").read_text())
    return {str(stage["stage_id"]): stage for stage in deploy["stages"]}


@pytest.mark.parametrize("concurrency", [8, 16])
def test_the_stage_configuration_the_entrypoint_writes(
    omni: Path, concurrency: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """What `python -m worker.vllm_args` prints for the default concurrencies (8 on a 24-GB
    GPU, 16 on a 48-GB one: tts_fleet/config/models.py), pinned whole, and each stage it
    names is a stage of the shipped deploy file whose max_num_seqs (64) it lowers."""
    assert vllm_args_main({"CONCURRENCY": str(concurrency)}) == 0
    written = json.loads(capsys.readouterr().out)
    sizes = [1, 2, 4, 8] if concurrency == 8 else [1, 2, 4, 8, 16]
    assert written == {
        "0": {
            "max_num_seqs": concurrency,
            "compilation_config": {"cudagraph_capture_sizes": sizes},
        },
        "1": {"max_num_seqs": concurrency},
    }
    shipped = deploy_stages(omni)
    for stage, overrides in written.items():
        assert shipped[stage]["max_num_seqs"] == 64
        assert overrides["max_num_seqs"] < 64
    # Stage 1 is the codec decoder that the talker's chunks stream to.
    assert "from_stage_0" in shipped["1"]["input_connectors"]  # type: ignore[operator]
    # The connector's decode batch bound is connector config, not a stage field: not ours.
    fields = dataclass_fields(omni / "config" / "stage_config.py", "StageDeployConfig")
    assert "decode_batch_max_size" not in fields
