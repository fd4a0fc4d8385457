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
message is the same string Taichi would build, built once. Idempotent; `engine.backend.init`
calls it. tests/test_taichi_internals.py checks the messages stay identical.
"""
from __future__ import annotations

import ast
import functools
import textwrap
import types

from taichi.lang import kernel_impl
from taichi.lang.ast import ast_transformer_utils

_COMPOUND = (ast.For, ast.While, ast.FunctionDef, ast.If)  # Taichi's message spans only their header
_original = ast_transformer_utils.ASTTransformerContext.get_pos_info
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
        >>> from taichi.lang.ast.ast_transformer_utils import ASTTransformerContext
        >>> ASTTransformerContext.get_pos_info.__name__
        '_memoised_get_pos_info'
    """
    ast_transformer_utils.ASTTransformerContext.get_pos_info = _memoised_get_pos_info
    kernel_impl.getsourcelines = _memoised_getsourcelines
    kernel_impl.textwrap = _TEXTWRAP


@functools.lru_cache(maxsize=None)
def _sourcelines(func) -> tuple[tuple[str, ...], int]:
    lines, start = _getsourcelines(func)
    return tuple(lines), start


def _memoised_getsourcelines(func) -> tuple[list[str], int]:
    lines, start = _sourcelines(func)
    return list(lines), start


_getsourcelines = kernel_impl.getsourcelines
# what kernel_impl uses of textwrap: `fill` re-wraps every source line of a function at each inlining
_TEXTWRAP = types.SimpleNamespace(fill=functools.lru_cache(maxsize=None)(textwrap.fill), dedent=textwrap.dedent)
