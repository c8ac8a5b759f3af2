"""Training through the solve: the LightningModule, building the model from config, the predictions file (schema,
writer and reader), ``flowlearn predict`` and the job behind ``python train.py``.

* :mod:`~flowlearn.training.module`: aperture -> correction -> law -> pressure solve -> loss (the metrics it logs
  are defined once, below every floor that reads them: :mod:`flowlearn.metrics`);
* :mod:`~flowlearn.training.build`: the correction model from config, for a new run or a finished one;
* :mod:`~flowlearn.training.predictions`: ``predictions.h5``;
* :mod:`~flowlearn.training.predict`: ``flowlearn predict``;
* :mod:`~flowlearn.training.config`, :mod:`~flowlearn.training.train`: the checks and the job of ``train.py``.
"""
