"""flowlearn's SLURM launcher as a Hydra plugin: Hydra instantiates launchers only from the ``hydra_plugins``
package, so ``configs/hydra/launcher/slurm.yaml`` names this class; the logic is :class:`flowlearn.slurm.SlurmLauncher`.
"""

from flowlearn.slurm import SlurmLauncher as _SlurmLauncher


class SlurmLauncher(_SlurmLauncher):
    """:class:`flowlearn.slurm.SlurmLauncher`, registered with Hydra."""
