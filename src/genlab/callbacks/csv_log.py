"""The CSV logger of ``conf/logger/csv.yaml``, appending to ``csv/metrics.csv`` when a run resumes into its run dir.

Lightning's CSVLogger deletes an existing ``metrics.csv`` when it starts, so a run resumed with ``ckpt_path=last``
into its own directory lost the history before the kill. Here the file is kept, its header is carried over (new
columns rewrite it with the old rows, as Lightning does within one run), and rows logged after the checkpoint's step
by the killed process are dropped on resume, so every step appears once."""

from __future__ import annotations

import csv
import os

from pytorch_lightning.loggers import CSVLogger
from pytorch_lightning.loggers.csv_logs import ExperimentWriter


class _AppendingWriter(ExperimentWriter):
    def _check_log_dir_exists(self) -> None:  # Lightning's deletes metrics.csv here
        if os.path.isfile(self.metrics_file_path):
            with open(self.metrics_file_path, newline="") as f:
                self.metrics_keys = list(csv.DictReader(f).fieldnames or [])

    def drop_after(self, step: int) -> None:
        """Forget rows of steps after ``step`` (written by a killed process after its last checkpoint)."""
        if not os.path.isfile(self.metrics_file_path):
            return
        with open(self.metrics_file_path, newline="") as f:
            rows = list(csv.DictReader(f))
        kept = [r for r in rows if not r.get("step") or int(float(r["step"])) <= step]
        if len(kept) != len(rows):
            with open(self.metrics_file_path, "w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=self.metrics_keys)
                writer.writeheader()
                writer.writerows(kept)


class AppendingCSVLogger(CSVLogger):
    @property
    def experiment(self) -> _AppendingWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _AppendingWriter(log_dir=self.log_dir)
        return self._experiment

    def resumed_at(self, step: int) -> None:
        self.experiment.drop_after(step)
