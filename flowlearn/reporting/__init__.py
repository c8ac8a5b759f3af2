"""Looking at runs: run directories and their metrics, figures, the figure callback, ``flowlearn report``.

* :mod:`~flowlearn.reporting.runs`: what a run or sweep directory holds, its ``metrics.csv``;
* :mod:`~flowlearn.reporting.figures`: the maps, curves and gallery, as matplotlib figures;
* :mod:`~flowlearn.reporting.callback`: figures drawn while training;
* :mod:`~flowlearn.reporting.heldout`: ``flowlearn evaluate``, the held-out verdict;
* :mod:`~flowlearn.reporting.ensemble`: ``flowlearn ensemble``, K runs' predictions combined with intervals;
* :mod:`~flowlearn.reporting.report`: ``flowlearn report``, markdown and figures of a run or a sweep.
"""
