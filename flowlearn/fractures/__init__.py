"""Fracture geometry: self-affine walls, closure into contact, the recipes that draw datasets, the mid-surface's
inclination and the dimensionless statistics of a map. Arrays in, arrays out: no file is read here.

* :mod:`~flowlearn.fractures.roughness`: self-affine rough walls, their placement around an aperture map;
* :mod:`~flowlearn.fractures.closure`: walls pressed into contact (closure, contact spots);
* :mod:`~flowlearn.fractures.recipes`: the named recipes ``flowlearn generate`` draws fractures from;
* :mod:`~flowlearn.fractures.inclination`: the inclination tensor of the mid-surface and the aperture slope;
* :mod:`~flowlearn.fractures.statistics`: a map's dimensionless statistics and their training ranges, and the
  statistics rock joints are held against.
"""
