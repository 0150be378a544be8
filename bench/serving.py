"""Serving latency (``make bench``, issue 36): one raw row and a 256-row batch through the exported signature,
against the same model without its preprocessing layers.

The model is the spec's (an untrained ``mlp`` over a synthetic table of numbers, strings, IDs and lists: its cost
does not depend on its weights), built from data prepare_data prepared. "Ours" is the SavedModel export publishes:
its signature takes the raw features, and the lookups, hashing, imputation and normalization run inside it. "Bare"
is the same model cut after its ``<name>_ids`` and ``<name>_norm`` layers (tfdist.trainer.preprocessing), saved with
a signature that takes their outputs (ids, normalized values), as a model fed by a preprocessing service would be.
Both are loaded in a fresh process, as a model server loads them; each figure is the median of many calls, the
two models called in alternating blocks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np

from tests.support.plans import plan_for, run
from tests.support.specs import DAY

BATCHES = (1, 256)
BLOCK = 10
"""Calls of one model in a row before the other's."""
ROWS = 20_000
FEATURES = [
    *({"name": f"x{i}"} for i in range(6)),
    {"name": "country", "kind": "categorical"},
    {"name": "device", "kind": "categorical", "vocabulary": {"oov_buckets": 2}},
    {"name": "product", "kind": "categorical", "vocabulary": {"max_tokens": 5000, "min_count": 2}},
    {"name": "user_id", "kind": "categorical", "dtype": "int64", "hash_buckets": 100_000},
    {"name": "recent", "kind": "categorical_list", "max_values": 8, "vocabulary": {"max_tokens": 2000}},
]
SECTIONS = {
    "data": {
        "source": "{artifact_root}/raw/serving/{date}/*.csv",
        "features": FEATURES,
        "label": {"name": "clicked", "task": "binary"},
        "num_shards": 1,
    },
    "model": {"family": "mlp", "hidden_units": [128, 64]},
    "training": {"num_workers": 1},
    "validation": {"thresholds": {"auc": {"lower": 0.5}}},
    "export": {"model_name": "serving_bench"},
}


def write_table(root: str) -> None:
    """ROWS rows of the features above, skewed as real ones are (Zipf), some numbers missing, and a label."""
    import pandas as pd

    rng = np.random.default_rng(0)
    table = pd.DataFrame({f"x{i}": rng.normal(size=ROWS) for i in range(6)})
    table.loc[rng.random(ROWS) < 0.1, "x0"] = np.nan
    zipf = lambda n, size: np.minimum(rng.zipf(1.3, size), n)  # noqa: E731
    table["country"] = [f"c{v}" for v in zipf(200, ROWS)]
    table["device"] = rng.choice(["ios", "android", "web", "tv", ""], ROWS)
    table["product"] = [f"p{v}" for v in zipf(20_000, ROWS)]
    table["user_id"] = rng.integers(0, 10**9, ROWS)
    table["recent"] = ["|".join(f"p{v}" for v in zipf(20_000, rng.integers(0, 9))) for _ in range(ROWS)]
    table["clicked"] = rng.integers(0, 2, ROWS)
    path = os.path.join(root, "raw", "serving", DAY.isoformat(), "table.csv")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    table.to_csv(path, index=False)


def measure(work: str, calls: int) -> dict:
    """{batch size: {"ours": [ms per call, ...], "bare": [...]}} (medians of the blocks), and the inputs' shape."""
    os.makedirs(work, exist_ok=True)
    write_table(work)
    plan = plan_for(work, "serving", DAY, **SECTIONS)
    run(plan, "prepare_data")
    argv = [sys.executable, "-m", "bench.serving", plan.layout.spec_file, plan.layout.data_dir, work, str(calls)]
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def cut_at_preprocessing(keras, model, manifest):
    """(the model's preprocessing: raw inputs → ids and normalized values, the rest: those → its output)."""
    cut = [model.get_layer(f"{f.name}_{'norm' if f.kind == 'numeric' else 'ids'}").output for f in manifest.features]
    return keras.Model(model.inputs, cut), keras.Model(cut, model.outputs)


def bare_module(tf, rest, example: list):
    """A tf.Module serving ``rest`` with one named input per preprocessed tensor (shaped like ``example``'s)."""
    module = tf.Module()
    module.model = rest
    specs = [tf.TensorSpec([None, *t.shape[1:]], t.dtype, name=f"in{i}") for i, t in enumerate(example)]

    @tf.function(input_signature=specs)
    def serve(*tensors):
        return {"output": rest(list(tensors), training=False)}

    module.serve = serve
    return module


def timed(signature, inputs: dict, calls: int) -> list[float]:
    """Milliseconds of each of ``calls`` calls."""
    spent = []
    for _ in range(calls):
        started = time.perf_counter()
        signature(**inputs)
        spent.append(1000 * (time.perf_counter() - started))
    return spent


def main() -> None:
    import keras

    from tfdist.contract.data_records import Manifest
    from tfdist.contract.layout import MANIFEST
    from tfdist.contract.records import read_record
    from tfdist.trainer import data
    from tfdist.trainer.evaluate import signature_inputs
    from tfdist.trainer.export import serving_module
    from tfdist.trainer.models import build_model
    from tfdist.trainer.runtime import import_tensorflow, load_spec

    spec_file, data_dir, work, calls = sys.argv[1:]
    tf = import_tensorflow()
    manifest = read_record(os.path.join(data_dir, MANIFEST), Manifest)
    model = build_model(load_spec(spec_file), manifest, data_dir)
    sample, _ = next(iter(data.eval_dataset(tf, data_dir, manifest, batch_size=max(BATCHES))))
    preprocess, rest = cut_at_preprocessing(keras, model, manifest)
    preprocessed = [tf.convert_to_tensor(t) for t in preprocess(sample)]
    ours, bare = serving_module(tf, model, manifest), bare_module(tf, rest, preprocessed)
    for name, module in (("ours", ours), ("bare", bare)):
        tf.saved_model.save(module, os.path.join(work, name), signatures={"serving_default": module.serve})
    loaded = {
        name: tf.saved_model.load(os.path.join(work, name)).signatures["serving_default"] for name in ("ours", "bare")
    }
    results: dict = {}
    for size in BATCHES:
        inputs = {
            "ours": signature_inputs(tf, loaded["ours"], {k: v[:size] for k, v in sample.items()}),
            "bare": {f"in{i}": t[:size] for i, t in enumerate(preprocessed)},
        }
        same = loaded["ours"](**inputs["ours"])["probability"], loaded["bare"](**inputs["bare"])["output"]
        np.testing.assert_allclose(same[0], np.reshape(same[1], [-1]), atol=1e-5)  # the same model
        spent: dict[str, list[float]] = {"ours": [], "bare": []}
        for name in spent:
            timed(loaded[name], inputs[name], BLOCK)  # warm-up
        for block in range(max(1, int(calls) // BLOCK)):
            for name in ("ours", "bare") if block % 2 == 0 else ("bare", "ours"):
                spent[name].append(float(np.median(timed(loaded[name], inputs[name], BLOCK))))
        results[str(size)] = spent
    print(json.dumps(results))


def rows(results: dict, ratio_row) -> list[dict]:
    return [
        ratio_row(
            f"serving latency, {'one raw row' if size == '1' else f'a {size}-row batch'}: ours / the model without its "
            "preprocessing layers",
            spent["ours"],
            spent["bare"],
            "≤ 1.3",
            lambda m: m <= 1.3,
        )
        for size, spent in results.items()
    ]


def absolutes(results: dict) -> list[tuple[str, str]]:
    return [
        (
            f"serving latency, batch {size}: ours / bare (median of blocks of {BLOCK} calls)",
            f"{np.median(spent['ours']):.2f} ms / {np.median(spent['bare']):.2f} ms",
        )
        for size, spent in results.items()
    ]


if __name__ == "__main__":
    main()
