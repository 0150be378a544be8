"""The root of the spec: ``Spec``, the sections it is made of, its own fields and what it derives from them (the
loss, the metrics, the export root), and a run's overrides applied to it.

Each field's docstring is its description (the trigger form shows it; ``overrides.field_doc`` reads it); an
``AuthorOnly`` mark keeps a field from being overridden by whoever triggers a run. The rules between its sections
are ``consistency.RULES``."""

from __future__ import annotations

import datetime as dt
import os
from typing import Annotated, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, ValidationInfo, field_validator

from tfdist.spec import consistency
from tfdist.spec.data import DataSpec
from tfdist.spec.errors import SpecError, validated
from tfdist.spec.export import ExportSpec
from tfdist.spec.families import ModelSpec
from tfdist.spec.kubernetes import KUBERNETES, KubernetesSpec
from tfdist.spec.locations import artifact_location, default_artifact_root
from tfdist.spec.overrides import AuthorOnly, with_values
from tfdist.spec.retries import RetrySpec
from tfdist.spec.schedule import AssetSchedule, Schedule, valid_cron
from tfdist.spec.section import NAME_PATTERN, PARSED, Section
from tfdist.spec.tasks import DEFAULT_METRICS, LOSSES, Direction, direction
from tfdist.spec.training import TrainingSpec
from tfdist.spec.validation import ValidationSpec


class Spec(Section):
    name: Annotated[str, Field(pattern=NAME_PATTERN, max_length=200)]
    """Becomes the dag_id."""
    description: str = ""
    """Shown in Airflow as the DAG's description."""
    schedule: Annotated[Schedule | None, PARSED] = "@daily"
    """A cron expression or preset (a data-interval timetable: each run's data interval is the period it
    trains on), None (triggered runs only), or upstream assets: {assets: [URI, ...], when: all|any, cron: ...
    (asset or time), partitions: day|... (partitioned events)}."""
    timezone: Annotated[str, PARSED] = "UTC"
    """The DAG's time zone, an IANA name (e.g. 'Asia/Tokyo'): the schedule's times, a naive 'start_date', and
    the days, hours... of each run's window and of its '{date}' partitions are read in it."""
    start_date: dt.datetime
    """As in Airflow (in 'timezone' unless a zone is given); also the window 'tfdist plan' shows by default."""
    catchup: Annotated[bool, PARSED] = False
    """As in Airflow: run the intervals missed since 'start_date'."""
    max_active_runs: Annotated[int, Field(ge=1), PARSED] = 1
    """Runs of this pipeline at once (a backfill included)."""
    tags: list[str] = Field(default_factory=list)
    """Shown in Airflow as the DAG's tags."""
    overridable: list[str] = Field(default_factory=list)
    """Fields a run may override (trigger form, '--conf', backfill '--dag-run-conf'), as dotted
    paths, e.g. 'training.epochs'; they become the DAG's typed Params."""
    artifact_root: str = Field(default_factory=default_artifact_root)
    """Where every run's artifacts live: a local path (on Kubernetes, the artifact volume's mount path) or an
    object store's 's3://bucket/prefix' or 'gs://bucket/prefix' (no volume; docs/object-storage.md)."""
    data: DataSpec
    """The input: where it is, its format, features and label, and the data gate."""
    model: ModelSpec
    """The model: a built-in family ('mlp', 'cnn') or 'custom', and its optimizer."""
    training: TrainingSpec = Field(default_factory=TrainingSpec)
    """How and where training runs: the mode, workers, epochs, checkpoints, elasticity, warm start."""
    validation: Annotated[ValidationSpec, AuthorOnly("the gate that decides what is published is the author's")] = (
        Field(default_factory=ValidationSpec)
    )
    """The gate: what a model must score to be published."""
    export: Annotated[ExportSpec, AuthorOnly("what is published and which versions are deleted is the author's")]
    """Where and under which name the blessed model is published, how many versions are kept, approval."""
    retries: Annotated[RetrySpec, PARSED] = Field(default_factory=RetrySpec)
    """Airflow retries of each task."""
    kubernetes: Annotated[KubernetesSpec | None, KUBERNETES] = None
    """Pods, images and volume of a run on Kubernetes (see 'tfdist plan --launcher kubernetes')."""

    rules = consistency.RULES

    @field_validator("artifact_root")
    @classmethod
    def _artifact_root(cls, value: str) -> str:
        return artifact_location(value)

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ValueError, ZoneInfoNotFoundError):
            raise ValueError(
                f"not an IANA time zone name (e.g. 'Asia/Tokyo', 'America/New_York', 'UTC'), got {value!r}"
            ) from None
        return value

    @field_validator("start_date")
    @classmethod
    def _zoned(cls, value: dt.datetime, info: ValidationInfo) -> dt.datetime:
        return value if value.tzinfo else value.replace(tzinfo=ZoneInfo(info.data.get("timezone", "UTC")))

    @field_validator("schedule")
    @classmethod
    def _cron(cls, value: Any) -> Any:
        return valid_cron(value) if isinstance(value, str) else value

    @property
    def zone(self) -> ZoneInfo:
        """The DAG's time zone."""
        return ZoneInfo(self.timezone)

    @property
    def cron(self) -> str | None:
        """The schedule's time part: its cron, an asset-or-time schedule's, else None."""
        return self.schedule.cron if isinstance(self.schedule, AssetSchedule) else self.schedule

    @property
    def partitioned(self) -> str | None:
        """The period of the upstream partitions each run trains on (None: not partitioned)."""
        return None if isinstance(self.schedule, str | None) else self.schedule.partitions

    @property
    def loss(self) -> str:
        """The training loss: the model's, else the task's default."""
        return self.model.loss or LOSSES[self.data.label.task][0]

    @property
    def metrics(self) -> tuple[str, ...]:
        """The metrics reported besides the loss: the model's, else the task's defaults."""
        m = self.model.metrics
        return tuple(m) if m is not None else DEFAULT_METRICS[self.data.label.task]

    def direction(self, metric: str) -> Direction | None:
        """Whether a higher or a lower value of ``metric`` is better, by this spec's task."""
        return direction(self.data.label.task, metric)

    @property
    def checkpoint_selection(self) -> tuple[str, Direction]:
        """(metric, direction) the best checkpoint is chosen by."""
        selection = self.validation.checkpoint
        metric = selection.metric or (self.metrics[0] if self.metrics else "loss")
        return metric, selection.direction or self.direction(metric) or "higher_is_better"

    def change_direction(self, metric: str) -> Direction:
        """The direction of the change threshold on ``metric``: its own, else the metric's."""
        rule = self.validation.change_thresholds[metric]
        found = rule.direction or self.direction(metric)
        assert found is not None  # refused at validation
        return found

    def with_overrides(self, overrides: dict[str, Any]) -> Spec:
        """This spec with '{dotted path: value}' applied, validated again; undeclared paths are refused, and
        so is a run that would start more training processes than its pool slots (fixed at parse time). Only
        the fields set are given again: a role's pod settings are those it sets (``KubernetesSpec.for_role``)."""
        refused = sorted(set(overrides) - set(self.overridable))
        if refused:
            raise SpecError(
                [
                    f"{path}: not overridable in this pipeline; overridable: "
                    f"{', '.join(self.overridable) or 'nothing (see the spec field overridable)'}"
                    for path in refused
                ],
                "run overrides",
            )
        data = with_values(self.model_dump(mode="json", exclude_unset=True, by_alias=True), overrides)
        changed = validated(Spec, data, "spec after the run's overrides")
        t, slots = self.training, self.training.pool_slots or self.training.processes
        if t.pool and changed.training.processes > slots:
            raise SpecError(
                [
                    f"training: this run would start {changed.training.processes} training processes but "
                    f"its train task holds {slots} slot(s) of pool {t.pool!r} (training.pool_slots, fixed "
                    f"when the DAG file is parsed)"
                ],
                "run overrides",
            )
        return changed

    @property
    def export_root(self) -> str:
        return self.export.root or os.path.join(self.artifact_root, "models")

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)
