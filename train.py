"""Train and prune in stages: `python train.py model=vgg16 pattern=tw` (see conf/ and the README)."""

from pathlib import Path

import hydra
from omegaconf import DictConfig

from sparseprune.app.choices import exit_on_unknown_choice
from sparseprune.app.cli import exit_on_user_error
from sparseprune.app.console import quiet_console
from sparseprune.app.run_cleanup import discard_run_dir_on_failure


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
@discard_run_dir_on_failure
@exit_on_user_error
def main(cfg: DictConfig) -> None:
    quiet_console()
    from sparseprune.app.training import train  # heavy imports after Hydra has parsed the command line

    train(cfg)


if __name__ == "__main__":
    exit_on_unknown_choice(Path(__file__).resolve().parent / "conf")
    main()
