"""Every experiment preset composes and builds its pruning callback; the paper points carry the paper's settings."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from sparseprune.sweeps import CONF_DIR, check_run

PRESETS = sorted(
    p.relative_to(CONF_DIR / "experiment").with_suffix("").as_posix() for p in CONF_DIR.glob("experiment/**/*.yaml")
)
PAPER_PATTERNS = {
    "ew": {"name": "ew"},
    "vw16": {"name": "vw", "vector": 16},
    "bw32": {"name": "bw", "block_k": 32, "block_n": 32},
    "tw128": {"name": "tw", "granularity": 128},
    "tw64": {"name": "tw", "granularity": 64},
    "tew": {"name": "tew", "granularity": 128, "delta": 0.015},
}
PAPER_MODELS = {"vgg16": "ImageClassifier", "bert": "TextClassifier", "lstm_nmt": "TranslationTask"}


@pytest.mark.parametrize("preset", PRESETS)
def test_preset_composes_and_builds_its_callback(preset: str) -> None:
    check_run([f"experiment={preset}"])


def test_every_paper_point_exists_for_every_model() -> None:
    assert {f"paper/{m}_{p}" for m in PAPER_MODELS for p in PAPER_PATTERNS} <= set(PRESETS)


@pytest.mark.parametrize("model", PAPER_MODELS)
@pytest.mark.parametrize("point", PAPER_PATTERNS)
def test_paper_point_settings(model: str, point: str) -> None:
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="train", overrides=[f"experiment=paper/{model}_{point}"])
    assert {k: cfg.pattern[k] for k in PAPER_PATTERNS[point]} == PAPER_PATTERNS[point]
    assert cfg.schedule.target == 0.75 and cfg.schedule.stages == 3
    assert cfg.model._target_.endswith(PAPER_MODELS[model])
    assert cfg.trainer.accelerator == "gpu"


def test_presets_are_listed_in_the_readme() -> None:
    readme = (CONF_DIR.parent / "README.md").read_text()
    missing = [p for p in PRESETS if not p.startswith("paper/") and p not in readme]
    assert not missing and "experiment=paper/" in readme, f"README lacks presets {missing}"
