"""flowlearn's SLURM launcher as a Hydra plugin: Hydra instantiates launchers only from the ``hydra_plugins``
package, so ``configs/hydra/launcher/slurm.yaml`` names this class; the logic is :class:`flowlearn.training.slurm.SlurmLauncher`.
"""

from flowlearn.training.slurm import SlurmLauncher as _SlurmLauncher


class SlurmLauncher(_SlurmLauncher):
    """:class:`flowlearn.training.slurm.SlurmLauncher`, registered with Hydra."""
