"""The only way in: a spec given as a dict, a YAML (or JSON) file or an existing ``Spec``, validated."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from tfdist.spec.errors import SpecError, validated
from tfdist.spec.model import Spec


def load_spec(source: Spec | dict[str, Any] | str | os.PathLike[str], origin: str | None = None) -> Spec:
    """Validate a spec given as a dict, a YAML/JSON file path or an existing Spec; raise SpecError."""
    if isinstance(source, Spec):
        return source
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        origin = origin or f"spec file {path}"
        try:
            data = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise SpecError([f"<file>: cannot read YAML: {exc}"], origin) from exc
    else:
        data = source
    return validated(Spec, data, origin or "spec")
