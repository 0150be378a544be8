"""The only way in: a spec given as a dict, a YAML (or JSON) file or an existing ``Spec``, validated."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from tfdist.spec.errors import SpecError, validated
from tfdist.spec.model import Spec

_FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader where PyYAML has it: ~8x faster than the pure-Python one (a folder of YAML specs is
read at every parse); the same constructors, so the same values."""


def read_yaml(text: str) -> Any:
    """``yaml.safe_load(text)``, through libyaml when available. A document libyaml refuses is read again by
    the pure-Python loader, so what is accepted and every error's wording stay PyYAML's own."""
    try:
        return yaml.load(text, Loader=_FAST_LOADER)
    except yaml.YAMLError:
        return yaml.safe_load(text)


def load_spec(source: Spec | dict[str, Any] | str | os.PathLike[str], origin: str | None = None) -> Spec:
    """Validate a spec given as a dict, a YAML/JSON file path or an existing Spec; raise SpecError."""
    if isinstance(source, Spec):
        return source
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        origin = origin or f"spec file {path}"
        try:
            data = read_yaml(path.read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise SpecError([f"<file>: cannot read YAML: {exc}"], origin) from exc
    else:
        data = source
    return validated(Spec, data, origin or "spec")
