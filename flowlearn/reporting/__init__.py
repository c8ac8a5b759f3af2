"""Looking at runs: figures, the figure callback, the held-out verdict, ensembles and ``flowlearn report`` (run
directories themselves are read by :mod:`flowlearn.runs`, below training, which resumes from them).

* :mod:`~flowlearn.reporting.figures`: the maps, curves and gallery, as matplotlib figures;
* :mod:`~flowlearn.reporting.callback`: figures drawn while training;
* :mod:`~flowlearn.reporting.heldout`: ``flowlearn evaluate``, the held-out verdict;
* :mod:`~flowlearn.reporting.ensemble`: ``flowlearn ensemble``, K runs' predictions combined with intervals;
* :mod:`~flowlearn.reporting.report`: ``flowlearn report``, markdown and figures of a run or a sweep.
"""
