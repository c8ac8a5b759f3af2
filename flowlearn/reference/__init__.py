"""The flow a law is judged against: the LBM and the wall-fitted Stokes solve of a fracture, dataset generation
(here or on SLURM), and the measurement of a reference's own error. Imported module by module, on use.

* :mod:`~flowlearn.reference.voxels`, :mod:`~flowlearn.reference.wall_mesh`: the voxels and meshes of a gap;
* :mod:`~flowlearn.reference.lbm`: the LBM driver (needs the ``[lbm]`` extra);
* :mod:`~flowlearn.reference.stokes`: the wall-fitted Stokes solve (OpenFOAM);
* :mod:`~flowlearn.reference.wall_reference`: the generator's Stokes reference, two wall-fitted solves extrapolated;
* :mod:`~flowlearn.reference.generate`, :mod:`~flowlearn.reference.cluster`: ``flowlearn generate``, as a job array;
* :mod:`~flowlearn.reference.references`: ``flowlearn reference``, the reference of a file's fractures (an imported
  scan's), here or as a job array;
* :mod:`~flowlearn.reference.convergence`, :mod:`~flowlearn.reference.refinement`,
  :mod:`~flowlearn.reference.reference_error`: how far a reference lies from the converged flow;
* :mod:`~flowlearn.reference.conservation`, :mod:`~flowlearn.reference.departure`: what a reference says of local
  laws; :mod:`~flowlearn.reference.placements`: what an aperture map alone cannot say.
"""
