"""trainer/preprocessing.py: a vocabulary file read only as prepare_data wrote it, and the preprocessing layers on a
few values (the whole model built on a manifest: test_models.py)."""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pytest

from tests.trainer.test_data import RELEASED_MANIFEST
from tfdist.contract.data_records import Manifest, VocabularyFile
from tfdist.contract.records import read_record


def test_a_vocabulary_is_read_when_its_digest_is_the_manifests_and_refused_otherwise(tf, tmp_path):
    from tfdist.trainer.preprocessing import read_vocabulary

    content = json.dumps(["uk", "jp", ""]).encode()
    (tmp_path / "city.json").write_bytes(content)
    entry = VocabularyFile(file="city.json", size=3, sha256=hashlib.sha256(content).hexdigest())
    assert read_vocabulary(str(tmp_path), entry) == ["uk", "jp", ""]
    (tmp_path / "city.json").write_bytes(content.replace(b"jp", b"fr"))
    with pytest.raises(ValueError, match=r"city\.json: its content is not what prepare_data wrote \(sha256 differs\)"):
        read_vocabulary(str(tmp_path), entry)


def test_the_layers_impute_flag_missing_values_mark_padding_and_destandardize(tf):
    from tfdist.trainer import preprocessing

    impute = preprocessing.Impute(mean=[2.0], variance=[4.0])
    np.testing.assert_allclose(impute(tf.constant([[4.0], [np.nan], [0.0]])).numpy(), [[1.0], [0.0], [-1.0]])
    indicator = preprocessing.MissingIndicator()(tf.constant([[1.0, np.nan]]))
    np.testing.assert_array_equal(indicator.numpy(), [[0.0, 1.0]])
    ids = preprocessing.Ids()(tf.constant([[2, 0]], tf.int64), tf.constant([["a", ""]]))
    assert ids.dtype == tf.int32 and ids.numpy().tolist() == [[2, -1]]
    assert preprocessing.Ids()(tf.constant([5], tf.int64)).numpy().tolist() == [5]
    scaled = preprocessing.Destandardize(mean=10.0, std=2.0)(tf.constant([[0.5], [-1.0]]))
    np.testing.assert_allclose(scaled.numpy(), [[11.0], [8.0]])


def test_an_int64_feature_is_taken_as_the_strings_the_shards_hold_and_looked_up_as_its_tokens(tf):
    import keras

    from tfdist.trainer.preprocessing import preprocess, vocabularies

    manifest = read_record(RELEASED_MANIFEST, Manifest)
    tokens = vocabularies(os.path.dirname(RELEASED_MANIFEST), manifest)
    p = preprocess(manifest, tokens)
    assert p.inputs["store"].dtype == "string" and p.strings["store"].dtype == "string"
    ids = keras.Model(p.inputs["store"], p.values["store"])(tf.constant([tokens["store"][0], "", "999999"]))
    assert ids.numpy().tolist() == [1, 1 + tokens["store"].index(""), 0]  # its one out-of-vocabulary bucket first
