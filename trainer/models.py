"""The spec's model: a built-in family (mlp, cnn) or a user ``package.module:function``.

Every model takes a dict of raw features and returns class probabilities; the feature
normalization computed from the training shards is part of the model, so the exported
SavedModel serves raw features."""

from __future__ import annotations

import importlib
import math
from typing import Any

import numpy as np

from tfdist.spec import CustomModel, MLPModel, Spec

OPTIMIZERS = {"adam": "Adam", "adamw": "AdamW", "sgd": "SGD", "rmsprop": "RMSprop"}


def _inputs_and_normalized(keras, manifest: dict[str, Any]):
    inputs, normalized = {}, {}
    for f in manifest["features"]:
        name, shape = f["name"], f["shape"]
        stats = manifest["stats"][name]
        inputs[name] = keras.Input(shape=tuple(shape), name=name)
        flat = keras.layers.Reshape((math.prod(shape),), name=f"{name}_flat")(inputs[name])
        norm = keras.layers.Normalization(
            mean=np.array(stats["mean"]), variance=np.array(stats["variance"]), name=f"{name}_norm"
        )(flat)
        normalized[name] = keras.layers.Reshape(tuple(shape) or (1,), name=f"{name}_normalized")(norm)
    return inputs, normalized


def _concat(keras, normalized: dict) -> Any:
    flat = [keras.layers.Flatten()(v) if len(v.shape) > 2 else v for v in normalized.values()]
    return flat[0] if len(flat) == 1 else keras.layers.Concatenate()(flat)


def build_model(spec: Spec, manifest: dict[str, Any]):
    import keras

    m = spec.model
    num_classes = manifest["label"]["num_classes"]
    inputs, normalized = _inputs_and_normalized(keras, manifest)
    if isinstance(m, CustomModel):
        module, _, function = m.factory.partition(":")
        factory = getattr(importlib.import_module(module), function)
        shapes = {f["name"]: tuple(f["shape"]) for f in manifest["features"]}
        user_model = factory(features=shapes, num_classes=num_classes, **m.kwargs)
        return keras.Model(inputs, user_model(normalized), name="custom")
    x = _concat(keras, normalized)
    if isinstance(m, MLPModel):
        for units in m.hidden_units:
            x = keras.layers.Dense(units, activation=m.activation)(x)
            x = keras.layers.Dropout(m.dropout)(x)
    else:  # cnn
        x = keras.layers.Reshape(tuple(m.image_shape))(x)
        for filters in m.filters:
            x = keras.layers.Conv2D(filters, m.kernel_size, padding="same", activation="relu")(x)
        x = keras.layers.Flatten()(x)
        x = keras.layers.Dense(m.dense_units, activation="relu")(x)
        x = keras.layers.Dropout(m.dropout)(x)
    outputs = keras.layers.Dense(num_classes, activation="softmax", name="probabilities")(x)
    return keras.Model(inputs, outputs, name=m.family)


def build_optimizer(spec: Spec, scale: float = 1):
    """The spec's optimizer, its learning rate multiplied by ``scale``."""
    import keras

    m = spec.model
    return getattr(keras.optimizers, OPTIMIZERS[m.optimizer])(learning_rate=m.learning_rate * scale)


def restore_model(tf, spec: Spec, manifest: dict[str, Any], checkpoint_path: str):
    """(the spec's model with the checkpoint's weights, the checkpoint's training step); fails if the
    checkpoint lacks any of the model's weights."""
    model = build_model(spec, manifest)
    step = tf.Variable(0, dtype=tf.int64, trainable=False)
    status = tf.train.Checkpoint(model=model, step=step).read(checkpoint_path)
    status.assert_existing_objects_matched()
    status.expect_partial()  # the optimizer's slots are not needed
    return model, int(step.numpy())


class IntegrityError(Exception):
    def __init__(self, check: str, checkpoint: str, detail: str):
        self.check = check
        super().__init__(f"integrity check '{check}' failed for {checkpoint}: {detail}")


def restore_checked(tf, spec: Spec, manifest: dict[str, Any], path: str):
    """``restore_model``, or IntegrityError('restores')."""
    try:
        return restore_model(tf, spec, manifest, path)
    except Exception as exc:
        raise IntegrityError(
            "restores", path, f"does not restore into the spec's model: {type(exc).__name__}: {exc}"
        ) from None
