"""Train a permeability correction: ``python train.py [group=option ...] [key=value ...]``.

A thin Hydra shell around :func:`flowlearn.cli.train.run`; configs/train.yaml lists the config groups.
"""

from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

OmegaConf.register_new_resolver("repo_root", lambda: str(Path(__file__).resolve().parent), replace=True)


@hydra.main(version_base="1.3", config_path="configs", config_name="train")
def main(cfg: DictConfig) -> float | None:
    from flowlearn.runtime import collection_paused

    with collection_paused(then="freeze"):  # the rest of the run's imports
        from flowlearn.cli.train import run

    return run(cfg)


if __name__ == "__main__":
    from flowlearn.runtime import collection_paused, quick_exit

    with collection_paused(then="freeze"):  # Lightning, numba and Hydra: start-up, alive until the exit
        from flowlearn.training.config import hydra_errors_as_one_line

    quick_exit()

    with hydra_errors_as_one_line():
        main()
