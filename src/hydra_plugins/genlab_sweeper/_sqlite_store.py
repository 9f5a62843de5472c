"""An Optuna storage kept in memory and mirrored, trial by trial, to a SQLite file that is replayed on load.

Optuna 2.10's own RDB storage does not work with SQLAlchemy 2 (its schema-version check fails on a new file), and
a study only needs its trials to resume: params, distributions, values, state. This stores exactly that with the
standard library's sqlite3, one process writing at a time (the sweeper's).
"""

from __future__ import annotations

import datetime as _dt
import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from optuna.distributions import distribution_to_json, json_to_distribution
from optuna.storages import InMemoryStorage
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

_SCHEMA = """
CREATE TABLE IF NOT EXISTS trials (
    study TEXT NOT NULL, number INTEGER NOT NULL, state TEXT NOT NULL, params TEXT NOT NULL,
    distributions TEXT NOT NULL, trial_values TEXT, user_attrs TEXT NOT NULL, system_attrs TEXT NOT NULL,
    datetime_start TEXT, datetime_complete TEXT, PRIMARY KEY (study, number)
);
CREATE TABLE IF NOT EXISTS studies (study TEXT PRIMARY KEY, directions TEXT NOT NULL);
"""


def _iso(t: _dt.datetime | None) -> str | None:
    return t.isoformat() if t else None


def _dt_or_none(s: str | None) -> _dt.datetime | None:
    return _dt.datetime.fromisoformat(s) if s else None


class SQLiteTrialStore(InMemoryStorage):
    def __init__(self, path: str | Path, study_name: str) -> None:
        super().__init__()
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.study_name = study_name
        self._db = sqlite3.connect(self.path, isolation_level=None)  # autocommit: every trial update is durable
        self._db.executescript(_SCHEMA)
        rows = self._db.execute(
            "SELECT number, state, params, distributions, trial_values, user_attrs, system_attrs, datetime_start, "
            "datetime_complete FROM trials WHERE study = ? ORDER BY number",
            (study_name,),
        ).fetchall()
        directions = self._db.execute("SELECT directions FROM studies WHERE study = ?", (study_name,)).fetchone()
        self._replaying = True
        if rows or directions:
            study_id = super().create_new_study(study_name)
            if directions:
                super().set_study_directions(study_id, [StudyDirection[d] for d in json.loads(directions[0])])
            for row in rows:
                super().create_new_trial(study_id, template_trial=self._from_row(row))
        self._replaying = False

    @staticmethod
    def _from_row(row: tuple[Any, ...]) -> FrozenTrial:
        number, state, params, dists, values, user, system, start, complete = row
        values = json.loads(values) if values else None
        return FrozenTrial(
            number=number,
            state=TrialState[state],
            value=None,
            values=values,
            datetime_start=_dt_or_none(start),
            datetime_complete=_dt_or_none(complete),
            params=json.loads(params),
            distributions={k: json_to_distribution(v) for k, v in json.loads(dists).items()},
            user_attrs=json.loads(user),
            system_attrs=json.loads(system),
            intermediate_values={},
            trial_id=-1,
        )

    def _save(self, trial_id: int) -> None:
        if self._replaying:
            return
        t = self.get_trial(trial_id)
        self._db.execute(
            "INSERT OR REPLACE INTO trials VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                self.get_study_name_from_id(self._trial_id_to_study_id_and_number[trial_id][0]),
                t.number,
                t.state.name,
                json.dumps(t.params),
                json.dumps({k: distribution_to_json(d) for k, d in t.distributions.items()}),
                json.dumps(t.values) if t.values is not None else None,
                json.dumps(t.user_attrs, default=str),
                json.dumps(t.system_attrs, default=str),
                _iso(t.datetime_start),
                _iso(t.datetime_complete),
            ),
        )

    # Every change the sweeper makes to the study goes through one of these; mirror it.
    def set_study_directions(self, study_id: int, directions: Sequence[StudyDirection]) -> None:
        super().set_study_directions(study_id, directions)
        if not self._replaying:
            self._db.execute(
                "INSERT OR REPLACE INTO studies VALUES (?, ?)",
                (self.get_study_name_from_id(study_id), json.dumps([d.name for d in directions])),
            )

    def create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> int:
        trial_id = super().create_new_trial(study_id, template_trial)
        self._save(trial_id)
        return trial_id

    def set_trial_param(self, trial_id: int, param_name: str, param_value_internal: float, distribution: Any) -> None:
        super().set_trial_param(trial_id, param_name, param_value_internal, distribution)
        self._save(trial_id)

    def set_trial_state(self, trial_id: int, state: TrialState) -> bool:
        ok = super().set_trial_state(trial_id, state)
        self._save(trial_id)
        return ok

    def set_trial_system_attr(self, trial_id: int, key: str, value: Any) -> None:
        super().set_trial_system_attr(trial_id, key, value)
        self._save(trial_id)

    def set_trial_user_attr(self, trial_id: int, key: str, value: Any) -> None:
        super().set_trial_user_attr(trial_id, key, value)
        self._save(trial_id)
