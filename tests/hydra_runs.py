"""Composing the real Hydra configs inside a test, with outputs under a temporary directory."""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, open_dict

CONF_DIR = str(Path(__file__).resolve().parents[1] / "conf")

# A VGG16 small enough for CPU tests: quarter width, a few batches per phase, magnitude scores by default.
TINY_VGG = [
    "model.width_multiplier=0.25",
    "data.train_subset=256",
    "data.batch_size=32",
    "logger=none",
    "~callbacks.progress_bar",
    "trainer.enable_progress_bar=false",
    "trainer.enable_model_summary=false",
    "test=false",
]

# Per-pattern options that fit the quarter-width VGG16 (K = 9*Cin with Cin >= 16, N >= 16). Blocks run as TW tiles
# (BW 32 wide, Shfl-BW) need N a multiple of 32: its one 16-channel conv after the first stays dense with them.
DENSE_N16 = "model.prune_exclude=[net.features.0.weight,net.features.3.weight,net.classifier.3.weight]"
PATTERN_OVERRIDES = {
    "ew": ["pattern=ew"],
    "vw": ["pattern=vw"],
    "bw": ["pattern=bw", "pattern.block_k=16", "pattern.block_n=16"],
    "tw": ["pattern=tw", "pattern.granularity=32"],
    "tew": ["pattern=tew", "pattern.granularity=32", "pattern.delta=0.02"],
    "nm": ["pattern=nm"],
    "bw-tw": ["pattern=bw", "pattern.block_k=16", "pattern.block_n=32", DENSE_N16],
    "shflbw": ["pattern=shflbw", "pattern.block=32", DENSE_N16],
}


def compose_config(config_name: str, overrides: list[str], output_dir: Path) -> DictConfig:
    """The config `python <entry>.py <overrides>` would run, as a plain object with Hydra's runtime set."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(config_name=config_name, overrides=overrides, return_hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.runtime.output_dir = str(output_dir)
        cfg.hydra.runtime.cwd = str(Path(CONF_DIR).parent)
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):  # the entry point's task never sees the hydra node
        del cfg.hydra
    return cfg
