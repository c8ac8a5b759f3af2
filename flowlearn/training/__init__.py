"""Training through the solve: the LightningModule, its metrics, building the model from config, the predictions
file (schema, writer and reader), ``flowlearn predict`` and the job behind ``python train.py``.

* :mod:`~flowlearn.training.module`: aperture -> correction -> law -> pressure solve -> loss;
* :mod:`~flowlearn.training.metrics`: every logged metric, defined and named once;
* :mod:`~flowlearn.training.build`: the correction model from config, for a new run or a finished one;
* :mod:`~flowlearn.training.predictions`: ``predictions.h5``;
* :mod:`~flowlearn.training.predict`: ``flowlearn predict``;
* :mod:`~flowlearn.training.config`, :mod:`~flowlearn.training.train`: the checks and the job of ``train.py``.
"""
