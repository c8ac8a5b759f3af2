"""Fractures imported from measurements: a segmented 3D scan (:func:`import_volume`), the height maps of the two
walls (:func:`import_walls`) or an aperture map (:func:`import_aperture`).

Each returns a :class:`~flowlearn.data.schema.Fracture` without a reference pressure (a map to predict on, or to
compute a reference for), validated as :func:`~flowlearn.data.schema.write_fractures` writes it, and a report of
what the import found. Its provenance entry ``scan`` names the function, each source's absolute path and SHA-256
checksum (``sources``), every option (``options``) and the report (``report``). Nothing is written: writing goes
through :func:`~flowlearn.data.schema.write_fractures`, which is atomic.
"""

from flowlearn.data.scans.aperture import import_aperture
from flowlearn.data.scans.common import MapReport
from flowlearn.data.scans.volume import VolumeReport, import_volume
from flowlearn.data.scans.walls import WallsReport, import_walls

__all__ = ["MapReport", "VolumeReport", "WallsReport", "import_aperture", "import_volume", "import_walls"]
