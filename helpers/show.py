"""Show the source of a helper in a notebook, rendered (highlighted), never copied.

The notebook displays exactly the code it then calls, so text and library cannot drift apart.
"""

from __future__ import annotations

import inspect
import textwrap


def source_of(obj) -> str:
    """The source text of a function, class or Triton kernel (``@triton.jit`` objects included)."""
    fn = getattr(obj, "fn", obj)  # a JITFunction / InterpretedFunction wraps the Python function
    fn = getattr(fn, "fn", fn)
    try:
        src = inspect.getsource(fn)
    except (TypeError, OSError) as e:
        raise TypeError(
            f"show_source: cannot find the source of {obj!r} ({e}); pass a function defined in a file."
        ) from e
    return textwrap.dedent(src).rstrip() + "\n"


class _Source:
    """Displays as highlighted code in Jupyter (HTML) and as plain text elsewhere."""

    def __init__(self, text: str, title: str | None):
        self.text, self.title = text, title

    def __repr__(self) -> str:
        return self.text

    def _repr_markdown_(self) -> str:
        head = f"**`{self.title}`**\n\n" if self.title else ""
        return f"{head}```python\n{self.text}```"


def show_source(obj, title: str | None = None):
    """Return a displayable object holding ``obj``'s source (put it last in a cell)."""
    if title is None:
        mod = getattr(getattr(obj, "fn", obj), "__module__", None) or ""
        name = getattr(getattr(obj, "fn", obj), "__name__", None) or getattr(obj, "__name__", "")
        title = f"{mod}.{name}" if mod else name
    return _Source(source_of(obj), title)
