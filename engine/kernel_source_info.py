"""Taichi's per-node source-position messages, computed once per position instead of once per visit.

Taichi 1.7.4 compiles a kernel by walking its Python AST (every `ti.func` inlined, every
`ti.static` loop unrolled), and it does so again on every process start even when the
compiled kernel comes from the offline cache: the cache key is a hash of the IR that walk
produces. For every expression and statement it visits, `ASTTransformerContext.get_pos_info`
builds the message that errors about that node would carry (file, line, the source line and a
`^^^` hint under the node, both re-wrapped to 80 columns by `textwrap`), whether or not an
error ever comes. An unrolled loop or an inlined function visits the same source positions
again and again; that wrapping was half of the walk of the tree's kernels (closest_point_query,
refit_leaves, refit_level: docs/RESULTS.md, issue 12).

`install()` wraps it in a memo keyed on everything the message is made of (file, function
name, line offsets, indent, the node's kind and span, and the source lines themselves), so the
message is the same string Taichi would build, built once. It memoises the two other repeated
costs of an inlined function the same way: its source lines (`inspect` tokenizes the file from
the function on, at every call site) and their whitespace fill. And it answers Taichi's "is this
`@ti.kernel` inside a class?" at once for a kernel defined at a module's top level: Taichi asks
`inspect.getframeinfo` for the importer's frame (`<frozen importlib...>`), which scans every
loaded module before it fails (~2 ms per kernel once matplotlib is loaded, ~170 kernels here).

Idempotent; `engine.kernels` and `engine.autodiff` call it before they define any kernel, and
`engine.backend.init` before Taichi starts. tests/test_kernel_source_info.py checks that the
messages, sources and answers stay exactly Taichi's own.
"""
from __future__ import annotations

import ast
import functools
import sys
import textwrap
import types

from engine.taichi_private import ASTTransformerContext, kernel_impl

_COMPOUND = (ast.For, ast.While, ast.FunctionDef, ast.If)  # Taichi's message spans only their header
_original = ASTTransformerContext.get_pos_info
_messages: dict[tuple, str] = {}


def _memoised_get_pos_info(ctx, node: ast.AST) -> str:
    # the lines Taichi's message reads: a compound statement's header, any other node's span
    last = max(node.body[0].lineno - 1, node.lineno) if isinstance(node, _COMPOUND) else node.end_lineno
    key = (ctx.file, ctx.func.func.__name__, ctx.lineno_offset, ctx.indent, node.lineno, node.end_lineno,
           node.col_offset, node.end_col_offset, last, tuple(ctx.src[node.lineno - 1:last]))
    message = _messages.get(key)
    if message is None:
        message = _messages[key] = _original(ctx, node)
    return message


def install() -> None:
    """Make Taichi's AST transformer build each source-position message once (see module docstring).

    Example:
        >>> from engine import kernel_source_info
        >>> kernel_source_info.install()
        >>> from engine.taichi_private import ASTTransformerContext
        >>> ASTTransformerContext.get_pos_info.__name__
        '_memoised_get_pos_info'
    """
    ASTTransformerContext.get_pos_info = _memoised_get_pos_info
    kernel_impl.getsourcelines = _memoised_getsourcelines
    kernel_impl.textwrap = _TEXTWRAP
    kernel_impl._inside_class = _inside_class


def _inside_class(level_of_class_stackframe: int) -> bool:
    # the frame Taichi's own function would look at (this one stands in its place on the stack)
    try:
        frame = sys._getframe(level_of_class_stackframe)
    except ValueError:
        return False  # a kernel at a script's top level: the stack is shallower; Taichi answers no there too
    if frame.f_code.co_filename.startswith("<frozen "):
        return False  # Taichi's answer there too: that frame's code line is the importer's, never a class line
    return _taichi_inside_class(level_of_class_stackframe + 1)  # called from here: one frame deeper


@functools.lru_cache(maxsize=None)
def _sourcelines(func) -> tuple[tuple[str, ...], int]:
    lines, start = _getsourcelines(func)
    return tuple(lines), start


def _memoised_getsourcelines(func) -> tuple[list[str], int]:
    lines, start = _sourcelines(func)
    return list(lines), start


_getsourcelines = kernel_impl.getsourcelines
_taichi_inside_class = kernel_impl._inside_class
# what kernel_impl uses of textwrap: `fill` re-wraps every source line of a function at each inlining
_TEXTWRAP = types.SimpleNamespace(fill=functools.lru_cache(maxsize=None)(textwrap.fill), dedent=textwrap.dedent)
