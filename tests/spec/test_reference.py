"""The spec reference generated from the model (tfdist.spec.reference): every field by its dotted path with its
type, allowed values, default, override policy and docstring, as sections and as Markdown. That the docs site
renders it, with every field of the real spec: tests/docs/test_site.py."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from tfdist.spec import Spec
from tfdist.spec.overrides import AuthorOnly
from tfdist.spec.reference import OVERRIDABLE, PER_FIELD, Entry, _markdown, render, sections


# Plain pydantic models: a spec Section subclass would join section_models() (the schema, the trigger form).
class Inner(BaseModel):
    """A nested section."""

    level: Annotated[int, Field(ge=1, le=5)] = 2
    """How high."""


class Top(BaseModel):
    title: Annotated[str, Field(min_length=1, max_length=8)]
    """The title."""
    choice: Literal["a", "b"] = "a"
    """One of two, with ``code`` and a_b."""
    inner: Inner = Field(default_factory=Inner)
    """The inner section."""
    items: list[Inner] = Field(default_factory=list)
    """Several."""
    secret: Annotated[str | None, AuthorOnly("it is the author's")] = None
    """Set by the author."""


def test_each_field_is_an_entry_with_its_type_allowed_values_default_and_policy():
    top, inner, items = sections(Top)
    assert (top.path, top.title, top.anchor) == ("", "top level", "spec-top-level")
    assert top.fields == (
        Entry("title", "string", "not empty; at most 8 characters", "required", OVERRIDABLE, "The title."),
        Entry("choice", "choice", '`"a"`, `"b"`', '`"a"`', OVERRIDABLE, "One of two, with ``code`` and a_b."),
        Entry("inner", "section [`inner`](#spec-inner)", "", "the section's defaults", PER_FIELD, "The inner section."),
        Entry("items", "list of section [`items[]`](#spec-items)", "", "`[]`", PER_FIELD, "Several."),
        Entry("secret", "string or null", "", "`null`", "no: it is the author's", "Set by the author."),
    )
    assert (inner.path, inner.doc, items.path, items.anchor) == (
        "inner",
        "A nested section. The inner section.",
        "items[]",
        "spec-items",
    )
    assert inner.fields == (Entry("inner.level", "integer", "≥ 1; ≤ 5", "`2`", OVERRIDABLE, "How high."),)


def test_the_markdown_is_a_heading_and_a_table_per_section_with_code_kept_and_the_rest_escaped():
    text = render(Top)
    assert "## `top level` {#spec-top-level}" in text and "## `items[]` {#spec-items}" in text
    assert '| `choice` | choice | `"a"`, `"b"` | `"a"` | yes | One of two, with `code` and a\\_b. |' in text
    assert "| `secret` | string or null |  | `null` | no: it is the author's | Set by the author. |" in text
    assert _markdown("a ``code_x`` b_c <t> |") == "a `code_x` b\\_c &lt;t&gt; \\|"


def test_the_real_spec_has_a_section_per_union_member_and_says_what_a_computed_default_depends_on():
    found = {s.title: s for s in sections(Spec)}
    assert {"top level", "training", "model (family: mlp)", "model (family: custom)"} <= set(found)
    entries = {e.path: e for e in found["top level"].fields}
    assert entries["artifact_root"].default == "'$TFDIST\\_ARTIFACT\\_ROOT', else '~/tfdist'."
    assert {e.path: e.override for e in found["training"].fields}["training.epochs"] == OVERRIDABLE
