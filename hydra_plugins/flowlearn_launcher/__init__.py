"""flowlearn's launchers as a Hydra plugin: Hydra instantiates launchers only from the ``hydra_plugins`` package, so
``configs/hydra/launcher/{slurm,local,sequential}.yaml`` name these classes; the logic is in
:mod:`flowlearn.training.slurm`.
"""

from flowlearn.training.slurm import LocalLauncher as _LocalLauncher
from flowlearn.training.slurm import SequentialLauncher as _SequentialLauncher
from flowlearn.training.slurm import SlurmLauncher as _SlurmLauncher


class SlurmLauncher(_SlurmLauncher):
    """:class:`flowlearn.training.slurm.SlurmLauncher`, registered with Hydra."""


class LocalLauncher(_LocalLauncher):
    """:class:`flowlearn.training.slurm.LocalLauncher`, registered with Hydra."""


class SequentialLauncher(_SequentialLauncher):
    """:class:`flowlearn.training.slurm.SequentialLauncher`, registered with Hydra."""
