"""Stage export: publish the blessed checkpoint as ``<model dir>/<version>/``, a SavedModel whose
``serving_default`` signature takes the raw features by name (strings as strings, int64 ids as int64, NaN for a
missing number) and returns the task's outputs (multiclass ``probabilities`` and ``classes``, binary
``probability``, regression ``prediction`` in the target's units), with ``metadata.json``, the data's statistics
and vocabularies and the training checkpoint beside it.

Only a blessed checkpoint is exported. The SavedModel is written to a hidden temp directory in the model directory,
reloaded, its signature run on every eval example and compared with the trained model's outputs (no
training/serving skew), and only then renamed into place: a crash midway leaves no visible version. The version is
the first one from ``--version-base`` (derived from the run's data interval) neither published nor claimed by another
export running at the same time; a rerun of the same run finds and reuses its own version. TF Serving serves the
highest number, so a backfill of an earlier interval publishes below the live version and never becomes it; a base
numbered from the future is refused, and so is any export while the live version is numbered so
(``version_refusal``). Afterwards only the newest ``export.keep_versions`` are kept, never the baseline."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import glob
import os
import shutil
from typing import TYPE_CHECKING, Any

import numpy as np

from tfdist.contract.data_records import LabelEntry, Manifest, NumericEntry
from tfdist.contract.launch import EXIT_REFUSED
from tfdist.contract.layout import BLESSING, MANIFEST
from tfdist.contract.publish_records import (
    Approval,
    Blessing,
    Claim,
    ExportResult,
    ParentVersion,
    PublishedBlessing,
    ServingInput,
    ServingOutput,
    ServingSkew,
    Signature,
    VersionMetadata,
    WarmStart,
)
from tfdist.contract.records import (
    Metrics,
    RecordError,
    create_record,
    read_record,
    read_record_if_exists,
    write_record,
)
from tfdist.contract.stages import ExportArgs
from tfdist.contract.train_records import RunRecord, TrainResult, WarmStartRecord
from tfdist.infra import storage
from tfdist.infra.jsonfiles import digest_json, sha256_file
from tfdist.publishing import approval, registry
from tfdist.trainer import data, metrics, scratch
from tfdist.trainer.data import MISSING_INT64
from tfdist.trainer.evaluate import score, serving_predict
from tfdist.trainer.models import OUTPUT, IntegrityError, restore_checked
from tfdist.trainer.runtime import fail, import_tensorflow, load_spec, run_stage, say

if TYPE_CHECKING:
    from tfdist.spec import Spec

SKEW_TOLERANCE = 1e-4
"""The largest difference allowed between the reloaded SavedModel's outputs and the trained Keras model's on an eval
example (a regression's prediction: in the target's standard deviations)."""


SAVED_MODEL = "saved_model.pb"
"""A SavedModel's graph: uploaded to an object store after its variables, so a TF Serving polling the model's
directory with its "latest" policy finds no loadable version before the whole one is there."""


def serving_inputs(manifest: Manifest) -> list[ServingInput]:
    """The serving signature's inputs, one per feature by name: its kind, dtype, shape (None: any size) and the
    value that says missing (a list: padding, and an empty list)."""
    found = []
    for f in manifest.features:
        missing: str | int
        shape: list[int | None]
        if isinstance(f, NumericEntry):
            dtype, shape, missing = "float32", [None, *f.shape], "NaN"
        elif f.kind == "categorical_list":
            dtype, shape, missing = "string", [None, None], ""
        else:
            dtype, shape, missing = f.dtype, [None], MISSING_INT64 if f.dtype == "int64" else ""
        found.append(ServingInput(name=f.name, kind=f.kind, dtype=dtype, shape=shape, missing=missing))
    return found


def serving_outputs(label: LabelEntry) -> dict[str, ServingOutput]:
    """The serving signature's outputs by task, each with its dtype and shape."""
    if label.task == "multiclass":
        return {
            "probabilities": ServingOutput(dtype="float32", shape=[None, len(label.class_names)]),
            "classes": ServingOutput(dtype="string", shape=[None]),
        }
    return {OUTPUT[label.task]: ServingOutput(dtype="float32", shape=[None])}


def serving_module(tf, model, manifest: Manifest):
    """A tf.Module whose ``serve`` takes the raw features (one named input each, ``serving_inputs``) and returns
    the task's outputs (``serving_outputs``); int64 ids go to the model as the strings the shards hold."""
    inputs, label = serving_inputs(manifest), manifest.label
    int64 = [i.dtype == "int64" for i in inputs]
    names = [i.name for i in inputs]
    module = tf.Module()
    module.model = model

    @tf.function(input_signature=[tf.TensorSpec(i.shape, i.dtype, name=i.name) for i in inputs])
    def serve(*tensors):
        strings = [data.int64_as_strings(tf, t) if is_int64 else t for t, is_int64 in zip(tensors, int64, strict=True)]
        output = model(dict(zip(names, strings, strict=True)), training=False)
        if label.task != "multiclass":
            return {OUTPUT[label.task]: tf.reshape(output, [-1])}
        return {"probabilities": output, "classes": tf.gather(tf.constant(label.classes), tf.argmax(output, 1))}

    module.serve = serve
    return module


@dataclasses.dataclass(frozen=True)
class Served:
    """What the reloaded SavedModel's signature did on the eval examples: its skew, and the task's metrics."""

    skew: ServingSkew
    metrics: Metrics


def serving_check(tf, spec: Spec, model, path: str, data_dir: str, manifest: Manifest) -> Served:
    """Reload the SavedModel and run its signature on every eval example: the largest difference from the Keras
    model's outputs (refused above the tolerance, naming it), and the task's metrics through the signature."""
    label = manifest.label
    trained, _ = score(tf, functools.partial(model, training=False), data_dir, manifest)
    served, labels = score(tf, serving_predict(tf, path, label.task), data_dir, manifest)
    difference = float(np.abs(trained - served).max())
    tolerance = SKEW_TOLERANCE * label.standardization[1]
    if not difference <= tolerance:  # NaN included
        fail(
            f"training/serving skew: the reloaded SavedModel's {OUTPUT[label.task]} differ from the "
            f"trained model's by up to {difference:.3g} on the eval split (allowed {tolerance:.3g}); nothing was "
            "published",
            EXIT_REFUSED,
        )
    return Served(
        ServingSkew(examples=len(labels), max_abs_difference=difference, tolerance=tolerance),
        metrics.of_task(label, spec.loss, spec.metrics, served, labels)[0],
    )


def copy_vocabularies(data_dir: str, manifest: Manifest, version_dir: str) -> None:
    """Each categorical feature's vocabulary (checked by ``data.verified_manifest``) into the version's
    ``vocabularies/``."""
    for f in manifest.with_vocabulary:
        if f.vocabulary:
            os.makedirs(registry.vocabulary_dir(version_dir), exist_ok=True)
            shutil.copyfile(
                os.path.join(data_dir, f.vocabulary.file),
                os.path.join(registry.vocabulary_dir(version_dir), f"{f.name}.json"),
            )


def version_refusal(model_dir: str, base: int, now: dt.datetime) -> str | None:
    """Why no version may be published from ``base`` (None: it may): a base, or a live version, numbered from a
    data interval ending after ``now`` (plus ``CLOCK_SKEW``) would be served ahead of every version after it."""
    ceiling = registry.version_number(now + registry.CLOCK_SKEW)
    if base > ceiling:
        return (
            f"--version-base {base} is numbered from a data interval ending in the future (now {now:%Y-%m-%d %H:%M} "
            "UTC): it would stay the served version ahead of every later one. A run's data_interval_end must not be "
            "after the run was created: run it for an interval that has ended"
        )
    live = registry.live(model_dir)
    if live is not None and live > ceiling:
        return (
            f"the live version {live} of {model_dir} is numbered from a data interval ending in the future (now "
            f"{now:%Y-%m-%d %H:%M} UTC): TF Serving serves it ahead of any version published now. Withdraw it "
            f"(tfdist models withdraw {model_dir} {live} --reason ...), then clear this task"
        )
    return None


def claim_version(model_dir: str, base: int, run_id: str, checkpoint: str) -> tuple[int, bool]:
    """(version, already published by this run from this checkpoint): the first version from ``base`` neither
    published, withdrawn nor claimed by another export or a prune. The claim (``registry.claim_path``) naming the
    run and checkpoint is created exclusively, so that exports running at once get distinct versions; a rerun of
    the run takes its own claim back (a claim whose export was killed for good leaves that version unused)."""
    owner = (run_id, checkpoint)
    for version in range(base, base + registry.MAX_VERSIONS_PER_INTERVAL):
        path, claim = storage.join(model_dir, str(version)), registry.claim_path(model_dir, version)
        if registry.is_withdrawn(model_dir, version):
            continue  # a withdrawn version's number is never published again (restore brings it back)
        if storage.exists(registry.metadata_file(path)):
            if _owner(registry.metadata_file(path), VersionMetadata) == owner:
                return version, True
            continue
        if not create_record(claim, Claim(run_id=run_id, source_checkpoint=checkpoint)):
            if _owner(claim, Claim) == owner:
                return version, False
            continue
        if storage.exists(registry.metadata_file(path)):  # published (and its claim removed) after the check above
            storage.remove(claim)
            continue
        return version, False
    fail(
        f"{model_dir} already holds {registry.MAX_VERSIONS_PER_INTERVAL} versions for this data interval", EXIT_REFUSED
    )


def _owner(path: str, model: type[Claim] | type[VersionMetadata]) -> tuple[str | None, str | None] | None:
    """The run and checkpoint a claim or a version's metadata names (None while it is being written)."""
    try:
        record = read_record(path, model)
    except (FileNotFoundError, RecordError):
        return None
    return record.run_id, record.source_checkpoint


def keep_checkpoint(checkpoint: str, prefix: str) -> None:
    """Copy a checkpoint's files (``<checkpoint>.index``, ``<checkpoint>.data-*``) to ``<prefix>.*``."""
    os.makedirs(os.path.dirname(prefix), exist_ok=True)
    for path in glob.glob(glob.escape(checkpoint) + ".*"):
        shutil.copyfile(path, prefix + path[len(checkpoint) :])


@dataclasses.dataclass(frozen=True)
class Origin:
    """What metadata.json says of the version's parent (None: a cold start, and why) and its training."""

    parent: ParentVersion | None
    warm_start: WarmStart
    train_metrics: Metrics | None


def lineage(args: ExportArgs) -> Origin:
    """The version's origin, from the train stage's warm start record and result."""
    record = read_record_if_exists(args.warm_start_record, WarmStartRecord)
    parent = record.parent if record else None
    return Origin(
        parent=ParentVersion(version=parent.version, run_id=parent.run_id) if parent else None,
        warm_start=WarmStart(
            source=record.source, restored=record.restored, cold_start=record.cold_start, mismatched=record.mismatched
        )
        if record
        else WarmStart(),
        train_metrics=read_record(args.train_result, TrainResult).metrics,
    )


def main() -> None:
    args = ExportArgs.parse()
    if refusal := version_refusal(args.model_dir, args.version_base, dt.datetime.now(dt.UTC)):
        fail(f"refusing to export: {refusal}; nothing was published", EXIT_REFUSED)
    spec, run = load_spec(args.spec), read_record(args.run, RunRecord)
    blessing = read_record(os.path.join(args.eval, BLESSING), Blessing)
    if not blessing.blessed or blessing.run_id != run.run_id:
        fail(
            f"refusing to export: this run's checkpoint was not blessed ({'; '.join(blessing.failures)})",
            EXIT_REFUSED,
        )
    if spec.export.approval and (refusal := approval.approval_refusal(args.approval, run.run_id)):
        fail(f"refusing to export: {refusal}", EXIT_REFUSED)
    version, done = claim_version(args.model_dir, args.version_base, run.run_id, blessing.checkpoint)
    out = storage.join(args.model_dir, str(version))
    origin = lineage(args)
    result = ExportResult(
        path=out,
        version=version,
        model_name=os.path.basename(args.model_dir),
        metrics=blessing.metrics,
        parent_version=origin.parent.version if origin.parent else None,
        cold_start=(origin.warm_start.cold_start or "")[:200] or None,
    )
    if done:
        say(f"{out} already holds this run's export; nothing to do")
    else:
        for stale in glob.glob(os.path.join(glob.escape(args.model_dir), f".tmp-{version}-*")):
            shutil.rmtree(stale, ignore_errors=True)  # left by a local export of this version that was killed
        publish(args, spec, run, blessing, out, version, origin)
    say(f"TF Serving's {registry.SERVING_CONFIG} serves version {registry.write_serving_config(args.model_dir)}")
    storage.remove(registry.claim_path(args.model_dir, version))
    write_record(args.result, result)
    keep = spec.export.keep_versions
    if keep:
        protected = {version} | ({blessing.baseline.version} if blessing.baseline else set())
        for deleted in registry.prune(args.model_dir, keep, protected):
            say(f"deleted version {deleted} (export.keep_versions = {keep})")


def publish(
    args: ExportArgs, spec: Spec, run: RunRecord, blessing: Blessing, out: str, version: int, origin: Origin
) -> None:
    manifest, data_dir = data.verified_manifest(args.data, "eval")
    tf = import_tensorflow()
    try:
        model, _ = restore_checked(tf, spec, manifest, data_dir, blessing.checkpoint)
    except IntegrityError as exc:
        fail(str(exc), EXIT_REFUSED)
    with storage.staged(out, last=(SAVED_MODEL, registry.METADATA)) as tmp:
        module = serving_module(tf, model, manifest)
        tf.saved_model.save(module, tmp, signatures={"serving_default": module.serve})
        served = serving_check(tf, spec, model, tmp, data_dir, manifest)
        copy_vocabularies(data_dir, manifest, tmp)
        write_record(os.path.join(tmp, registry.DATA_STATISTICS), manifest.statistics)
        keep_checkpoint(scratch.local_checkpoint(blessing.checkpoint), registry.warm_start_checkpoint(tmp))
        metadata = VersionMetadata(
            **published_run(args, spec, run, blessing, origin, version),
            **published_model(manifest, data_dir, served, tf.__version__),
        )
        write_record(registry.metadata_file(tmp), metadata)
    say(
        f"exported {out}: its serving signature matches the trained model on the {served.skew.examples} eval "
        f"examples within {served.skew.max_abs_difference:.2g}"
    )


def published_run(
    args: ExportArgs, spec: Spec, run: RunRecord, blessing: Blessing, origin: Origin, version: int
) -> dict[str, Any]:
    """The version's metadata of the run it was published from: which run, spec and checkpoint, and why."""
    return {
        "model_name": os.path.basename(args.model_dir),
        "version": version,
        "run_id": run.run_id,
        "data_interval_start": run.data_interval_start,
        "data_interval_end": run.data_interval_end,
        "spec_sha256": digest_json(spec.to_json_dict()),
        "metrics": blessing.metrics or {},
        "gate": blessing.gate,
        "blessing": PublishedBlessing.of(blessing),
        "approval": read_record_if_exists(args.approval, Approval) if args.approval else None,
        "source_checkpoint": blessing.checkpoint,
        "parent": origin.parent,
        "warm_start": origin.warm_start,
        "train_metrics": origin.train_metrics,
    }


def published_model(manifest: Manifest, data_dir: str, served: Served, tensorflow_version: str) -> dict[str, Any]:
    """The version's metadata of the model published: the data it was trained on, its serving signature and how
    that did on the eval examples."""
    return {
        "data_manifest_sha256": sha256_file(os.path.join(data_dir, MANIFEST)),
        "input_fingerprint": manifest.input_fingerprint,
        "serving_eval_metrics": served.metrics,
        "serving_skew": served.skew,
        "label": manifest.label,
        "signature": Signature(inputs=serving_inputs(manifest), outputs=serving_outputs(manifest.label)),
        "tensorflow_version": tensorflow_version,
    }


if __name__ == "__main__":
    run_stage(main)
