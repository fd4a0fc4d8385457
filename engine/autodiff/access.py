"""Which kernel parameters a kernel reads and which it writes, derived from its source.

The tape needs per-launch read and write sets to refuse the launches that make
Taichi's reverse pass silently wrong (see engine.autodiff.tape). They are derived,
not declared, because a declaration is a second copy of the kernel body that drifts
from it without a sound; the analysis runs once per kernel (cached) on its Python AST:

- `p[...] = v` (also `p[i][j] = v`, `p[i].x = v`) writes p; `p.grad[...] = v` writes p.grad;
- `p[...] += v`, `-=` and `ti.atomic_add/atomic_sub(p[...], v)` accumulate into p:
  a write that does not read p (the adjoint of an accumulation needs no old value);
- any other augmented assignment and `ti.atomic_min/max/and/or/xor` read and write p;
- `p[...]` anywhere else reads p; `for i in p`, `p.shape`, `ti.grouped(p)`, `ti.static(...)` read nothing;
- a parameter handed to a `ti.func` takes that function's accesses (analysed the same
  way, recursively), and a local alias (`q = p`) counts as p.

Anything else done with a parameter (passing it to an unknown callable) makes it
"opaque": the tape then refuses to record the launch with that argument and says so,
and `declare_access` states the sets by hand for such a kernel. Only parameters are
tracked: a field a kernel reaches as a Python global is invisible to the tape (pass
differentiated data as arguments, as every kernel in engine/kernels does).
"""
from __future__ import annotations

import ast
import builtins
import inspect
import textwrap
from dataclasses import dataclass
from typing import Any, Callable, Iterable

_ACCUMULATE = {"atomic_add", "atomic_sub"}
_READ_WRITE_ATOMICS = {"atomic_min", "atomic_max", "atomic_and", "atomic_or", "atomic_xor"}
_NO_ACCESS = {"grouped", "ndrange", "len", "range", "loop_config", "print", "static_print", "isinstance", "hasattr",
              "type"}


@dataclass(frozen=True)
class Access:
    """Parameter paths ("p" or "p.grad") a kernel reads, writes, and writes only by accumulation."""

    reads: frozenset[str]
    writes: frozenset[str]  # includes accumulations
    accumulates: frozenset[str] = frozenset()
    opaque: frozenset[str] = frozenset()  # parameters the analysis could not follow
    params: tuple[str, ...] = ()


_declared: dict[Callable, Access] = {}
_derived: dict[Callable, Access] = {}


def _python_function(kernel: Callable) -> Callable:
    primal = getattr(kernel, "_primal", kernel)
    return getattr(primal, "func", primal)


def declare_access(kernel: Callable, reads: Iterable[str] = (), writes: Iterable[str] = ()) -> None:
    """State a kernel's read and write sets by hand (for kernels the analysis cannot follow)."""
    func = _python_function(kernel)
    params = tuple(inspect.signature(func).parameters)
    unknown = sorted((set(reads) | set(writes)) - set(params) - {f"{p}.grad" for p in params})
    if unknown:
        raise ValueError(f"declare_access({func.__name__}): no parameter {', '.join(unknown)} (has {', '.join(params)})")
    _declared[func] = Access(frozenset(reads), frozenset(writes), params=params)


def kernel_access(kernel: Callable) -> Access:
    """The read/write sets of a Taichi kernel (declared, else derived from its source; cached)."""
    func = _python_function(kernel)
    if func in _declared:
        return _declared[func]
    if func not in _derived:
        _derived[func] = _analyse(func, stack=())
    return _derived[func]


def _analyse(func: Callable, stack: tuple) -> Access:
    tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    definition = next(node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)))
    params = tuple(arg.arg for arg in definition.args.args)
    visitor = _Visitor(func, set(params), stack + (func,))
    for statement in definition.body:
        visitor.visit(statement)
    accumulate_only = visitor.accumulates - visitor.overwrites - visitor.reads
    return Access(frozenset(visitor.reads), frozenset(visitor.writes), frozenset(accumulate_only),
                  frozenset(visitor.opaque), params)


def _chain(node: ast.AST) -> tuple[str | None, bool, bool]:
    """(name, grad, is_data) for a chain of subscripts/attributes on a name.

    `p[i]`, `p[i][j]`, `p[i].x`, `p.grad[i]` are data accesses; `p.shape`, `p.dtype` or
    `p.shape[0]` (an attribute straight on the name, other than `grad`) are metadata.
    """
    links = []
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        links.append(node)
        node = node.value
    if not isinstance(node, ast.Name):
        return None, False, False
    links.reverse()
    grad = bool(links) and isinstance(links[0], ast.Attribute) and links[0].attr == "grad"
    first = links[1 if grad else 0] if len(links) > int(grad) else None
    return node.id, grad, isinstance(first, ast.Subscript)


class _Visitor(ast.NodeVisitor):
    def __init__(self, func: Callable, params: set[str], stack: tuple):
        self.func, self.stack = func, stack
        self.aliases = {p: p for p in params}
        self.reads: set[str] = set()
        self.writes: set[str] = set()
        self.accumulates: set[str] = set()
        self.overwrites: set[str] = set()
        self.opaque: set[str] = set()

    def _path(self, node: ast.AST) -> str | None:
        """The parameter path ("p" or "p.grad") whose data `node` accesses, else None."""
        name, grad, is_data = _chain(node)
        param = self.aliases.get(name) if name else None
        if param is None or not is_data:
            return None
        return f"{param}.grad" if grad else param

    def _visit_indices(self, node: ast.AST) -> None:
        """Visit the index expressions of a target chain (they are reads of other parameters)."""
        while isinstance(node, (ast.Subscript, ast.Attribute)):
            if isinstance(node, ast.Subscript):
                self.visit(node.slice)
            node = node.value

    def _store(self, target: ast.AST, accumulate: bool = False, read: bool = False) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self._store(element, accumulate, read)
            return
        if isinstance(target, ast.Starred):
            self._store(target.value, accumulate, read)
            return
        path = self._path(target)
        if path is not None:
            self.writes.add(path)
            (self.accumulates if accumulate else self.overwrites).add(path)
            if read:
                self.reads.add(path)
        self._visit_indices(target)

    def visit_Assign(self, node: ast.Assign) -> None:
        if self._is_param(node.value) and all(isinstance(target, ast.Name) for target in node.targets):
            for target in node.targets:  # `q = p`: q is p from here on
                self.aliases[target.id] = self.aliases[node.value.id]
            return
        for target in node.targets:
            self._store(target)
        self.visit(node.value)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._store(node.target)
        if node.value is not None:
            self.visit(node.value)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        accumulate = isinstance(node.op, (ast.Add, ast.Sub))
        self._store(node.target, accumulate=accumulate, read=not accumulate)
        self.visit(node.value)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        self._load(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self._load(node)

    def _load(self, node: ast.Subscript | ast.Attribute) -> None:
        name, _, _ = _chain(node)
        if name not in self.aliases:
            self.generic_visit(node)
            return
        path = self._path(node)
        if path is not None:
            self.reads.add(path)
        self._visit_indices(node)  # metadata (`p.shape[0]`) reads no data

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in self.aliases and isinstance(node.ctx, ast.Load):
            self.opaque.add(self.aliases[node.id])  # a bare parameter used where we cannot follow it

    def visit_For(self, node: ast.For) -> None:
        if not (isinstance(node.iter, ast.Name) and node.iter.id in self.aliases):  # `for i in p`: indices only
            self.visit(node.iter)
        for statement in node.body + node.orelse:
            self.visit(statement)

    def _is_param(self, node: ast.AST) -> bool:
        return isinstance(node, ast.Name) and node.id in self.aliases

    def visit_Call(self, node: ast.Call) -> None:
        callee = self._resolve(node.func)
        short = getattr(callee, "__name__", None)
        module = getattr(callee, "__module__", None) or ""
        if module.startswith("taichi") and short in _ACCUMULATE | _READ_WRITE_ATOMICS and node.args:
            accumulate = short in _ACCUMULATE
            self._store(node.args[0], accumulate=accumulate, read=not accumulate)
            for arg in node.args[1:]:
                self.visit(arg)
            return
        if module.startswith("taichi") and short == "static":
            return  # evaluated by Python at compile time: touches no device data
        passes_param = any(self._is_param(arg) for arg in node.args) or any(
            self._is_param(keyword.value) for keyword in node.keywords)
        if getattr(callee, "_is_taichi_function", False) and passes_param:
            self._call_taichi_function(callee, node)
            return
        if module.startswith(("taichi", "builtins")) and short in _NO_ACCESS:
            for arg in node.args + [keyword.value for keyword in node.keywords]:
                if not self._is_param(arg):
                    self.visit(arg)
            return
        self.generic_visit(node)

    def _call_taichi_function(self, callee: Callable, node: ast.Call) -> None:
        inner = inspect.unwrap(callee)
        if inner in self.stack:  # recursion: the accesses are those already being collected
            return
        access = _analyse(inner, self.stack)
        bound: dict[str, str] = {}
        for param, arg in zip(access.params, node.args):
            if self._is_param(arg):
                bound[param] = self.aliases[arg.id]
            else:
                self.visit(arg)
        for keyword in node.keywords:
            if self._is_param(keyword.value) and keyword.arg:
                bound[keyword.arg] = self.aliases[keyword.value.id]
            else:
                self.visit(keyword.value)

        def mapped(paths: frozenset[str]) -> set[str]:
            out = set()
            for path in paths:
                base, _, suffix = path.partition(".")
                if base in bound:
                    out.add(f"{bound[base]}.{suffix}" if suffix else bound[base])
            return out

        self.reads |= mapped(access.reads)
        self.writes |= mapped(access.writes)
        self.accumulates |= mapped(access.accumulates)
        self.overwrites |= mapped(access.writes - access.accumulates)
        self.opaque |= mapped(access.opaque)
        self.visit(node.func)

    def _resolve(self, node: ast.AST) -> Any:
        """The Python object a call's function expression names, or None if it is not static."""
        if isinstance(node, ast.Name):
            closure = inspect.getclosurevars(self.func)
            for scope in (closure.nonlocals, self.func.__globals__, vars(builtins)):
                if node.id in scope:
                    return scope[node.id]
            return None
        if isinstance(node, ast.Attribute):
            base = self._resolve(node.value)
            return getattr(base, node.attr, None) if base is not None else None
        return None
