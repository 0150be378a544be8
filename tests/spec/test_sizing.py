"""The memory model of the tables (``tfdist.spec.sizing``): each table's bytes in training, how they are sharded
over the parameter servers and what one pod holds."""

from __future__ import annotations

from tests.spec.test_errors import problems
from tests.support.specs import make_spec
from tfdist.contract.data_records import CategoricalEntry, LabelEntry, Manifest
from tfdist.spec import CategoricalFeature, load_spec, sizing
from tfdist.trainer.models import table_bytes


def test_tables_split_over_parameter_servers_need_a_sparse_optimizer(tmp_path):
    users = {"name": "user", "kind": "categorical", "hash_buckets": 2_000_000, "embedding_dim": 32}
    data = {"features": [{"name": "pixel", "shape": [64]}, users]}
    ps = {"strategy": "parameter_server", "num_ps": 2}
    found = problems(make_spec(str(tmp_path), data=data, training=ps))
    assert found == [
        "model.embedding_optimizer: the tables of user (244 MiB) may be split over the parameter servers "
        "(training.parameter_server.shard_min_bytes 4,194,304); split tables train with a sparse optimizer: set "
        "model.embedding_optimizer to lazy_adam, adagrad or sgd, or raise shard_min_bytes"
    ]
    sparse = load_spec(make_spec(str(tmp_path), data=data, training=ps, model={"embedding_optimizer": "lazy_adam"}))
    assert sparse.training.parameter_server_settings.shards(2_000_000 * 32 * 4, 2) == 2
    unsplit = {**ps, "parameter_server": {"shard_min_bytes": 2**28}}
    load_spec(make_spec(str(tmp_path), data=data, training=unsplit))
    found = problems(make_spec(str(tmp_path), training={"parameter_server": {"max_shards": 4}}))
    assert found == ["training.parameter_server: table sharding needs strategy 'parameter_server'"]


CROSS = {"features": ["country", "device"], "hash_buckets": 50}
WIDE = {"family": "wide_deep", "hidden_units": [8], "crosses": [CROSS]}
TABLES = {
    "features": [
        {"name": "pixel", "shape": [64]},
        {"name": "country", "kind": "categorical", "vocabulary": {"max_tokens": 99, "oov_buckets": 1}},
        {"name": "device", "kind": "categorical", "hash_buckets": 8},
    ]
}


def test_each_table_is_its_rows_times_its_width_with_the_optimizers_two_slots():
    assert sizing.EMBEDDING_BYTES_PER_VALUE == 12 and sizing.training_bytes(100, 16) == 100 * 16 * 12
    assert sizing.embedding_bytes(8, 0) == sizing.training_bytes(8, 1)  # a one-hot: one column
    device, country = (CategoricalFeature.model_validate(f) for f in TABLES["features"][2:0:-1])
    assert sizing.embedding_dim(device, device.max_ids) == 0  # up to ONE_HOT_MAX_IDS ids
    assert sizing.embedding_dim(country, country.max_ids) == round(1.6 * 100**0.56)
    assert sizing.embedding_dim(country.model_copy(update={"embedding_dim": 5}), 100) == 5


def test_the_spec_bounds_each_table_by_its_most_ids_and_a_pod_holds_its_share(tmp_path):
    spec = load_spec(make_spec(str(tmp_path), data=TABLES, model=WIDE))
    width = round(1.6 * 100**0.56)
    assert sizing.max_table_bytes(spec) == {
        "country": 100 * width * 12,
        "country (wide)": 100 * 10 * 12,  # a weight per id and class
        "device": 8 * 1 * 12,
        "device (wide)": 8 * 10 * 12,
        "country × device": 50 * 10 * 12,
    }
    assert sizing.tables_per_pod(spec) == sum(sizing.max_table_bytes(spec).values())  # all-reduce: every table
    ps = {"strategy": "parameter_server", "num_ps": 3}
    on_ps = load_spec(make_spec(str(tmp_path), data=TABLES, model=WIDE, training=ps))
    largest = max(sizing.max_table_bytes(on_ps).values())  # under shard_min_bytes: placed whole
    assert sizing.tables_per_pod(on_ps) == largest > sum(sizing.max_table_bytes(on_ps).values()) // 3


def test_the_trainer_counts_the_prepared_ids_by_the_same_formulas(tmp_path):
    """At the spec's most ids, the trainer's count of a feature's tables is the spec's bound of them."""
    spec = load_spec(make_spec(str(tmp_path), data=TABLES, model=WIDE))
    features = [
        CategoricalEntry.model_construct(  # what table_bytes reads of a manifest's feature
            name=f.name, kind=f.kind, ids=f.max_ids, embedding_dim=sizing.embedding_dim(f, f.max_ids)
        )
        for f in spec.data.categorical_features
    ]
    label = LabelEntry.model_construct(task="multiclass", num_classes=10)
    counted = table_bytes(spec, Manifest.model_construct(label=label, features=features))
    bound = sizing.max_table_bytes(spec)
    assert counted == {
        "country": bound["country"] + bound["country (wide)"],
        "device": bound["device"] + bound["device (wide)"],
        "country × device": bound["country × device"],
    }
