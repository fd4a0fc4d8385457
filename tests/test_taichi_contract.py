"""The Taichi behaviour this design relies on. An upgrade that changes any of it fails here.

- the pinned version;
- ndarray reverse-mode AD is silently zero on Vulkan (why engine.fields uses fields);
- field AD through FieldGroup works on every backend;
- with fast_math off no backend fuses a multiply and an add into one FMA (the claims that compare
  cpu and vulkan bit for bit, app/claims/sgd_oracle.py, rely on it);
- the cpu backend compiles for this machine's CPU (AVX where it has AVX), with no switch of ours
  (docs/RESULTS.md, "Taichi's CPU target");
- freeing an SNode tree drops every compiled kernel of the process, and a kernel instance's
  template key holds the field objects it was given (engine.fields.FieldGroup.destroy puts back
  the instances given none of the freed group's fields);
- the offline cache is keyed on `advanced_optimization` (engine.compile_effort lowers it for some kernels);
- every name `engine.taichi_private` re-exports from Taichi's private API (`taichi.lang`,
  `taichi._lib`) exists and behaves as the modules that use it rely on, and no other module of the
  checkout imports or reaches that API itself (so that module is the whole of an upgrade's audit).
"""
import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import taichi as ti

from tests.conftest import backend_worker


def ndarray_grad_probe() -> dict:
    @ti.kernel
    def double(x: ti.types.ndarray(), y: ti.types.ndarray()):
        for i in x:
            y[i] = 2.0 * x[i]

    x = ti.ndarray(ti.f32, shape=4, needs_grad=True)
    y = ti.ndarray(ti.f32, shape=4, needs_grad=True)
    x.from_numpy(np.arange(4, dtype=np.float32))
    double(x, y)
    y.grad.fill(1.0)
    double.grad(x, y)
    return {"dx": x.grad.to_numpy()}


def fma_probe() -> dict:
    @ti.kernel
    def multiply_add(a: ti.f32, b: ti.f32, c: ti.f32) -> ti.f32:
        return a * b + c

    # (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24 rounds (a tie, to even) to 1 + 2^-11: the separate operations give 0,
    # one fused multiply-add gives the 2^-24 that the rounding dropped.
    a = 1.0 + 2.0 ** -12
    return {"value": multiply_add(a, a, -(1.0 + 2.0 ** -11))}


def field_group_destroy_probe() -> dict:
    """What freeing fields drops and keeps, and that the kernels kept, and those given a later
    group's field, read the right fields."""
    from engine.fields import FieldGroup

    @ti.kernel
    def doubled(values: ti.types.ndarray(), out: ti.types.ndarray()):
        for i in range(out.shape[0]):
            out[i] = 2.0 * values[i]

    @ti.kernel
    def scaled(source: ti.template(), factor: ti.template(), out: ti.types.ndarray()):
        for i in range(out.shape[0]):
            out[i] = source[i] * factor

    values, out = np.arange(4, dtype=np.float32), np.zeros(4, np.float32)
    doubled(values, out)
    builder = ti.FieldsBuilder()
    builder.dense(ti.i, 4).place(ti.field(ti.f32))
    builder.finalize().destroy()  # Taichi's own free
    taichi_kept = len(doubled._primal.compiled_kernels)
    staying = FieldGroup()
    stays = staying.field(ti.f32, (4,))
    staying.finalize()
    stays.from_numpy(values + 100.0)
    seen, kept = [], []
    for offset in (10.0, 20.0):  # the second group takes the first one's place
        group = FieldGroup()
        field = group.field(ti.f32, (4,), needs_grad=True)
        group.finalize()
        field.from_numpy(values + offset)
        doubled(values, out)
        scaled(stays, 2.0, out)
        scaled(field, 3.0, out)
        seen.append(out.copy())
        scaled(field.grad, 3.0, out)  # a gradient field is freed with its group too
        group.destroy()
        kept.append(len(scaled._primal.compiled_kernels))
        scaled(stays, 2.0, out)
        seen.append(out.copy())
    staying.destroy()
    return {"taichi_kept": taichi_kept, "doubled_kept": len(doubled._primal.compiled_kernels),
            "scaled_kept": kept, "scaled_left": len(scaled._primal.compiled_kernels), "seen": np.array(seen)}


SCALE_PROBE = """
import sys
import taichi as ti
ti.init(arch=ti.cpu, fast_math=False, {init})
x = ti.field(ti.f32, 64)
@ti.kernel
def scale(a: ti.f32):
    for i in x:
        x[i] = x[i] * a
scale(2.0)
"""


def run_scale_probe(folder: Path, init: str, *args: str, env: dict | None = None) -> None:
    """SCALE_PROBE with `init` added to its ti.init, run in `folder` (Taichi reads a kernel's source from its file)."""
    (folder / "probe.py").write_text(SCALE_PROBE.format(init=init))
    run = subprocess.run([sys.executable, "probe.py", *args], cwd=folder, env=env, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr


def test_taichi_is_the_pinned_version():
    assert ti.__version__ == (1, 7, 4), "engine relies on taichi 1.7.4 behaviour: re-verify this file before upgrading"


def test_ndarray_autodiff_is_broken_on_vulkan_but_not_cpu():
    np.testing.assert_array_equal(backend_worker("cpu").call("tests.test_taichi_contract:ndarray_grad_probe")["dx"], 2.0)
    vulkan_dx = backend_worker("vulkan").call("tests.test_taichi_contract:ndarray_grad_probe")["dx"]
    assert np.all(vulkan_dx == 0.0), "Vulkan ndarray AD now works: the fields-only rule in engine/fields.py can be relaxed"


def test_kernel_cache_is_not_evicted_at_taichi_default_size(ti_cpu):
    # Taichi's default (100 MiB, oldest first) evicted this project's own kernels between runs.
    from engine import taichi_private
    from engine.backend import OFFLINE_CACHE_BYTES

    assert taichi_private.config().offline_cache_max_size_of_files == OFFLINE_CACHE_BYTES >= 1 << 30


def test_freeing_a_field_group_drops_only_the_kernels_given_its_fields():
    for arch in ("cpu", "vulkan"):
        found = backend_worker(arch).call("tests.test_taichi_contract:field_group_destroy_probe")
        assert found["taichi_kept"] == 0, f"{arch}: Taichi now keeps kernels when a tree is freed: FieldGroup.destroy " \
                                          "need not put them back"
        assert found["doubled_kept"] == 1, arch  # the ndarray kernel's instance survives every free
        assert found["scaled_kept"] == [1, 1] and found["scaled_left"] == 0, arch  # only the surviving group's
        base = np.arange(4)
        np.testing.assert_array_equal(found["seen"], [(base + 10.0) * 3.0, (base + 100.0) * 2.0,
                                                      (base + 20.0) * 3.0, (base + 100.0) * 2.0])


def test_no_backend_contracts_a_multiply_add_into_an_fma():
    for arch in ("cpu", "vulkan"):
        value = backend_worker(arch).call("tests.test_taichi_contract:fma_probe")["value"]
        assert value == 0.0, f"{arch} fused a * b + c into one FMA ({value!r}): bitwise cpu/vulkan claims will break"


def test_cpu_kernels_are_compiled_for_this_machines_cpu(tmp_path):
    # Taichi builds its CPU target machine from llvm::sys::getHostCPUName() (codegen_cpu.cpp) and its JIT from
    # JITTargetMachineBuilder::detectHost() (jit_cpu.cpp); only its runtime's own functions say target-cpu x86-64.
    env = {**os.environ, "TI_OFFLINE_CACHE_FILE_PATH": str(tmp_path / "cache")}  # compile, do not load
    run_scale_probe(tmp_path, "print_kernel_asm=True, print_kernel_llvm_ir_optimized=True", env=env)
    ir = (tmp_path / "taichi_kernel_cpu_llvm_ir_optimized_0000.ll").read_text()
    kernel = next(line for line in ir.splitlines() if line.startswith("define") and "scale" in line)
    attributes = kernel.rsplit("#", 1)[1].split()[0]
    group = next(line for line in ir.splitlines() if line.startswith(f"attributes #{attributes} "))
    assert "target-cpu" not in group and "target-features" not in group, group
    assembly = (tmp_path / "taichi_kernel_cpu_llvm_ir_optimized_asm_0000.s").read_text()
    cpuinfo = Path("/proc/cpuinfo").read_text()
    has_avx = "avx" in cpuinfo.split()
    # LLVM 15 (Taichi 1.7.4's) names AMD CPUs up to family 25 (Zen 3); a later one (Zen 5: family 26) is "generic"
    # to getHostCPUName, so the optimiser targets baseline x86-64 there (the JIT still encodes for the host's
    # features; docs/RESULTS.md, issue 12 on the Zen 5 host). A newer LLVM that knows it fails here, on purpose.
    family = int(re.search(r"^cpu family\s*:\s*(\d+)", cpuinfo, re.M).group(1))
    named = not ("AuthenticAMD" in cpuinfo and family > 25)
    assert ("vmulss" in assembly) == (has_avx and named), \
        f"the cpu kernel's multiply is not encoded as expected for this CPU (family {family}, avx {has_avx})"


def test_the_offline_cache_is_keyed_on_advanced_optimization(tmp_path):
    # engine.compile_effort compiles some kernels without the advanced passes: each must be found again under its own
    # setting, and never in the place of the other
    cache = tmp_path / "cache"
    env = {**os.environ, "TI_OFFLINE_CACHE_FILE_PATH": str(cache)}

    def cached(setting: str) -> set[str]:
        run_scale_probe(tmp_path, 'offline_cache=True, advanced_optimization=sys.argv[1] == "on"', setting, env=env)
        return {str(path.relative_to(cache)) for path in cache.rglob("*") if path.is_file() and "lock" not in path.name}

    with_passes = cached("on")
    without = cached("off")
    again = cached("on")
    assert len(without) > len(with_passes), "the kernel compiled without the passes was found under the other key"
    assert again == without, "a kernel already cached compiled again"


@ti.kernel
def _private_probe(x: ti.template(), a: ti.f32, out: ti.types.ndarray(dtype=ti.f32, ndim=1)):
    for i in x:
        out[i] = a * x[i]


@ti.data_oriented
class _PrivateOwner:
    @ti.kernel
    def scale(self, x: ti.template(), a: ti.f32):
        for i in x:
            x[i] *= a


def _private_name_checks(scalar, vector) -> dict:
    """name -> a check of what the project relies on of that name of engine.taichi_private (on the cpu)."""
    from engine import taichi_private as private

    out = ti.ndarray(ti.f32, 4)

    def kernel():  # dispatch binds through these; fields.FieldGroup.destroy reads the mapper and instances;
        # kernel_count wraps materialize (tests/test_kernel_count.py checks what it counts)
        assert isinstance(_private_probe._primal, private.Kernel)
        assert isinstance(_private_probe._adjoint, private.Kernel)
        _private_probe(scalar, 2.0, out)
        assert _private_probe._primal.compiled_kernels and _private_probe._primal.mapper.mapping
        for attribute in ("ensure_compiled", "materialize", "arguments", "autodiff_mode", "func", "grad"):
            assert hasattr(_private_probe._primal, attribute), attribute

    def bounded_method():  # engine.dispatch.resolve tells a data-oriented kernel and its .grad by these
        method = _PrivateOwner().scale
        assert isinstance(method, private.BoundedDifferentiableMethod)
        assert method.grad.__func__ is private.BoundedDifferentiableMethod.grad
        assert isinstance(method._primal, private.Kernel) and method._is_staticmethod is False

    def autodiff_mode():
        assert _private_probe._primal.autodiff_mode == private.AutodiffMode.NONE
        assert _private_probe._adjoint.autodiff_mode == private.AutodiffMode.REVERSE

    def layout():  # an ndarray argument's element layout (dispatch strips the element's dims by it)
        assert ti.types.ndarray(dtype=ti.math.vec3, ndim=1).layout == private.Layout.AOS != private.Layout.SOA

    def ndarray():
        array = ti.ndarray(ti.f32, 4, needs_grad=True)
        assert isinstance(array, private.Ndarray) and not isinstance(scalar, private.Ndarray)
        assert array.arr is not None and isinstance(array.grad, private.Ndarray)

    def field():  # the tape and the optimisers take fields (and their placed gradients) by this class
        assert isinstance(scalar, private.Field) and isinstance(vector, private.Field)
        assert isinstance(scalar.grad, private.Field) and scalar.grad._snode.ptr is not None
        assert not isinstance(out, private.Field)

    def matrix_field():
        assert isinstance(vector, private.MatrixField) and not isinstance(scalar, private.MatrixField)

    def matrix_type():
        assert isinstance(ti.math.vec3, private.MatrixType) and isinstance(ti.math.mat2, private.MatrixType)
        assert (ti.math.vec3.n, ti.math.vec3.ndim, ti.math.mat2.m, ti.math.mat2.ndim) == (3, 1, 2, 2)

    def struct_type():
        pair = ti.types.struct(a=ti.f32, b=ti.i32)
        assert isinstance(pair, private.StructType) and hasattr(pair, "set_kernel_struct_args")

    def cook_dtype():
        assert private.cook_dtype(ti.f32) == ti.f32 and private.cook_dtype(int) == ti.i32

    def core_snode():  # what a kernel instance's template key may hold (FieldGroup.destroy treats it as a field)
        assert isinstance(scalar.snode.ptr, private.CoreSNode)

    def program_class():  # kernel_count wraps compile_kernel: every plain launch calls it, the first compiles
        assert isinstance(private.program(), private.Program) and callable(private.Program.compile_kernel)

    def get_runtime():
        runtime = private.get_runtime()
        assert runtime is private.get_runtime() and runtime.prog is not None
        assert runtime.target_tape is None and runtime.fwd_mode_manager is None
        assert isinstance(runtime.kernels, list)

    def config():
        cfg = private.config()
        assert cfg.arch == private.arch() and isinstance(cfg.opt_level, int)
        assert cfg.cpu_max_num_threads == private.cpu_threads() and cfg.offline_cache_max_size_of_files > 0

    def arch():
        assert private.arch() in (ti.x64, ti.arm64)  # the test process runs on the cpu

    def cpu_threads():
        assert isinstance(private.cpu_threads(), int) and private.cpu_threads() >= 1

    def program():
        assert private.program() is private.get_runtime().prog is not None

    def kernels():
        assert any(each is _private_probe._primal for each in private.kernels())

    def materialize_key():  # kernel_count and compile_effort find what a key-less materialize prepared by it
        @ti.kernel
        def seven() -> ti.i32:
            return 7

        seven._primal.materialize()
        assert private.materialize_key(seven._primal) in seven._primal.compiled_kernels
        assert private.materialize_key(seven._primal, "given") == "given"

    def default_offline_cache_dir():
        path = private.default_offline_cache_dir()
        assert isinstance(path, str) and Path(path).is_absolute()

    def kernel_impl():  # engine.kernel_source_info replaces these (and its test reads _get_tree_and_ctx)
        for attribute in ("getsourcelines", "textwrap", "_inside_class", "_get_tree_and_ctx"):
            assert hasattr(private.kernel_impl, attribute), f"kernel_impl.{attribute} is gone"

    def ast_transformer_context():
        assert callable(private.ASTTransformerContext.get_pos_info)

    def is_tensor_expr():  # engine.kernels.lanes tells a packet from one value with it while a kernel compiles
        seen = []

        @ti.func
        def probe(x):
            seen.append(private.is_tensor_expr(x))
            return x

        @ti.kernel
        def kernel() -> ti.f32:
            return probe(ti.Vector([1.0, 2.0])).sum() + probe(3.0)

        assert kernel() == 6.0 and seen == [True, False], seen

    def memory_order():  # engine.autodiff.grad_kernels fills a sample-major field in its memory order
        from engine.fields import FieldGroup

        group = FieldGroup()
        fields = [group.field(ti.f32, (3, 4, 5), order=order) for order in ((0, 1, 2), (1, 0, 2), (2, 0, 1))]
        plain = group.vector(3, ti.f32, (3, 4))
        group.finalize()
        try:
            assert [private.memory_order(f) for f in fields] == [(0, 1, 2), (1, 0, 2), (2, 0, 1)]
            assert private.memory_order(plain) == (0, 1)
        finally:
            group.destroy()

    return {"Kernel": kernel, "BoundedDifferentiableMethod": bounded_method, "AutodiffMode": autodiff_mode,
            "Layout": layout, "Ndarray": ndarray, "Field": field, "MatrixField": matrix_field,
            "MatrixType": matrix_type, "StructType": struct_type, "cook_dtype": cook_dtype, "CoreSNode": core_snode,
            "Program": program_class,
            "get_runtime": get_runtime, "config": config, "arch": arch, "cpu_threads": cpu_threads,
            "program": program, "kernels": kernels, "materialize_key": materialize_key,
            "default_offline_cache_dir": default_offline_cache_dir,
            "kernel_impl": kernel_impl, "ASTTransformerContext": ast_transformer_context,
            "is_tensor_expr": is_tensor_expr, "memory_order": memory_order}


def test_every_private_taichi_name_exists_and_behaves_as_relied_upon(ti_cpu):
    from engine import taichi_private
    from engine.fields import FieldGroup

    public = {name for name in vars(taichi_private) if not name.startswith("_")} - {"annotations", "Any"}
    assert public == set(taichi_private.__all__), "engine.taichi_private exports a name not in __all__ (or the reverse)"
    group = FieldGroup()
    scalar, vector = group.field(ti.f32, (4,), needs_grad=True), group.vector(3, ti.f32, (4,))
    group.finalize()
    try:
        checks = _private_name_checks(scalar, vector)
        assert set(checks) == set(taichi_private.__all__), "every name engine.taichi_private exports needs a check here"
        for name, check in checks.items():
            try:
                check()
            except Exception as exc:
                raise AssertionError(f"engine.taichi_private.{name} no longer behaves as relied upon: {exc!r}") from exc
    finally:
        group.destroy()


PRIVATE_RUNTIME_PROBE = """
import taichi as ti
from engine import taichi_private
before = taichi_private.get_runtime()
print(taichi_private.program() is None)
ti.init(arch=ti.cpu)
started = taichi_private.get_runtime()
print(taichi_private.program() is None, started is before)
ti.reset()
print(taichi_private.program() is None, taichi_private.get_runtime() is started)
"""


def test_the_private_runtime_marks_one_program():
    # engine.backend.require reads "no backend yet" from program(); engine.dispatch drops its bindings when
    # get_runtime() is another object than the one they were made under (ti.init and ti.reset replace it)
    result = subprocess.run([sys.executable, "-c", PRIVATE_RUNTIME_PROBE], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    answers = [word for word in result.stdout.split() if word in ("True", "False")]  # Taichi prints its own lines too
    assert answers == ["True", "False", "False", "True", "False"]


PRIVATE_MODULE = "engine/taichi_private.py"
PRIVATE_PACKAGES = ("taichi.lang", "taichi._lib")
PRIVATE_ATTRIBUTES = ("lang", "_lib")


def _is_private(module: str) -> bool:
    return any(module == package or module.startswith(package + ".") for package in PRIVATE_PACKAGES)


def _private_uses(tree: ast.AST, sample: str | None = None) -> list[tuple[int, str]]:
    """(line, code) of each place `tree` imports or reaches taichi.lang / taichi._lib: an import of them, an
    attribute `lang` or `_lib` of a name bound to the taichi module (`ti.lang.impl`), a getattr or an
    import_module of them; code held in strings (doctests, scripts run in a subprocess) counts too, but for the
    `sample` string (this file's own PRIVATE_USE_SAMPLE)."""
    taichi_names = {"taichi", "ti"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            taichi_names |= {alias.asname or alias.name for alias in node.names if alias.name == "taichi"}
    found = []
    for node in ast.walk(tree):
        hit = False
        if isinstance(node, ast.Import):
            hit = any(_is_private(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            hit = _is_private(node.module) or (node.module == "taichi" and any(
                alias.name in PRIVATE_ATTRIBUTES for alias in node.names))
        elif isinstance(node, ast.Attribute):
            hit = node.attr in PRIVATE_ATTRIBUTES and isinstance(node.value, ast.Name) and node.value.id in taichi_names
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[-1], ast.Constant):
            called, argument = ast.unparse(node.func), node.args[-1].value
            hit = (called == "getattr" and len(node.args) == 2 and argument in PRIVATE_ATTRIBUTES
                   and isinstance(node.args[0], ast.Name) and node.args[0].id in taichi_names) or (
                called in ("importlib.import_module", "import_module", "__import__") and isinstance(argument, str)
                and _is_private(argument))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "\n" in node.value \
                and node.value != sample:
            for code in _code_in(node.value):
                found += [(node.lineno, text) for _, text in _private_uses(code)]
        if hit:
            found.append((node.lineno, ast.unparse(node)))
    return found


def _parsed(source: str) -> ast.AST | None:
    try:
        return ast.parse(source)
    except SyntaxError:
        return None


def _code_in(text: str) -> list[ast.AST]:
    """The Python code a string holds: its doctest examples, and the string itself if it is a program that imports."""
    examples = [line.strip()[4:] for line in text.splitlines() if line.strip().startswith((">>> ", "... "))]
    whole = _parsed("\n".join(examples))
    codes = [whole] if whole else [tree for tree in map(_parsed, examples) if tree]  # else each line alone
    program = _parsed(text)
    if program and any(isinstance(node, (ast.Import, ast.ImportFrom)) for node in ast.walk(program)):
        codes.append(program)
    return codes


def test_no_module_but_taichi_private_reaches_taichis_private_api():
    from tests.test_layers import ROOT, python_files

    problems = []
    for path in python_files(ROOT):
        name = path.relative_to(ROOT).as_posix()
        if name != PRIVATE_MODULE:
            uses = _private_uses(ast.parse(path.read_text(), name), PRIVATE_USE_SAMPLE)
            problems += [f"{name}:{line}: {code}" for line, code in uses]
    assert not problems, ("Taichi's private API is reached outside engine/taichi_private.py (re-export what is needed "
                          "there, with its check in this file, and import it from there):\n" + "\n".join(problems))


PRIVATE_USE_SAMPLE = '''import taichi as tai
import taichi.lang.impl
from taichi.lang.matrix import MatrixField
from taichi import _lib
x = tai.lang.impl.current_cfg()
y = getattr(tai, "_lib")
z = importlib.import_module("taichi.lang.kernel_impl")
"""
    >>> from taichi._lib import core
"""
PROBE = """
import taichi as ti
print(ti.lang.impl.get_runtime())
"""
from engine.taichi_private import config
w = config().arch, "taichi.lang", ti.types.ndarray()
'''


def test_the_private_api_scan_finds_each_form():
    assert sorted(line for line, _ in _private_uses(ast.parse(PRIVATE_USE_SAMPLE))) == [2, 3, 4, 5, 6, 7, 8, 11]
