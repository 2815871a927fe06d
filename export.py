"""Pack a pruned checkpoint for the sparse kernels, check it, time it: `python export.py ckpt=PATH`."""

import hydra
from omegaconf import DictConfig

from sparseprune.cli import exit_on_user_error


@hydra.main(version_base="1.3", config_path="conf", config_name="export")
@exit_on_user_error
def main(cfg: DictConfig) -> None:
    from sparseprune.export.pipeline import export  # heavy imports after Hydra has parsed the command line

    export(cfg)


if __name__ == "__main__":
    main()
