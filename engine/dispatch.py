"""Native dispatch: launch a compiled Taichi kernel at close to the runtime's own cost.

A plain `kernel(*args)` call in Taichi 1.7.4 spends ~10-35 us per launch in Python:
it re-derives the template key of every argument, looks the compiled kernel up,
builds a fresh launch context and converts every argument, before the runtime's
`Program.launch_kernel` (well under a microsecond on the CPU backend) runs it.
This module does that work once:

    bound = bind(kernel, field_x, field_y, 2.0, ti.math.vec3(0, 1, 0))
    bound()                       # launch with the bound arguments
    bound.set("a", 3.0)           # cheap update of one runtime argument slot
    bind(kernel.grad, field_x, field_y, 3.0, v)()   # the Taichi-generated adjoint

    fast = native(kernel)         # a drop-in for `kernel(...)`: every call sets its
    fast(field_x, field_y, t, v)  # runtime arguments natively on a cached binding

    LaunchSequence([b1, b2, b1_grad])()   # a prepared sequence (a whole iteration)

    call(kernel, *args)           # = native(kernel)(*args), native forms cached per kernel:
                                  # engine.launch.dispatch runs every launch through it

What a binding fixes and what it re-applies:
- Template arguments (fields, `ti.template()`) select the compiled kernel; they are
  fixed at bind time (`set` refuses them: bind again).
- Scalars (real/int), `ti.math` vectors and matrices and `ti.types.struct` values
  are written into the launch context once and stay there until `set` changes them.
- Array arguments (Taichi ndarrays, C-contiguous numpy arrays) are written once too.
  The CPU launcher replaces an ndarray handle in the context by its raw pointer while
  launching, so a context relaunched as it was would pass the handle itself as data:
  on the CPU ndarrays are therefore bound as raw host pointers, which it leaves alone.
  The GfxRuntime (Vulkan) only reads the context.
- The CUDA (and AMDGPU) launcher points the context's argument and result buffers at
  device memory it frees after the launch: there a binding makes a fresh context for
  every launch (made right after the previous one, so writes between launches land in host
  memory) and rewrites all arguments into it (`fresh_context`), still without
  Python argument conversion or template lookup.
- Kinds this module does not handle (textures, argpacks, sparse-matrix builders,
  torch/paddle tensors, non-C-contiguous numpy arrays) make the binding fall back to
  the plain call: `bound.native` is False, `bound.fallback_reason` says why, and a
  warning is logged once per kernel and reason. A supported kind never falls back:
  a bad value raises, exactly as the plain call would.

Semantics kept from the plain call: the same compiled kernel (same key, same autodiff
mode; opt_level raised to 1 for grad kernels), the same runtime entry point, so the
same synchronisation: asynchronous on CUDA and Vulkan, a sync after the launch only
when the kernel returns values or prints. Not kept (refused at bind time instead):
recording into Taichi's own `ti.ad.Tape` / forward-mode manager; the project's tape
(`engine/autodiff/tape.py`) records launches through `engine.launch` instead. A binding is valid for the Taichi
program it was made in (`ti.reset()`/re-init invalidates it; `native`/`call` notice a
re-init and rebind) and for as long as its fields live.

The private Taichi 1.7.4 entry points used here (through `engine.taichi_private`) are exercised by
`tests/test_taichi_internals.py`, so an upgrade that moves them fails loudly.
"""
from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import taichi as ti
from taichi.types import ndarray_type, primitive_types, template
from taichi.types.utils import is_signed

from engine.taichi_private import AutodiffMode, BoundedDifferentiableMethod, Kernel, Layout, MatrixType, Ndarray, \
    StructType, config, cook_dtype, get_runtime

log = logging.getLogger(__name__)

MAX_ARGS = 64  # Taichi's own limit on non-template argument slots (kernel_impl.launch_kernel)
_REAL = (float, int, np.floating, np.integer)
_INT = (int, np.integer)
_warned: set[tuple[str, str]] = set()


class Unsupported(Exception):
    """An argument kind native dispatch does not handle: the binding falls back to the plain call."""


def resolve(kernel: Any) -> tuple[Kernel, tuple]:
    """The `Kernel` object behind `kernel` and the arguments to prepend (a data-oriented owner).

    Accepts a `@ti.kernel` function, its `.grad`, a `Kernel`, and a data-oriented
    class kernel (`obj.method` or `obj.method.grad`).
    """
    if isinstance(kernel, Kernel):
        return kernel, ()
    if isinstance(kernel, BoundedDifferentiableMethod):
        return kernel._primal, () if kernel._is_staticmethod else (kernel._kernel_owner,)
    owner = getattr(kernel, "__self__", None)
    if isinstance(owner, BoundedDifferentiableMethod) and kernel.__func__ is BoundedDifferentiableMethod.grad:
        return owner._adjoint, (owner._kernel_owner,)
    primal = getattr(kernel, "_primal", None)
    if isinstance(primal, Kernel):
        return primal, ()
    raise TypeError(f"not a Taichi kernel: {kernel!r}")


def _kernel_name(kern: Kernel) -> str:
    suffix = "" if kern.autodiff_mode == AutodiffMode.NONE else ".grad"
    return kern.func.__name__ + suffix


def _check(ok: bool, name: str, expected: str, value: Any) -> None:
    if not ok:
        raise ti.TaichiRuntimeTypeError(f"argument '{name}': expected {expected}, got {type(value).__name__}")


class _Slot:
    """One non-template argument: how to write a value of it into the binding's launch context.

    `write(value)` validates and writes; it skips a value that is provably what the
    context already holds: the same immutable number object, or a `ti.math`
    vector/matrix with the same element bytes (bytes, not ==, so -0.0 and 0.0 stay
    distinct). Nothing else writes into a binding's context, so a skipped write leaves
    exactly what a write would. `force()` writes the last value again (into a fresh
    context). Writers address `owner._ctx`, which a fresh-context binding replaces.
    """

    def __init__(self, owner: "BoundLaunch", index: int, name: str, needed: Any, value: Any, host_arrays: bool):
        self.owner, self.name, self.index = owner, name, (index,)
        self.is_array = False
        self.value: Any = None  # the last value written, kept alive while bound
        context = type(owner._ctx)  # unbound setters: called with whatever context is current
        if id(needed) in primitive_types.real_type_ids:
            self.write, self.force = self._number_writer(context.set_arg_float, _REAL, float, "a real number")
        elif id(needed) in primitive_types.integer_type_ids:
            set_int = context.set_arg_int if is_signed(cook_dtype(needed)) else context.set_arg_uint
            self.write, self.force = self._number_writer(set_int, _INT, int, "an integer")
        elif isinstance(needed, MatrixType):
            self.write, self.force = self._matrix_writer(context, needed)
        elif isinstance(needed, StructType):
            self.write, self.force = self._struct_writer(needed)
        elif isinstance(needed, ndarray_type.NdarrayType):
            self.is_array = True
            self.write, self.force = self._array_writer(needed, value, host_arrays)
        else:
            raise Unsupported(f"argument '{name}' of kind {type(needed).__name__}")

    def _number_writer(self, set_number: Callable, kinds: tuple, cast: Callable, expected: str) -> tuple:
        slot, owner, index, name = self, self.owner, self.index, self.name

        def write(value: Any) -> None:
            if value is slot.value:  # numbers are immutable: the context already holds it
                return
            _check(isinstance(value, kinds), name, expected, value)
            set_number(owner._ctx, index, cast(value))
            slot.value = value

        def force() -> None:
            set_number(owner._ctx, index, cast(slot.value))

        return write, force

    def _matrix_writer(self, context: type, needed: MatrixType) -> tuple:
        # The plain call casts every element with float()/int() and writes it with
        # set_struct_arg_* at (slot, flat element index); the same values, the same calls.
        if needed.dtype in primitive_types.real_types:
            set_elem, kinds, cast, dtype_kinds = context.set_struct_arg_float, _REAL, float, "fiu"
        elif needed.dtype in primitive_types.integer_types:
            signed = is_signed(cook_dtype(needed.dtype))
            set_elem = context.set_struct_arg_int if signed else context.set_struct_arg_uint
            kinds, cast, dtype_kinds = _INT, int, "iu"
        else:
            raise Unsupported(f"argument '{self.name}': matrix of {needed.dtype}")
        slot, owner, name = self, self.owner, self.name
        at = [(i, j) for i in range(needed.n) for j in range(needed.m)] if needed.ndim == 2 else list(range(needed.n))
        indices = [self.index + (k,) for k in range(len(at))]
        last: list[Any] = [None, None]  # dtype and element bytes of the last ti.math value written

        def store(value: Any, entries: Any) -> None:
            if isinstance(entries, np.ndarray) and entries.size == len(at) and entries.dtype.kind in dtype_kinds:
                elements = entries.ravel().tolist()  # row-major: element (i, j) at i*m + j
                last[0], last[1] = entries.dtype, entries.tobytes()
            else:
                elements = [value[k] for k in at]
                for element in elements:
                    _check(isinstance(element, kinds), name, f"{needed.to_string()} elements", element)
                last[0] = last[1] = None
            ctx = owner._ctx
            for index, element in zip(indices, elements):
                set_elem(ctx, index, cast(element))
            slot.value = value

        def write(value: Any) -> None:
            entries = getattr(value, "entries", None)  # ti.math vectors/matrices keep a numpy array
            if entries.__class__ is np.ndarray and entries.tobytes() == last[1] and entries.dtype == last[0]:
                return
            store(value, entries)

        return write, (lambda: store(slot.value, getattr(slot.value, "entries", None)))

    def _struct_writer(self, needed: StructType) -> tuple:
        slot, owner, index, name = self, self.owner, self.index, self.name

        def write(value: Any) -> None:
            _check(isinstance(value, needed), name, str(needed), value)
            needed.set_kernel_struct_args(value, owner._ctx, index)
            slot.value = value

        return write, (lambda: write(slot.value))

    def _array_writer(self, needed: ndarray_type.NdarrayType, value: Any, host_arrays: bool) -> tuple:
        """Arrays as the runtime takes them, written once (and again into a fresh context).

        On the CPU a Taichi ndarray is passed as its raw host pointer, which is what the CPU
        launcher substitutes on its own: the launcher rewrites an ndarray handle in the
        context while launching, so a handle would not survive a second launch, whereas a
        raw pointer does. Elsewhere ndarrays go in as handles (the GfxRuntime only reads
        the context; CUDA gets a fresh context per launch). Numpy arrays go in as host
        pointers everywhere, as in the plain call (the runtime copies them to the device
        and back around each launch where the device is not the host).
        """
        slot, owner, index = self, self.owner, self.index
        setter: list[Callable[[Any], None] | None] = [None]  # writes the current array into a context

        def force() -> None:
            setter[0](owner._ctx)  # type: ignore[misc]

        if isinstance(value, Ndarray):
            prog = get_runtime().prog

            def write(array: Any) -> None:
                _check(isinstance(array, Ndarray), self.name, "a Taichi ndarray", array)
                grad = array.grad.arr if array.grad else None
                if host_arrays:
                    pointer = prog.get_ndarray_data_ptr_as_int
                    args = (index, pointer(array.arr), array.arr.element_size() * array.arr.nelement(),
                            list(array.shape), 0 if grad is None else pointer(grad))
                    setter[0] = lambda ctx: ctx.set_arg_external_array_with_shape(*args)
                elif grad is None:
                    setter[0] = lambda ctx: ctx.set_arg_ndarray(index, array.arr)
                else:
                    setter[0] = lambda ctx: ctx.set_arg_ndarray_with_grad(index, array.arr, grad)
                force()
                slot.value = array

            return write, force
        if not (isinstance(value, np.ndarray) and value.flags.c_contiguous):
            raise Unsupported(f"argument '{self.name}': array of type {type(value).__name__}"
                              + (" (not C-contiguous)" if isinstance(value, np.ndarray) else ""))
        soa = needed.layout == Layout.SOA
        element_dim = 0 if needed.dtype is None or id(needed.dtype) in primitive_types.type_ids else needed.dtype.ndim

        def write_numpy(array: Any) -> None:
            _check(isinstance(array, np.ndarray) and array.flags.c_contiguous, self.name,
                   "a C-contiguous numpy array", array)
            shape = array.shape
            if element_dim:
                shape = shape[element_dim:] if soa else shape[:-element_dim]
            args = (index, int(array.ctypes.data), array.nbytes, list(shape), 0)
            setter[0] = lambda ctx: ctx.set_arg_external_array_with_shape(*args)
            force()
            slot.value = array

        return write_numpy, force


class BoundLaunch:
    """One kernel bound to its arguments: `bound()` launches it natively.

    `native` is False when an unsupported argument kind made it fall back to the
    plain call (`fallback_reason` says which); it still launches correctly.
    """

    def __init__(self, kernel: Any, *args: Any, name: str | None = None, fresh_context: bool | None = None):
        kern, owner = resolve(kernel)
        self.kernel = kernel
        self.name = name or _kernel_name(kern)
        self.args = list(owner + args)
        self._kern = kern
        self._offset = len(owner)
        self.native, self.fallback_reason = True, None
        runtime = get_runtime()
        if runtime.target_tape is not None or runtime.fwd_mode_manager is not None:
            raise RuntimeError(f"bind({self.name}): a ti.ad.Tape / ti.ad.FwdMode is active; native launches "
                               "are not recorded by it (use engine.autodiff's tape)")
        if len(self.args) != len(kern.arguments):
            raise TypeError(f"{self.name}: {len(kern.arguments) - self._offset} argument(s) needed "
                            f"but {len(args)} provided")
        if kern.autodiff_mode != AutodiffMode.NONE and config().opt_level == 0:
            config().opt_level = 1  # as Kernel.__call__ does for gradient kernels
        key = kern.ensure_compiled(*self.args)
        self._t_kernel = t_kernel = kern.compiled_kernels[key]
        prog = runtime.prog
        arch = config().arch
        # The CUDA (and AMDGPU) launcher points the context's argument and result buffers at
        # device memory it frees after the launch, so a context there serves one launch only.
        self.fresh_context = arch in (ti.cuda, ti.amdgpu) if fresh_context is None else fresh_context
        self._host_arrays = arch in (ti.x64, ti.arm64) and not self.fresh_context
        self._ctx = t_kernel.make_launch_context()
        self._slots: list[_Slot | None] = []
        try:
            self._bind_slots()
        except Unsupported as why:
            self._fall_back(str(why))
            return
        self._compiled = prog.compile_kernel(prog.config(), prog.get_device_caps(), t_kernel)
        self._prog_launch = prog.launch_kernel
        self._bound_slots = [slot for slot in self._slots if slot is not None]
        self._writers = [(position - self._offset, slot.write) for position, slot in enumerate(self._slots)
                         if slot is not None and not slot.is_array]
        # has_print is known once compiled; both it and returned values need a sync (as the plain call).
        self._returns = kern.return_type
        self.launch: Callable[[], Any] = self._make_launch(kern.has_print or bool(self._returns))

    def _bind_slots(self) -> None:
        index = 0
        for argument, value in zip(self._kern.arguments, self.args):
            if isinstance(argument.annotation, template):
                self._slots.append(None)
                continue
            if index >= MAX_ARGS:
                raise ti.TaichiRuntimeError(f"{self.name}: more than {MAX_ARGS} non-template arguments")
            slot = _Slot(self, index, argument.name, argument.annotation, value, self._host_arrays)
            slot.write(value)
            self._slots.append(slot)
            index += 1

    def _fall_back(self, reason: str) -> None:
        self.native, self.fallback_reason = False, reason
        if (self.name, reason) not in _warned:
            _warned.add((self.name, reason))
            log.warning("native dispatch: %s falls back to the plain call: %s", self.name, reason)
        kern = self._kern
        self.launch = lambda: kern(*self.args)

    def _make_launch(self, syncs: bool) -> Callable[[], Any]:
        if not syncs and not self.fresh_context:
            # the common case: one C call, nothing in Python around it
            return functools.partial(self._prog_launch, self._compiled, self._ctx)
        returns, kern = self._returns, self._kern
        prog_launch, compiled, t_kernel, slots = self._prog_launch, self._compiled, self._t_kernel, self._bound_slots
        fresh = self.fresh_context

        def launch_and_sync() -> Any:
            ctx = self._ctx
            prog_launch(compiled, ctx)
            if fresh:  # the launcher left ctx pointing at freed device memory: writes until the next launch go here
                self._ctx = t_kernel.make_launch_context()
                for slot in slots:
                    slot.force()
            if not syncs:
                return None
            ti.sync()
            if not returns:
                return None
            values = [kern.construct_kernel_ret(ctx, ret_type, (i,)) for i, ret_type in enumerate(returns)]
            return values[0] if len(values) == 1 else values

        return launch_and_sync

    def __call__(self) -> Any:
        return self.launch()

    def position(self, name_or_index: str | int) -> int:
        """The kernel-argument position of a parameter name or index (as in the kernel's signature)."""
        if isinstance(name_or_index, str):
            for position, argument in enumerate(self._kern.arguments[self._offset:]):
                if argument.name == name_or_index:
                    return position
            raise KeyError(f"{self.name} has no argument '{name_or_index}'")
        if not 0 <= name_or_index < len(self.args) - self._offset:
            raise IndexError(f"{self.name} has no argument {name_or_index}")
        return name_or_index

    def set(self, name_or_index: str | int, value: Any) -> None:
        """Change one runtime argument (scalar, vector, matrix, struct or array of the same kind)."""
        position = self.position(name_or_index) + self._offset
        if isinstance(self._kern.arguments[position].annotation, template):
            raise ValueError(f"{self.name}: template argument '{self._kern.arguments[position].name}' "
                             "selects the compiled kernel; bind again to change it")
        if self.native:
            slot = self._slots[position]
            if slot.is_array:
                self._check_same_instance(position, value)
            slot.write(value)
        self.args[position] = value

    def _check_same_instance(self, position: int, value: Any) -> None:
        """A new array must compile to the same kernel (dtype, ndim, grad) as the bound one."""
        mapper, argument = self._kern.mapper, self._kern.arguments[position]
        old = mapper.extract_arg(self.args[position], argument.annotation, argument.name)
        new = mapper.extract_arg(value, argument.annotation, argument.name)
        if old != new:
            raise ValueError(f"{self.name}: argument '{argument.name}' changes the compiled kernel "
                             f"({old} -> {new}); bind again")


def bind(kernel: Any, *args: Any, name: str | None = None, fresh_context: bool | None = None) -> BoundLaunch:
    """Bind `kernel` (or `kernel.grad`) to `args` once; launch the result with `bound()`.

    Args:
        kernel: a `@ti.kernel`, its Taichi-generated adjoint `kernel.grad`, or a data-oriented method.
        *args: its arguments, as for a plain call. Fields and other `ti.template()` values select the
            compiled kernel and stay fixed; scalars, `ti.math` vectors and matrices, `ti.types.struct`
            values, Taichi ndarrays and C-contiguous numpy arrays can be rewritten with `set`.
        name: what `LaunchSequence` and error messages call it (default: the kernel's name).
        fresh_context: a new launch context for every launch, every argument rewritten into it
            (default: only on CUDA/AMDGPU, whose launchers consume the context).

    Returns:
        BoundLaunch: `bound()` launches it and returns what the kernel returns; `bound.set(name or
        index, value)` rewrites one runtime argument; `bound.native` is False when an argument kind
        made it fall back to the plain call (`bound.fallback_reason` says which).

    Raises:
        TypeError: the wrong number of arguments. ValueError: `set` on a template argument.
        RuntimeError: Taichi's own `ti.ad.Tape` or forward-mode manager is active (it would not see
            native launches; record on `engine.autodiff.tape.Tape` instead).
        TaichiRuntimeTypeError: an argument value the plain call would refuse.

    Example (the whole program: examples/native_launch.py):
        >>> import taichi as ti
        >>> from engine import backend
        >>> from engine.fields import FieldGroup
        >>> from engine.kernels.elementwise import affine, sum_into   # y = a*x + b; total += sum(values)
        >>> _ = backend.init("cpu")
        >>> group = FieldGroup()
        >>> x, y, total = group.field(ti.f32, (3,)), group.field(ti.f32, (3,)), group.field(ti.f32, ())
        >>> _ = group.finalize()
        >>> x.fill(1.0)
        >>> scale = bind(affine, x, y, 2.0, 0.5)                  # y = 2x + 0.5, ready to launch
        >>> scale(); y.to_numpy()
        array([2.5, 2.5, 2.5], dtype=float32)
        >>> scale.set("a", 3.0); scale(); y.to_numpy()            # one argument rewritten: y = 3x + 0.5
        array([3.5, 3.5, 3.5], dtype=float32)
        >>> native(affine)(y, x, 1.0, -1.0); x.to_numpy()         # a drop-in for affine(y, x, 1.0, -1.0)
        array([2.5, 2.5, 2.5], dtype=float32)
        >>> LaunchSequence([scale, bind(sum_into, y, total)])(); total[None]   # y = 3x + 0.5; total = sum(y)
        24.0
        >>> group.destroy()
    """
    return BoundLaunch(kernel, *args, name=name, fresh_context=fresh_context)


class NativeKernel:
    """`native(kernel)`: call it like the kernel; each call sets its arguments natively (example: `bind`).

    Bindings are cached by the identity of the template and array arguments (which
    select the compiled kernel and the buffers), so a call with the same fields and
    arrays and new scalars/vectors costs one context write per changed argument and one
    launch. (The cached bindings' `args` keep the values they were bound with.)
    """

    CACHE_SIZE = 32

    def __init__(self, kernel: Any):
        kern, owner = resolve(kernel)
        self.kernel, self._kern = kernel, kern
        self._arity = len(kern.arguments) - len(owner)
        self._keyed = [i - len(owner) for i, argument in enumerate(kern.arguments)
                       if i >= len(owner) and isinstance(argument.annotation, (template, ndarray_type.NdarrayType))]
        self._cache: dict[tuple, BoundLaunch] = {}
        self._program = get_runtime()  # ti.init/ti.reset replace it, and with it every compiled kernel

    def __call__(self, *args: Any) -> Any:
        # Hot path, kept flat: one dict lookup, one context write per changed argument, one launch.
        if len(args) != self._arity:
            raise TypeError(f"{_kernel_name(self._kern)}: {self._arity} argument(s) needed but {len(args)} provided")
        if get_runtime() is not self._program:  # Taichi was re-initialised: the bindings are void
            self._cache.clear()
            self._program = get_runtime()
        keyed = self._keyed
        key = tuple([id(args[i]) for i in keyed]) if keyed else ()
        bound = self._cache.get(key)
        if bound is None:
            bound = self._bind(key, args)
        elif bound.native:
            for position, write in bound._writers:
                write(args[position])
        else:
            bound.args[bound._offset:] = args
        return bound.launch()

    def _bind(self, key: tuple, args: Sequence[Any]) -> BoundLaunch:
        if len(self._cache) >= self.CACHE_SIZE:
            del self._cache[next(iter(self._cache))]  # oldest binding first
        bound = self._cache[key] = bind(self.kernel, *args)  # holds the keyed objects: ids stay unique
        return bound

    @property
    def grad(self) -> "NativeKernel":
        """The native form of the kernel's Taichi-generated adjoint."""
        if isinstance(self.kernel, BoundedDifferentiableMethod):
            return NativeKernel(self.kernel.grad)
        return NativeKernel(self._kern.grad)


def native(kernel: Any) -> NativeKernel:
    """A drop-in replacement for calling `kernel` that launches natively (see NativeKernel).

    Args:
        kernel: a `@ti.kernel`, its `.grad`, or a data-oriented method.

    Returns:
        NativeKernel: `fast(*args)` takes and returns what `kernel(*args)` does, bit for bit; its
        bindings are cached by the identity of the template and array arguments (32 at most).

    Raises:
        TypeError: a call with the wrong number of arguments; otherwise what `bind` raises.

    Example: `bind`'s, and examples/native_launch.py.
    """
    return NativeKernel(kernel)


_natives: dict[int, tuple[Any, NativeKernel]] = {}  # id(kernel) -> (kernel kept alive, its native form)
_enabled = os.environ.get("SHANNON_NATIVE_DISPATCH", "1") != "0"


def use_native(enabled: bool) -> None:
    """Switch `call` between native dispatch and plain calls (also: SHANNON_NATIVE_DISPATCH=0).

    For A/B measurements (bench/fit_overhead.py) and as an escape hatch; results are identical.
    """
    global _enabled
    _enabled = enabled


def call(kernel: Any, *args: Any) -> Any:
    """Launch `kernel(*args)` natively: what `engine.launch.dispatch` runs for every launch.

    Kernels (and their `.grad`) are long-lived, so their native forms are cached by
    identity; a data-oriented method (a new object per attribute access) is resolved
    to its `Kernel` and owner each time.
    """
    if not _enabled:
        return kernel(*args)
    entry = _natives.get(id(kernel))
    if entry is None:
        kern, owner = resolve(kernel)
        if owner:
            return call(kern, *owner, *args)
        entry = _natives[id(kernel)] = (kernel, NativeKernel(kern))
    return entry[1](*args)


class LaunchSequence:
    """Bound launches run back to back: e.g. a whole recorded iteration, forward and backward.

    Args:
        launches: `BoundLaunch`es (from `bind`), run in this order by `sequence()`, one runtime call
            each; change a scalar of one with `sequence.launches[i].set(...)`.

    Use `LaunchSequence.from_entries(tape.entries)` to replay what a tape recorded. Example: `bind`'s,
    and examples/native_launch.py.
    """

    def __init__(self, launches: Iterable[BoundLaunch]):
        self.launches = list(launches)
        self._calls = tuple(each.launch for each in self.launches)

    def __call__(self) -> None:
        for call in self._calls:
            call()

    @property
    def native(self) -> bool:
        return all(each.native for each in self.launches)

    @classmethod
    def from_entries(cls, entries: Sequence[Any], forward: bool = True, backward: bool = True) -> "LaunchSequence":
        """A recorded iteration as one sequence: the launches in order, then their adjoints in reverse.

        `entries` are a tape's (`engine.autodiff.tape.Tape.entries`: `.kernel`, `.args`,
        `.name`). Replaying it does what the recorded forward and `tape.backward()` launched,
        with the same arguments; seeding and zeroing gradients stay the caller's (as for
        `tape.backward(None)`), and so do hazard checks (done when the tape recorded).
        A kernel's declared custom adjoint (`entry.adjoint`) replaces its `.grad` when it is a
        kernel. Custom steps keep no forward, and Python-function adjoints launch kernels of
        their own, so a tape holding either is refused.
        """
        custom = [entry.name for entry in entries if entry.kernel is None
                  or (getattr(entry, "adjoint", None) is not None and not hasattr(entry.adjoint, "_primal"))]
        if custom:
            raise ValueError(f"custom steps cannot be replayed as a launch sequence: {', '.join(custom)}")
        launches = [bind(entry.kernel, *entry.args, name=entry.name) for entry in entries] if forward else []
        if backward:
            launches += [bind(getattr(entry, "adjoint", None) or entry.kernel.grad, *entry.args,
                              name=f"{entry.name}.grad") for entry in reversed(entries)]
        return cls(launches)
