"""Each stage's command line, typed: the Airflow side writes it, the stage's entry point reads it."""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

WORKER_PACKAGE = "tfdist.trainer"
"""The worker runtime's package: each stage runs a module of it, ``python -m tfdist.trainer.<module>``."""


def worker_command(python: str, module: str) -> list[str]:
    """How a worker process runs the worker module ``module`` (``prepare``, ``validate_data``, ``train``,
    ``evaluate``, ``export``, ``pod``): ``python -m tfdist.trainer.<module>``."""
    return [python, "-m", f"{WORKER_PACKAGE}.{module}"]


Args = TypeVar("Args", bound="StageArgs")


@dataclass(frozen=True)
class StageArgs:
    """A stage's command-line arguments, typed: the Airflow side writes them (``to_argv``), the stage's entry point
    reads them (``parse``). A field ``source_dir`` is the flag ``--source-dir``; a tuple field is repeated; a field
    left at its default is not written. Every value is a path or a number the plan chose."""

    worker_module: ClassVar[str]
    """The worker module running the stage (``tfdist.trainer.<worker_module>``)."""
    spec: str
    """The run's effective spec (spec.json)."""

    @property
    def result_file(self) -> str:
        """Where the stage writes its result record: every stage's arguments have a field ``result``."""
        result: str = vars(self)["result"]
        return result

    def to_argv(self) -> list[str]:
        argv: list[str] = []
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value == field.default:
                continue
            for item in value if isinstance(value, tuple) else (value,):
                argv += [_flag(field.name), str(item)]
        return argv

    def command(self, python: str) -> list[str]:
        """The argv of a process running the stage with these arguments."""
        return [*worker_command(python, self.worker_module), *self.to_argv()]

    @classmethod
    def parse(cls: type[Args], argv: list[str] | None = None) -> Args:
        parser = argparse.ArgumentParser(
            prog=f"python -m {WORKER_PACKAGE}.{cls.worker_module}", description=cls.__doc__
        )
        for field in dataclasses.fields(cls):
            required = field.default is dataclasses.MISSING
            options: dict[str, Any] = (
                {"action": "append"}
                if field.type.startswith("tuple")
                else {"type": int if field.type == "int" else str}
            )
            if not required:
                options["default"] = field.default
            parser.add_argument(_flag(field.name), dest=field.name, required=required, **options)
        values: dict[str, Any] = {
            k: tuple(v) if isinstance(v, list) else v for k, v in vars(parser.parse_args(argv)).items()
        }
        return cls(**values)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


@dataclass(frozen=True)
class PrepareArgs(StageArgs):
    """Stage prepare_data: the run's input → train/eval shards and the data manifest."""

    worker_module = "prepare"
    out: str
    result: str
    source: tuple[str, ...]
    """The input: files or glob patterns (fsspec URLs), one per partition of the run's window."""
    pods: int = 1
    """On Kubernetes: the stage's pods, each writing a share of the input."""
    coordination: str = ""
    """With ``pods``: the directory they meet in, on the shared volume."""


@dataclass(frozen=True)
class ValidateDataArgs(StageArgs):
    """Stage validate_data: the run's data statistics against the baseline's → the data gate's decision."""

    worker_module = "validate_data"
    run: str
    data: str
    model_dir: str
    out: str
    result: str


@dataclass(frozen=True)
class TrainArgs(StageArgs):
    """Stage train: the run's shards (and, warm-started, the baseline's checkpoint) → checkpoints (the chief's),
    progress, heartbeats, the training curve and TensorBoard summaries."""

    worker_module = "train"
    data: str
    checkpoints: str
    result: str
    heartbeats: str
    progress: str
    run: str
    model_dir: str
    warm_start_record: str
    """The run's warm-start record (what its training started from)."""
    curve: str
    tensorboard: str


@dataclass(frozen=True)
class EvaluateArgs(StageArgs):
    """Stage evaluate: the run's checkpoints → metrics and the gate's blessing."""

    worker_module = "evaluate"
    run: str
    data: str
    model_dir: str
    checkpoints: str
    train_result: str
    out: str
    result: str
    tensorboard: str


@dataclass(frozen=True)
class ExportArgs(StageArgs):
    """Stage export: the blessed checkpoint → a published SavedModel version."""

    worker_module = "export"
    run: str
    data: str
    model_dir: str
    eval: str
    train_result: str
    warm_start_record: str
    """The run's warm-start record (what its training started from)."""
    version_base: int
    result: str
    approval: str = ""
    """With ``export.approval``: the run's approval record, which must say approved (contract.approval)."""
