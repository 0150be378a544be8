"""The model's preprocessing, built from the data manifest and its vocabularies (docs/tabular.md, "Formats"): raw
features in, what a model family takes out: numeric features normalized with their missing values imputed,
categorical values as ids. Part of the model, so the exported SavedModel serves raw rows.

Imports TensorFlow and Keras: import this module only once TensorFlow may start (``runtime.import_tensorflow``)."""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tfdist.contract.data_records import (
    CategoricalEntry,
    CategoricalListEntry,
    Manifest,
    Normalization,
    NumericEntry,
    VocabularyFile,
)

OOV_TOKEN = "\x00tfdist-oov"
"""StringLookup's name for its out-of-vocabulary ids: Keras's default '[UNK]' could be a value of the data, and a
vocabulary starting with it would shift every id."""


def read_vocabulary(data_dir: str, entry: VocabularyFile) -> list[str]:
    """A categorical feature's tokens (its manifest entry's ``vocabulary.file``), once its sha256 is the manifest's."""
    with open(os.path.join(data_dir, entry.file), "rb") as f:
        content = f.read()
    if hashlib.sha256(content).hexdigest() != entry.sha256:
        raise ValueError(f"{entry.file}: its content is not what prepare_data wrote (sha256 differs)")
    return json.loads(content)


def vocabularies(data_dir: str, manifest: Manifest) -> dict[str, list[str]]:
    """The tokens of every categorical feature with a vocabulary, by feature name."""
    return {f.name: read_vocabulary(data_dir, f.vocabulary) for f in manifest.with_vocabulary if f.vocabulary}


class Impute(keras.layers.Normalization):
    """Normalization by the train rows' mean and variance; a missing value (NaN) becomes 0, the mean normalized."""

    def call(self, inputs):
        normalized = super().call(inputs)
        return tf.where(tf.math.is_nan(normalized), tf.zeros_like(normalized), normalized)


class MissingIndicator(keras.layers.Layer):
    """Per element: 1.0 where the value is missing (NaN), else 0.0."""

    def call(self, inputs):
        return tf.cast(tf.math.is_nan(inputs), tf.float32)


class Ids(keras.layers.Layer):
    """A lookup's ids as int32; in a list, -1 where the (padded) value is ``""``."""

    def call(self, ids, values=None):
        ids = tf.cast(ids, tf.int32)
        return ids if values is None else tf.where(values == "", -1, ids)


class Destandardize(keras.layers.Layer):
    """A standardized prediction in the target's units: × std + mean."""

    def __init__(self, mean: float, std: float, **kwargs):
        super().__init__(**kwargs)
        self.mean, self.std = float(mean), float(std)

    def call(self, inputs):
        return inputs * self.std + self.mean


@dataclass
class Preprocessed:
    """The raw inputs (Keras inputs by feature name) and what preprocessing makes of them."""

    inputs: dict[str, Any] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)
    """By name: a numeric feature normalized ([batch, *shape]) and its missing indicator ('<name>_missing'); a
    categorical feature's ids (int32 [batch]; a list's [batch, length], -1 past its values)."""
    strings: dict[str, Any] = field(default_factory=dict)
    """Each categorical feature's values as strings (what crosses hash)."""
    info: dict[str, dict[str, Any]] = field(default_factory=dict)
    """What each of ``values`` is: kind, dtype, shape; a categorical feature's ids, embedding_dim, vocabulary_size,
    hash_buckets and combiner."""


def preprocess(manifest: Manifest, vocabulary: dict[str, list[str]]) -> Preprocessed:
    """The preprocessing of every feature of the manifest, in its order (the model's inputs)."""
    out = Preprocessed()
    for feature in manifest.features:
        if isinstance(feature, NumericEntry):
            _numeric(out, feature, manifest.stats[feature.name])
        else:
            _categorical(out, feature, vocabulary.get(feature.name))
    return out


def _numeric(out: Preprocessed, feature: NumericEntry, stats: Normalization) -> None:
    name, shape = feature.name, tuple(feature.shape)
    raw = out.inputs[name] = keras.Input(shape=shape, name=name)
    flat = keras.layers.Reshape((math.prod(shape),), name=f"{name}_flat")(raw)
    norm = Impute(mean=np.array(stats.mean), variance=np.array(stats.variance), name=f"{name}_norm")(flat)
    out.values[name] = keras.layers.Reshape(shape or (1,), name=f"{name}_normalized")(norm)
    out.info[name] = {"kind": "numeric", "dtype": "float32", "shape": shape or (1,)}
    if feature.missing_indicator:
        out.values[f"{name}_missing"] = MissingIndicator(name=f"{name}_missing")(flat)
        out.info[f"{name}_missing"] = {
            "kind": "missing_indicator",
            "dtype": "float32",
            "shape": (math.prod(shape),),
            "of": name,
        }


def _int64_place(raw, name: str):
    """The raw strings, through a layer that does nothing and takes the place (``<name>_string``) of the one that
    turned an int64 categorical feature's ids back into strings, while the model took int64 ids: a checkpoint names
    the model's layers by position (``model/_operations/<i>``, in the order of the graph's depth), so without it
    the later layers would move and a checkpoint written before (a warm start's parent, a published version) would
    restore into other layers, or not at all."""
    return keras.layers.Identity(name=f"{name}_string")(raw)


def _categorical(out: Preprocessed, feature: CategoricalEntry | CategoricalListEntry, tokens: list[str] | None) -> None:
    name, is_list = feature.name, isinstance(feature, CategoricalListEntry)
    shape = (None,) if is_list else ()
    raw = out.inputs[name] = keras.Input(shape=shape, dtype="string", name=name)
    strings = out.strings[name] = _int64_place(raw, name) if feature.dtype == "int64" and not is_list else raw
    if tokens is None:
        lookup = keras.layers.Hashing(num_bins=feature.hash_buckets, name=f"{name}_lookup")
    else:
        lookup = keras.layers.StringLookup(
            vocabulary=tokens,
            num_oov_indices=feature.oov_buckets,
            mask_token=None,
            oov_token=OOV_TOKEN,
            name=f"{name}_lookup",
        )
    ids = Ids(name=f"{name}_ids")(lookup(strings), strings if is_list else None)
    out.values[name] = ids
    out.info[name] = {
        "kind": feature.kind,
        "dtype": "int32",
        "shape": shape,
        "ids": feature.ids,
        "embedding_dim": feature.embedding_dim,
        "vocabulary_size": None if tokens is None else len(tokens),
        "hash_buckets": feature.hash_buckets,
        "combiner": feature.combiner if isinstance(feature, CategoricalListEntry) else None,
    }
