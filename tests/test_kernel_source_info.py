"""engine.kernel_source_info: Taichi's source-position messages and function sources, memoised, stay
exactly what Taichi 1.7.4 builds (every node of a kernel's tree compared with Taichi's own)."""
import ast
import inspect
import subprocess
import sys

import taichi as ti

from engine import kernel_source_info
from engine.taichi_private import ASTTransformerContext, kernel_impl


@ti.func
def _spread(v, k: ti.template()):
    return ti.Vector([v[k], v[k] * 2.0,
                      v[k] * 3.0])  # a statement over two lines, two calls on one line


@ti.kernel
def _probe(out: ti.types.ndarray()):
    for i in range(out.shape[0]):
        total = 0.0
        for k in ti.static(range(3)):
            if i > k:
                total += _spread(ti.Vector([1.0, 2.0, 3.0]), k).sum()
        while total > 10.0:
            total -= 1.0
        out[i] = total


def test_messages_are_taichis_own_for_every_node(ti_cpu):
    nodes_seen = 0
    for func, args in ((_probe._primal, (None,)), (_spread.func, (None, 0))):
        tree, ctx = kernel_impl._get_tree_and_ctx(func, args=args, is_kernel=func is _probe._primal)
        nodes = [node for node in ast.walk(tree) if isinstance(node, (ast.stmt, ast.expr))]
        memoised = [kernel_source_info._memoised_get_pos_info(ctx, node) for node in nodes]  # fills the memo
        for node, message in zip(nodes, memoised):
            assert message == kernel_source_info._original(ctx, node)
            assert kernel_source_info._memoised_get_pos_info(ctx, node) == message  # from the memo
        nodes_seen += len(nodes)
    assert nodes_seen > 60


def test_sources_are_inspects_own():
    lines, start = kernel_source_info._memoised_getsourcelines(_spread.__wrapped__)
    assert (lines, start) == inspect.getsourcelines(_spread.__wrapped__)
    lines.append("changed by the caller")
    assert kernel_source_info._memoised_getsourcelines(_spread.__wrapped__)[0] == inspect.getsourcelines(_spread.__wrapped__)[0]


def test_installed_by_backend_init_and_kernels_still_run(ti_cpu):
    assert ASTTransformerContext.get_pos_info is kernel_source_info._memoised_get_pos_info
    assert kernel_impl.getsourcelines is kernel_source_info._memoised_getsourcelines
    out = ti.ndarray(ti.f32, 4)
    _probe(out)
    # i = 0: nothing; i = 1: k = 0 adds 6; i = 2: k = 0, 1 add 6 + 12 = 18, then down to 10; i = 3: 36 -> 10
    assert out.to_numpy().tolist() == [0.0, 6.0, 10.0, 10.0]


def test_class_or_not_is_taichis_own_answer(tmp_path, monkeypatch):
    """Every kernel a module defines gets the same "inside a class?" answer as Taichi's own gives."""
    answers = []

    def both(level):
        answers.append((kernel_source_info._inside_class(level + 1), kernel_source_info._taichi_inside_class(level + 1)))
        return answers[-1][1]

    monkeypatch.setattr(kernel_impl, "_inside_class", both)
    (tmp_path / "kernels_to_import.py").write_text(
        "import taichi as ti\n\n@ti.kernel\ndef top(x: ti.template()):\n    x[None] += 1\n\n\n"
        "@ti.data_oriented\nclass Owner:\n    @ti.kernel\n    def method(self, x: ti.template()):\n        x[None] += 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import kernels_to_import  # noqa: F401

    assert answers == [(False, False), (True, True)]


def test_a_kernel_at_a_scripts_top_level_compiles_and_runs(tmp_path):
    """A script run as __main__ defines its kernel where the stack is shallower than Taichi's class lookup
    reaches (it failed once with "call stack is not deep enough")."""
    script = tmp_path / "top_level_kernel.py"  # Taichi reads a kernel's source from its file
    script.write_text("from engine import backend, kernel_source_info\nimport taichi as ti\n\n"
                      "kernel_source_info.install()\nbackend.init('cpu')\nx = ti.field(ti.i32, shape=())\n\n\n"
                      "@ti.kernel\ndef bump():\n    x[None] += 3\n\n\nbump()\nprint(x[None])\n")
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "3"
