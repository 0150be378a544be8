"""MkDocs hook: the spec reference page gets the reference generated from the spec model (tfdist.spec.reference), so
it cannot drift from it."""

from tfdist.spec.reference import render

MARKER = "<!-- spec reference -->"


def on_page_markdown(markdown: str, **_: object) -> str:
    """The page with the generated reference in place of its marker."""
    return markdown.replace(MARKER, render())
