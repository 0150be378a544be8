"""Stage export: the blessed checkpoint → ``<model dir>/<version>/`` (a SavedModel whose ``serving_default``
signature takes the raw features by name and returns ``probabilities``), plus ``metadata.json``.
Written to a temp directory, reloaded and checked, then renamed into place.

The version is the first free one from ``--version-base`` (derived from the run's data interval);
a rerun of the same run finds and reuses its own version instead of publishing another."""

from __future__ import annotations

import os

import numpy as np

from trainer import data
from trainer.artifacts import digest_json, publish_dir, read_json, sha256_file, write_json_atomic
from trainer.models import restore_model
from trainer.runtime import fail, import_tensorflow, load_spec, parse_args, say


def serving_module(tf, model, features: list[dict]):
    """A tf.Module whose signature has one input per raw feature, named as in the spec."""
    names = [f["name"] for f in features]
    module = tf.Module()
    module.model = model

    @tf.function(input_signature=[tf.TensorSpec([None, *f["shape"]], tf.float32, name=f["name"]) for f in features])
    def serve(*tensors):
        return {"probabilities": model(dict(zip(names, tensors)), training=False)}

    module.serve = serve
    return module


def serving_accuracy(tf, path: str, data_dir: str, manifest: dict) -> float:
    """Reload the SavedModel and run its signature on every eval example."""
    signature = tf.saved_model.load(path).signatures["serving_default"]
    correct = total = 0
    for features, labels in data.eval_dataset(tf, data_dir, manifest):
        probabilities = signature(**features)["probabilities"].numpy()
        if not np.allclose(probabilities.sum(axis=1), 1.0, atol=1e-3):
            raise ValueError("the serving signature does not return probabilities")
        correct += int((probabilities.argmax(axis=1) == labels.numpy()).sum())
        total += len(probabilities)
    return correct / total


MAX_VERSIONS_PER_INTERVAL = 100


def choose_version(model_dir: str, base: int, run_id: str, checkpoint: str) -> tuple[int, bool]:
    """(version, already exported by this run from this checkpoint)."""
    for version in range(base, base + MAX_VERSIONS_PER_INTERVAL):
        path = os.path.join(model_dir, str(version))
        if not os.path.exists(path):
            return version, False
        metadata_path = os.path.join(path, "metadata.json")
        existing = read_json(metadata_path) if os.path.exists(metadata_path) else {}
        if existing.get("run_id") == run_id and existing.get("source_checkpoint") == checkpoint:
            return version, True
    fail(f"{model_dir} already holds {MAX_VERSIONS_PER_INTERVAL} versions for this data interval")


def main() -> None:
    args = parse_args(__doc__, "data", "eval", "model-dir", "version-base", "run-id", "result")
    spec = load_spec(args.spec)
    blessing = read_json(os.path.join(args.eval, "blessing.json"))
    if not blessing["blessed"]:
        fail(f"refusing to export: the checkpoint was not blessed ({'; '.join(blessing['failures'])})")
    version, done = choose_version(args.model_dir, int(args.version_base), args.run_id, blessing["checkpoint"])
    out = os.path.join(args.model_dir, str(version))
    result = {"path": out, "version": version, "model_name": os.path.basename(args.model_dir),
              "metrics": blessing["metrics"]}
    if done:
        say(f"{out} already holds this run's export; nothing to do")
        write_json_atomic(args.result, result)
        return
    manifest_path = os.path.join(args.data, "manifest.json")
    manifest = read_json(manifest_path)
    tf = import_tensorflow()
    model = restore_model(tf, spec, manifest, blessing["checkpoint"])
    with publish_dir(out) as tmp:
        module = serving_module(tf, model, manifest["features"])
        tf.saved_model.save(module, tmp, signatures={"serving_default": module.serve})
        accuracy = serving_accuracy(tf, tmp, args.data, manifest)
        expected = blessing["metrics"].get("accuracy")
        if expected is not None and abs(accuracy - expected) > 1e-3:
            fail(f"the reloaded SavedModel scores {accuracy:.4f} on the eval split, evaluation said {expected:.4f}")
        write_json_atomic(os.path.join(tmp, "metadata.json"), {
            "model_name": result["model_name"],
            "version": version,
            "run_id": args.run_id,
            "spec_sha256": digest_json(spec),
            "data_manifest_sha256": sha256_file(manifest_path),
            "input_fingerprint": manifest["input_fingerprint"],
            "metrics": blessing["metrics"],
            "serving_eval_accuracy": accuracy,
            "source_checkpoint": blessing["checkpoint"],
            "signature": {"inputs": manifest["features"], "outputs": {"probabilities": [
                None, manifest["label"]["num_classes"]]}},
            "tensorflow_version": tf.__version__,
        })
    write_json_atomic(args.result, result)
    say(f"exported {out} (serving accuracy on the eval split {accuracy:.4f})")


if __name__ == "__main__":
    main()
