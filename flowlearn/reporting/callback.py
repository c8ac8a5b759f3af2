"""A Lightning callback that draws the run's figures while it trains and when it ends.

Files go to ``<run dir>/figures/``:

- ``epoch_000/`` before the first step (the starting correction), then ``epoch_<n>/`` after epoch n when a periodic
  render is due (neither with ``every_n_epochs=0``): the learned correction, pressures and pixel-wise errors of
  one fracture (the first test fracture, else validation, else training; see
  :func:`flowlearn.reporting.figures.showcase`);
- at the end of fitting, the full set (:func:`flowlearn.reporting.figures.figure_set`) in ``figures/`` itself: aperture,
  correction, pressure, error, the curves of ``metrics.csv`` (CSV logger) and the held-out gallery.

The maps draw the model beside the LCL and the best closed form of the fracture's split
(:func:`flowlearn.reporting.figures.map_closed_forms`), chosen as the verdict chooses it, over every fracture of
the split: each fracture is predicted once for it, one at a time, the first time a map of the split is drawn (the
closed forms do not learn, so the choice holds for the whole run; their solutions stay cached for the test and
``predictions.h5`` while the model keeps each fracture's problem).

With a TensorBoard logger every figure is also logged as an image, under ``figures/<name>``.

Cost: a periodic render is skipped when it would take the callback's time during training above ``max_overhead``
of the training time so far; the cost of the next render is estimated by the slowest one measured (the first from
the render before training). So at the defaults the figures take at most about 5% of the training time, whatever
the size of the fractures (a render slower than any before it can overshoot by the difference). No periodic render
runs after the last epoch, where the final set follows. Only the global-zero process draws.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import lightning as L
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from matplotlib.figure import Figure

from flowlearn.checks import check_dpi
from flowlearn.data.datamodule import FractureDataset
from flowlearn.reporting.figures import (
    HELD_OUT,
    SHOWCASE_SPLITS,
    figure_set,
    map_closed_forms,
    plot_correction,
    plot_error,
    plot_pressure,
    save_figures,
)
from flowlearn.reporting.heldout import split_metrics
from flowlearn.runs import read_metrics
from flowlearn.training.module import FractureFlowModule
from flowlearn.training.predictions import FractureFields, predict_fields


class FigureCallback(L.Callback):
    """Write figures every ``every_n_epochs`` epochs (within the ``max_overhead`` budget) and at the end of fit.

    Args:
        every_n_epochs: epochs between periodic renders; 0 renders only the final set, after training.
        max_overhead: largest ratio of the periodic renders' time to the training time (0.05 = 5%; 0 renders only
            before and after training).
        gallery_size: held-out fractures in the final gallery.
        dpi: resolution of the PNG files, an integer in :data:`~flowlearn.checks.FIGURE_DPI`.
        dirname: folder under the run directory (the trainer's ``default_root_dir``).
    """

    def __init__(
        self,
        every_n_epochs: int = 5,
        max_overhead: float = 0.05,
        gallery_size: int = 6,
        dpi: int = 100,
        dirname: str = "figures",
    ) -> None:
        if every_n_epochs < 0:
            raise ValueError(f"every_n_epochs must be >= 0, got {every_n_epochs}")
        if not max_overhead >= 0:
            raise ValueError(f"max_overhead must be >= 0, got {max_overhead}")
        check_dpi(dpi)
        self.every_n_epochs = every_n_epochs
        self.max_overhead = max_overhead
        self.gallery_size = gallery_size
        self.dpi = dpi
        self.dirname = dirname
        # Bookkeeping of the budget, in seconds (perf_counter); public so that benchmarks can read it.
        self.render_seconds: dict[str, float] = {}
        self.spent_s = 0.0
        self._start = 0.0
        self._estimate = 0.0
        # By split, the closed form the maps draw beside the model (None: the LCL is the best, or none is).
        self._best: dict[str, str | None] = {}

    # -- hooks ----------------------------------------------------------------------------------------------

    def on_train_start(self, trainer: L.Trainer, pl_module: FractureFlowModule) -> None:
        if trainer.is_global_zero and self.every_n_epochs:
            # A resumed run starts with current_epoch epochs done.
            self._estimate = self._render_progress(trainer, pl_module, trainer.current_epoch)
        self.spent_s = 0.0
        self._start = time.perf_counter()

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: FractureFlowModule) -> None:
        done = trainer.current_epoch + 1
        if not trainer.is_global_zero or not self.every_n_epochs or done % self.every_n_epochs:
            return
        if done == trainer.max_epochs:
            return  # the final set follows at once
        training = time.perf_counter() - self._start - self.spent_s
        if self.spent_s + self._estimate > self.max_overhead * training:
            return
        seconds = self._render_progress(trainer, pl_module, done)
        self.spent_s += seconds
        # Render times vary with the machine's load: budget for the slowest seen so far.
        self._estimate = max(self._estimate, seconds)

    def on_fit_end(self, trainer: L.Trainer, pl_module: FractureFlowModule) -> None:
        if not trainer.is_global_zero:
            return
        begin = time.perf_counter()
        fields = self._fields(trainer, pl_module, self.gallery_size)
        best = self._closed_forms(trainer, pl_module, {f.split for f in fields})
        csv = next((lg for lg in trainer.loggers if isinstance(lg, CSVLogger)), None)
        columns = read_metrics(csv.log_dir) if csv is not None else None
        self._write(trainer, figure_set(fields, columns, best), self._root(trainer))
        self.render_seconds["final"] = time.perf_counter() - begin

    # -- rendering ------------------------------------------------------------------------------------------

    def _root(self, trainer: L.Trainer) -> Path:
        return Path(trainer.default_root_dir) / self.dirname

    def _render_progress(self, trainer: L.Trainer, pl_module: FractureFlowModule, epochs: int) -> float:
        """Draw the maps that change during training, for the showcase fracture after ``epochs`` epochs, to
        ``figures/epoch_<epochs>``; returns the seconds it took (the choice of the closed form to draw, made once
        for the run, not counted: it is no cost of the renders to come)."""
        split = _showcase_split(trainer.datamodule.splits)
        best = self._closed_forms(trainer, pl_module, {split})[split]
        begin = time.perf_counter()
        (shown,) = self._fields(trainer, pl_module, 0)
        figures = {
            "correction": plot_correction(shown),
            "pressure": plot_pressure(shown, best),
            "error": plot_error(shown, best),
        }
        self._write(trainer, figures, self._root(trainer) / f"epoch_{epochs:03d}")
        seconds = time.perf_counter() - begin
        self.render_seconds[f"epoch_{epochs:03d}"] = seconds
        return seconds

    def _closed_forms(
        self, trainer: L.Trainer, pl_module: FractureFlowModule, splits: set[str]
    ) -> dict[str, str | None]:
        """By split of ``splits``, the closed form the maps draw (:func:`~flowlearn.reporting.figures.
        map_closed_forms`) over every fracture of the split, chosen the first time it is asked for."""
        datasets = trainer.datamodule.splits
        for split in splits - set(self._best):
            dataset = datasets[split]
            with _evaluating(pl_module):
                # One fracture's fields at a time: split_metrics keeps their metrics only.
                result = split_metrics(
                    (predict_fields(pl_module, dataset, i, split) for i in range(len(dataset))), split
                )
            self._best[split] = None if result is None else map_closed_forms({split: result})[split]
        return {split: self._best[split] for split in splits}

    def _fields(
        self, trainer: L.Trainer, pl_module: FractureFlowModule, held_out: int
    ) -> list[FractureFields]:
        """The showcase fracture's fields, then up to ``held_out`` more validation and test fractures."""
        splits = trainer.datamodule.splits
        wanted: list[tuple[str, int]] = []
        showcase = _showcase_split(splits)
        if showcase is not None:
            wanted.append((showcase, 0))
        for split in HELD_OUT:
            wanted += [(split, i) for i in range(len(splits[split])) if (split, i) not in wanted]
        wanted = wanted[: 1 + held_out]
        with _evaluating(pl_module):
            return [predict_fields(pl_module, splits[split], index, split) for split, index in wanted]

    def _write(self, trainer: L.Trainer, figures: dict[str, Figure], directory: Path) -> None:
        save_figures(figures, directory, dpi=self.dpi)
        for logger in trainer.loggers:
            if isinstance(logger, TensorBoardLogger):
                for name, fig in figures.items():
                    logger.experiment.add_figure(f"figures/{name}", fig, trainer.global_step, close=False)


def _showcase_split(splits: Mapping[str, FractureDataset]) -> str | None:
    """The split of the fracture that the single-fracture maps show (:func:`~flowlearn.reporting.figures.showcase`):
    the first of :data:`~flowlearn.reporting.figures.SHOWCASE_SPLITS` with a fracture."""
    return next((s for s in SHOWCASE_SPLITS if s in splits and len(splits[s])), None)


@contextmanager
def _evaluating(module: FractureFlowModule) -> Iterator[None]:
    """``module`` in eval mode for the block, then back in the mode it was in."""
    was_training = module.training
    module.eval()
    try:
        yield
    finally:
        module.train(was_training)
