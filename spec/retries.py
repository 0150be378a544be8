"""The retries section: Airflow's retries of each task."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from tfdist.spec.section import Section


class RetrySpec(Section):
    """Airflow retries of each task. A retried train task resumes from its run's latest checkpoint; a
    model the gate refused, a refused export and invalid run overrides are never retried."""

    prepare_data: Annotated[int, Field(ge=0, le=10)] = 1
    """Retries of prepare_data (e.g. for a partition that lands late)."""
    validate_data: Annotated[int, Field(ge=0, le=10)] = 1
    """Retries of validate_data after a crash (a refusal is not retried)."""
    train: Annotated[int, Field(ge=0, le=10)] = 2
    """Retries of train; each resumes from the run's latest checkpoint."""
    evaluate: Annotated[int, Field(ge=0, le=10)] = 1
    """Retries of evaluate after a crash."""
    export: Annotated[int, Field(ge=0, le=10)] = 1
    """Retries of export after a crash; a half-written version is never visible."""
    delay_seconds: Annotated[int, Field(ge=0, le=86400)] = 60
    """Wait before each retry."""
