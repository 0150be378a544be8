"""The tax of categorical features (``make bench``, issue 36): examples/s of the train stage on a binary task with
numeric, vocabulary, hashed and list features (one MultiWorkerMirrored worker, through the local launcher) against a
hand-written Keras loop over the same shards in the same mode: the vocabularies precomputed (prepare_data's files),
the same embeddings and dense layer, the same global batch and steps per tf.function call, the same TF_CONFIG.

    python -m bench.categorical --spec S --data D --steps N --steps-per-call K     the hand-written loop

It prints ``examples/s <rate>`` counted after the first call. The data: tests/trainer/prepared_tables.py's rows (a
planted signal), prepared by prepare_data."""

from __future__ import annotations

import logging
import math
import os
import sys

from bench.handwritten import examples_per_sec, input_fn, loop_parser, tabular_parse
from tests.support.logs import collecting_logger
from tests.support.plans import plan_for, run
from tests.support.specs import DAY
from tests.trainer import prepared_tables as tabular
from tfdist.contract.layout import MANIFEST
from tfdist.infra.jsonfiles import read_json
from tfdist.operators.launchers.local import LocalLauncher
from tfdist.operators.launchers.processes import Process, local_processes
from tfdist.trainer.train import STEPS_PER_CALL

ROWS = 20_000
FEATURES = [tabular.FEATURES[i] for i in (0, 1, 2, 3, 5)]  # numeric (one with missing values), vocabulary, hashed, list
MODEL = {"family": "mlp", "hidden_units": [64], "learning_rate": 0.003, "dropout": 0.1}


def sections(epochs: int) -> dict:
    return {
        "data": tabular.data_section("binary", FEATURES),
        "model": MODEL,
        "training": {"num_workers": 1, "epochs": epochs, "checkpoint_every_steps": 10**6},
        "validation": tabular.VALIDATION["binary"],
    }


def measure(work: str, budget) -> dict:
    """Per repetition (alternating order): the train stage's examples/s and the hand-written loop's."""
    logging.getLogger("tfdist.test").propagate = False
    prepared = plan_for(work, "categorical-data", DAY, **sections(budget.epochs))
    tabular.prepare(prepared, ROWS)
    steps = budget.epochs * (read_json(os.path.join(prepared.layout.data_dir, MANIFEST))["train"]["examples"] // 64)
    samples: dict[str, list[float]] = {"ours": [], "handwritten": []}
    for r in range(budget.repetitions):
        cases = [
            ("ours", lambda r=r: ours(work, prepared, r, budget.epochs)),
            ("handwritten", lambda: handwritten(prepared, steps)),
        ]
        for name, measured in cases if r % 2 == 0 else cases[::-1]:
            samples[name].append(measured())
            print(f"  categorical {name}: {samples[name][-1]:,.0f} examples/s", flush=True)
    return {**samples, "steps": steps}


def ours(work: str, prepared, repetition: int, epochs: int) -> float:
    plan = plan_for(work, f"categorical-{repetition}", DAY, **sections(epochs))
    os.symlink(prepared.layout.data_dir, plan.layout.data_dir)
    run(plan, "train")
    return read_json(plan.layout.result("train"))["examples_per_sec"]


def handwritten(prepared, steps: int) -> float:
    command = (
        sys.executable,
        "-m",
        "bench.categorical",
        *("--spec", prepared.layout.spec_file, "--data", prepared.layout.data_dir),
        *("--steps", str(steps), "--steps-per-call", str(STEPS_PER_CALL)),
    )
    logger, lines = collecting_logger("categorical-handwritten")
    stage = prepared.stage("train")
    (worker,) = local_processes(stage, command=list(command))
    process = Process(worker.name, worker.role, command, {"TF_CONFIG": worker.env["TF_CONFIG"]})
    LocalLauncher(prepared).run_processes(stage, [process], logger)
    return next(float(line.rsplit(" ", 1)[1]) for line in lines.lines if line.split("] ")[-1].startswith("examples/s"))


def rows(results: dict, ratio_row) -> list[dict]:
    return [
        ratio_row(
            "categorical features: train stage / hand-written Keras loop with precomputed vocabularies (1 worker)",
            results["ours"],
            results["handwritten"],
            "≥ 0.9",
            lambda m: m >= 0.9,
        )
    ]


def absolutes(results: dict) -> list[tuple[str, str]]:
    from statistics import median

    return [
        (
            f"categorical features, {results['steps']} steps: train stage / hand-written",
            f"{median(results['ours']):,.0f} / {median(results['handwritten']):,.0f} examples/s",
        )
    ]


def keras_model(keras, tf, manifest: dict, vocabularies: dict[str, list[str]]):
    """What one writes by hand from the Keras guides: lookups with the precomputed vocabularies, Embedding layers of
    the manifest's widths, a list's embeddings masked and averaged, numerics normalized with NaN as the mean."""
    inputs, parts = {}, []
    for f in manifest["features"]:
        name = f["name"]
        if f["kind"] == "numeric":
            stats = manifest["stats"][name]
            x = inputs[name] = keras.Input(shape=(math.prod(f["shape"]),), name=name)
            parts.append(keras.layers.Normalization(mean=stats["mean"], variance=stats["variance"])(x))
            if f["missing_indicator"]:
                parts.append(keras.layers.Lambda(lambda v: tf.cast(tf.math.is_nan(v), tf.float32))(x))
            continue
        is_list = f["kind"] == "categorical_list"
        x = inputs[name] = keras.Input(shape=(None,) if is_list else (1,), dtype="string", name=name)
        if f["vocabulary"]:
            lookup = keras.layers.StringLookup(
                vocabulary=vocabularies[name], num_oov_indices=f["oov_buckets"], mask_token="" if is_list else None
            )
        else:
            lookup = keras.layers.Hashing(f["hash_buckets"])
        embedded = keras.layers.Embedding(f["ids"] + is_list, f["embedding_dim"], mask_zero=is_list)(lookup(x))
        parts.append(keras.layers.GlobalAveragePooling1D()(embedded) if is_list else keras.layers.Flatten()(embedded))
    x = keras.layers.Concatenate()(parts)
    x = keras.layers.Lambda(lambda v: tf.where(tf.math.is_nan(v), tf.zeros_like(v), v))(x)
    for units in MODEL["hidden_units"]:
        x = keras.layers.Dropout(MODEL["dropout"])(keras.layers.Dense(units, activation="relu")(x))
    return keras.Model(inputs, keras.layers.Dense(1, activation="sigmoid")(x))


def main() -> None:
    args = loop_parser(__doc__).parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import tensorflow as tf

    manifest = read_json(os.path.join(args.data, MANIFEST))
    vocabularies = {
        f["name"]: read_json(os.path.join(args.data, f["vocabulary"]["file"]))
        for f in manifest["features"]
        if f.get("vocabulary")
    }
    global_batch = 64
    parse = tabular_parse(tf, manifest)
    files = [os.path.join(args.data, s["file"]) for s in manifest["train"]["shards"]]

    dataset = input_fn(tf, files, parse, global_batch)

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = keras_model(keras, tf, manifest, vocabularies)
        optimizer = keras.optimizers.Adam(MODEL["learning_rate"])
        optimizer.build(model.trainable_variables)
    loss_fn = keras.losses.BinaryCrossentropy(reduction=None)
    iterator = iter(strategy.distribute_datasets_from_function(dataset))

    def step(features, labels):
        with tf.GradientTape() as tape:
            per_example = loss_fn(labels, model(features, training=True))
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
        return loss

    @tf.function
    def train_steps():
        loss = tf.constant(0.0)
        for _ in tf.range(args.steps_per_call):
            loss = strategy.reduce("SUM", strategy.run(step, args=next(iterator)), axis=None)
        return loss

    print(f"examples/s {examples_per_sec(train_steps, args, global_batch, wait=float):.1f}", flush=True)


if __name__ == "__main__":
    main()
