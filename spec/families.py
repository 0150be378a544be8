"""The model section: a family (mlp, wide_deep, cnn, custom) with its own fields, and the optimizer."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from tfdist.spec.data import MAX_HASH_BUCKETS
from tfdist.spec.overrides import AuthorOnly
from tfdist.spec.section import Section

FACTORY_PATTERN = r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$"
FAMILY = AuthorOnly("it chooses the model section itself, whose other fields change with it")


Metric = Literal["accuracy", "top_5_accuracy", "auc", "pr_auc", "log_loss", "calibration", "rmse", "mae", "r2", "mse"]


class _ModelBase(Section):
    optimizer: Literal["adam", "adamw", "sgd", "rmsprop"] = "adam"
    """Keras optimizer."""
    embedding_optimizer: Literal["lazy_adam", "adagrad", "sgd"] | None = None
    """The optimizer of the tables of weights by id (embeddings, wide_deep's linear weights and crosses), which then
    updates only the rows a step looked up, their slots included: 'lazy_adam' (Adam's moments of a row move only
    when the row is looked up), 'adagrad', 'sgd'; same learning rate as 'optimizer'. Default: 'optimizer' trains them
    too, and Keras's Adam, AdamW and RMSprop then update every row their slots have moved, each step."""
    learning_rate: Annotated[float, Field(gt=0, le=10)] = 1e-3
    """Optimizer learning rate."""
    loss: Literal["sparse_categorical_crossentropy", "binary_crossentropy", "mse", "huber"] | None = None
    """Training loss; default the task's: 'sparse_categorical_crossentropy' (multiclass), 'binary_crossentropy'
    (binary), 'mse' (regression; or 'huber', with delta 1 in standardized units)."""
    metrics: list[Metric] | None = None
    """Metrics reported besides the loss (and usable in validation), the task's: multiclass accuracy,
    top_5_accuracy (default [accuracy]); binary auc, pr_auc, accuracy (at 0.5), log_loss, calibration (mean
    prediction / positive rate) (default [auc, accuracy]); regression rmse, mae, r2, mse (default [rmse, r2])."""


class MLPModel(_ModelBase):
    family: Annotated[Literal["mlp"], FAMILY]
    """'mlp': a multi-layer perceptron."""
    hidden_units: Annotated[list[Annotated[int, Field(ge=1)]], Field(min_length=1)] = Field(
        default_factory=lambda: [128, 64]
    )
    """Units of each hidden layer."""
    dropout: Annotated[float, Field(ge=0, lt=1)] = 0.1
    """Dropout rate after each hidden layer."""
    activation: Literal["relu", "gelu", "tanh"] = "relu"
    """Activation of the hidden layers."""


class Cross(Section):
    """A feature cross of the wide part: the features' values joined, hashed into buckets."""

    features: Annotated[list[str], Field(min_length=2, max_length=4)]
    """The categorical features crossed."""
    hash_buckets: Annotated[int, Field(ge=2, le=MAX_HASH_BUCKETS)] = 1000
    """Buckets of the crossed values."""


class WideDeepModel(_ModelBase):
    family: Annotated[Literal["wide_deep"], FAMILY]
    """'wide_deep': a linear part over the categorical features (a weight per id) and crosses, plus an MLP over
    the embeddings and numeric features; their outputs are summed."""
    hidden_units: Annotated[list[Annotated[int, Field(ge=1)]], Field(min_length=1)] = Field(
        default_factory=lambda: [128, 64]
    )
    """Units of each hidden layer of the deep part."""
    dropout: Annotated[float, Field(ge=0, lt=1)] = 0.1
    """Dropout rate after each hidden layer."""
    activation: Literal["relu", "gelu", "tanh"] = "relu"
    """Activation of the hidden layers."""
    crosses: list[Cross] = Field(default_factory=list)
    """Crosses of categorical features in the wide part, e.g. [{features: [country, device], hash_buckets:
    1000}]."""


class CNNModel(_ModelBase):
    family: Annotated[Literal["cnn"], FAMILY]
    """'cnn': a convolutional network over 'image_shape'."""
    image_shape: Annotated[list[Annotated[int, Field(ge=1)]], Field(min_length=3, max_length=3)]
    """Height, width, channels: the concatenated features are reshaped to it."""
    filters: Annotated[list[Annotated[int, Field(ge=1)]], Field(min_length=1)] = Field(default_factory=lambda: [32, 64])
    """Filters of each convolution layer."""
    kernel_size: Annotated[int, Field(ge=1)] = 3
    """Convolution kernel size."""
    dense_units: Annotated[int, Field(ge=1)] = 64
    """Units of the dense layer after the convolutions."""
    dropout: Annotated[float, Field(ge=0, lt=1)] = 0.1
    """Dropout rate before the output layer."""


class CustomModel(_ModelBase):
    family: Annotated[Literal["custom"], FAMILY]
    """'custom': a Keras model from 'factory'."""
    factory: Annotated[str, Field(pattern=FACTORY_PATTERN)]
    """'package.module:function', called as 'function(features, num_classes, **kwargs)' ('task' and
    'feature_info' too, when it takes them): 'features' maps each feature name to the shape of its preprocessed
    input (numeric: normalized, missing values imputed; categorical: int32 ids, a list's padded with -1);
    returns a Keras model taking a dict of those inputs and returning the task's output: class probabilities
    (num_classes of them), the positive class's probability ([batch, 1]) or the prediction ([batch, 1], in
    standardized units when label.standardize); num_classes is 1 for binary and regression."""
    kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments passed to 'factory'."""


ModelSpec = Annotated[MLPModel | WideDeepModel | CNNModel | CustomModel, Field(discriminator="family")]
