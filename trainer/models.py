"""The spec's model: a built-in family (mlp, wide_deep, cnn) or a user ``package.module:function``.

Every model takes the raw features by name (docs/tabular.md, "Formats") and returns the task's output: class
probabilities [batch, classes] (multiclass), the positive class's probability [batch, 1] (binary) or the prediction
[batch, 1] in the target's units (regression). The preprocessing (tfdist.trainer.preprocessing) is part of the
model, so the exported SavedModel serves raw rows. Every layer has a fixed name: two builds of a spec name every
variable alike."""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from tfdist.contract.data_records import LabelEntry, Manifest, NumericEntry
from tfdist.spec import CNNModel, CustomModel, MLPModel, Spec, WideDeepModel
from tfdist.spec.sizing import cross_bytes, embedding_bytes, training_bytes
from tfdist.trainer import scratch

OPTIMIZERS = {"adam": "Adam", "adamw": "AdamW", "sgd": "SGD", "rmsprop": "RMSprop"}
OUTPUT = {"multiclass": "probabilities", "binary": "probability", "regression": "prediction"}
"""The name of the model's output layer, by task."""


def output_width(label: LabelEntry) -> int:
    """The model's outputs per row: the classes (multiclass), else 1."""
    return label.num_classes or 1 if label.task == "multiclass" else 1


def build_model(spec: Spec, manifest: Manifest, data_dir: str):
    """The spec's model over the manifest's features, its vocabularies read from ``data_dir``."""
    import keras

    from tfdist.trainer import preprocessing as pre

    p = pre.preprocess(manifest, pre.vocabularies(data_dir, manifest))
    m, label = spec.model, manifest.label
    if isinstance(m, CustomModel):
        return keras.Model(p.inputs, _custom(m, p, label), name="custom")
    if isinstance(m, CNNModel):
        x = _cnn(keras, m, _concatenated(keras, {n: p.values[n] for n, i in p.info.items() if i["kind"] == "numeric"}))
    else:
        x = _dense_stack(keras, m, _concatenated(keras, _deep_inputs(p)))
    if not isinstance(m, WideDeepModel):
        return keras.Model(p.inputs, _head(keras, x, label), name=m.family)
    deep = keras.layers.Dense(output_width(label), name="deep_logits")(x)
    logits = keras.layers.Add(name="logits")([deep, *_wide(keras, m, p, output_width(label))])
    return keras.Model(p.inputs, _output(keras, logits, label), name=m.family)


def _concatenated(keras, values: dict[str, Any], name: str = "features") -> Any:
    """The values side by side, [batch, n] (a value of more dimensions flattened)."""
    flat = [keras.layers.Flatten(name=f"{k}_vector")(v) if len(v.shape) > 2 else v for k, v in values.items()]
    return flat[0] if len(flat) == 1 else keras.layers.Concatenate(name=name)(flat)


def _deep_inputs(p) -> dict[str, Any]:
    """What the dense layers take: numeric values (and missing indicators), each categorical feature's embedding
    (``<name>_embedding``) or, with embedding_dim 0, its one-hot."""
    from tfdist.trainer.embeddings import EmbeddingTable, OneHot

    out = {}
    for name, info in p.info.items():
        value = p.values[name]
        if info["kind"] in ("categorical", "categorical_list"):
            rows, dim, combiner = info["ids"], info["embedding_dim"], info["combiner"]
            table = EmbeddingTable(rows, dim, combiner, name=f"{name}_embedding") if dim else None
            value = table(value) if table else OneHot(rows, combiner, name=f"{name}_onehot")(value)
        out[name] = value
    return out


def _dense_stack(keras, m: MLPModel | WideDeepModel, x) -> Any:
    for i, units in enumerate(m.hidden_units):
        x = keras.layers.Dense(units, activation=m.activation, name=f"hidden_{i}")(x)
        x = keras.layers.Dropout(m.dropout, name=f"dropout_{i}")(x)
    return x


def _cnn(keras, m: CNNModel, x) -> Any:
    x = keras.layers.Reshape(tuple(m.image_shape), name="image")(x)
    for i, filters in enumerate(m.filters):
        x = keras.layers.Conv2D(filters, m.kernel_size, padding="same", activation="relu", name=f"conv_{i}")(x)
    x = keras.layers.Flatten(name="conv_flat")(x)
    x = keras.layers.Dense(m.dense_units, activation="relu", name="dense")(x)
    return keras.layers.Dropout(m.dropout, name="dropout")(x)


def _wide(keras, m: WideDeepModel, p, width: int) -> list:
    """The linear part's terms: a weight row per id of each categorical feature (``<name>_linear``), per bucket of
    each cross, and a linear layer over the numeric features."""
    from tfdist.trainer.embeddings import EmbeddingTable, HashedCross

    terms, numeric = [], {}
    for name, info in p.info.items():
        if info["kind"] in ("categorical", "categorical_list"):
            table = EmbeddingTable(info["ids"], width, info["combiner"], "zeros", name=f"{name}_linear")
            terms.append(table(p.values[name]))
        else:
            numeric[name] = p.values[name]
    for cross in m.crosses:
        layer = HashedCross(cross.hash_buckets, width, name=f"cross_{'_x_'.join(cross.features)}_linear")
        terms.append(layer([p.strings[name] for name in cross.features]))
    if numeric:
        terms.append(keras.layers.Dense(width, name="numeric_linear")(_concatenated(keras, numeric, "numeric")))
    return terms


def _head(keras, x, label: LabelEntry) -> Any:
    """The task's output layer on the last hidden layer."""
    task = label.task
    if task == "regression":
        return _output(keras, keras.layers.Dense(1, name="standardized")(x), label)
    activation = "softmax" if task == "multiclass" else "sigmoid"
    return keras.layers.Dense(output_width(label), activation=activation, name=OUTPUT[task])(x)


def _output(keras, logits, label: LabelEntry) -> Any:
    """The task's output of logits (regression: a standardized prediction)."""
    from tfdist.trainer.preprocessing import Destandardize

    task = label.task
    if task == "regression":
        return Destandardize(*label.standardization, name=OUTPUT[task])(logits)
    return keras.layers.Activation("softmax" if task == "multiclass" else "sigmoid", name=OUTPUT[task])(logits)


def _custom(m: CustomModel, p, label: LabelEntry) -> Any:
    """The factory's model on the preprocessed inputs; a regression's standardized prediction de-standardized."""
    from tfdist.trainer.preprocessing import Destandardize

    module, _, function = m.factory.partition(":")
    factory = getattr(importlib.import_module(module), function)
    parameters = inspect.signature(factory).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    offered = {"task": label.task, "feature_info": p.info}
    extra = {k: v for k, v in offered.items() if k in parameters or takes_any}
    width = output_width(label)
    shapes = {name: info["shape"] for name, info in p.info.items()}
    output = factory(features=shapes, num_classes=width, **m.kwargs, **extra)(p.values)
    if tuple(output.shape[1:]) != (width,):
        raise ValueError(
            f"model.factory {m.factory}: returns outputs of shape {list(output.shape)}; task '{label.task}' "
            f"needs [batch, {width}]"
        )
    if label.task == "regression":
        return Destandardize(*label.standardization, name=OUTPUT["regression"])(output)
    return output


def table_bytes(spec: Spec, manifest: Manifest) -> dict[str, int]:
    """The bytes each table of weights by id takes in training (with the optimizer's slots), by what it serves: a
    categorical feature (its embedding, and wide_deep's weight per id) or a cross ('a × b')."""
    width = output_width(manifest.label)
    wide = isinstance(spec.model, WideDeepModel)
    found = {
        f.name: embedding_bytes(f.ids, f.embedding_dim) + (training_bytes(f.ids, width) if wide else 0)
        for f in manifest.features
        if not isinstance(f, NumericEntry)
    }
    return found | cross_bytes(spec.model, width)


def build_optimizer(spec: Spec, scale: float = 1):
    """The spec's optimizer, its learning rate multiplied by ``scale``."""
    import keras

    m = spec.model
    return getattr(keras.optimizers, OPTIMIZERS[m.optimizer])(learning_rate=m.learning_rate * scale)


def build_embedding_optimizer(spec: Spec, scale: float = 1):
    """The spec's sparse optimizer of the tables (``model.embedding_optimizer``), its learning rate the model's
    multiplied by ``scale``; None without one."""
    from tfdist.trainer.embeddings import SPARSE_OPTIMIZERS

    m = spec.model
    return m.embedding_optimizer and SPARSE_OPTIMIZERS[m.embedding_optimizer](m.learning_rate * scale)


def restore_model(tf, spec: Spec, manifest: Manifest, data_dir: str, checkpoint_path: str):
    """(the spec's model with the checkpoint's weights, the checkpoint's training step); fails if the
    checkpoint lacks any of the model's weights."""
    model = build_model(spec, manifest, data_dir)
    step = tf.Variable(0, dtype=tf.int64, trainable=False)
    status = tf.train.Checkpoint(model=model, step=step).read(checkpoint_path)
    status.assert_existing_objects_matched()
    status.expect_partial()  # the optimizer's slots are not needed
    return model, int(step.numpy())


class IntegrityError(Exception):
    def __init__(self, check: str, checkpoint: str, detail: str):
        self.check = check
        super().__init__(f"integrity check '{check}' failed for {checkpoint}: {detail}")


def restore_checked(tf, spec: Spec, manifest: Manifest, data_dir: str, path: str):
    """``restore_model`` from the checkpoint ``path`` (in an object store: its local copy), or
    IntegrityError('restores')."""
    try:
        return restore_model(tf, spec, manifest, data_dir, scratch.local_checkpoint(path))
    except Exception as exc:
        raise IntegrityError(
            "restores", path, f"does not restore into the spec's model: {type(exc).__name__}: {exc}"
        ) from None
