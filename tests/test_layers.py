"""docs/ARCHITECTURE.md's layer table holds by test: every module's imports are checked against it.

The document is the data. Its "Layers" table names each layer's modules in the first column
and what they may import in the third (backticked; a layer's own modules and the standard
library always). A module belongs to the layer with the longest matching name. An allowed
entry that names a layer allows that layer's modules; any other allows that module and
those under it; a name outside the project allows that third-party package; `*` allows
anything. Every import counts, at module level or inside a function, and so does a string
naming a module of the project (`"app.scenes.robot_arm:raymarch_frame"` in a table is an
import made later). Below the table, "Taichi-free at import" lists modules whose
module-level imports must never reach `taichi`, and "Known exceptions" lists imports that
break a rule today, each with its reason; an exception that no longer happens fails too,
so the list only shrinks.

A new module (another branch's `app/batch/`, `engine/kernels/kinematics.py`) is checked
like every other: one outside every layer, or one importing what its layer may not, fails
with a line saying which row of the table to change.

And no module of app/ or engine/ imports itself in a circle (a imports b imports ... a), by
any import statement, lazy ones inside functions included: a lazy import only hides a
circle. A failure names the circle's modules.
"""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = "docs/ARCHITECTURE.md"
TICKS = re.compile(r"`([^`]+)`")
MODULE_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+(:[A-Za-z_]\w*)?")


@dataclass(frozen=True)
class Rules:
    layers: dict[str, tuple[str, ...]]  # layer name -> its allowed entries
    members: dict[str, str]  # module prefix -> layer name
    taichi_free: tuple[str, ...]
    exceptions: dict[tuple[str, str], str]  # (importer, imported) -> why


def read_rules(root: Path = ROOT) -> Rules:
    """The rules as docs/ARCHITECTURE.md states them (see the module docstring)."""
    text = (root / DOC).read_text()
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    layers, members, free, exceptions = {}, {}, (), {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 3 and TICKS.search(cells[0]):
            names = TICKS.findall(cells[0])
            layers[names[0]] = tuple(TICKS.findall(cells[2]))
            members.update({name: names[0] for name in names})
        elif line.startswith("Taichi-free at import"):
            free = tuple(TICKS.findall(line))
        elif line.startswith("- ") and " -> " in line and len(TICKS.findall(line)) >= 2:
            importer, imported = TICKS.findall(line)[:2]
            exceptions[(importer, imported)] = line
    assert layers and free, f"{DOC}: the Layers section lost its table or its 'Taichi-free at import' line"
    return Rules(layers, members, free, exceptions)


def python_files(root: Path = ROOT) -> list[Path]:
    """Every Python file of the checkout (tracked, or new and not ignored); outside git, every one not hidden."""
    try:
        listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"], cwd=root,
                                capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):  # not a git checkout (an unpacked source tree)
        listed = [str(path.relative_to(root)) for path in root.rglob("*.py")
                  if not any(part.startswith(".") or part in ("build", "dist") for part in path.relative_to(root).parts)]
    return [root / name for name in sorted(set(listed)) if (root / name).is_file()]


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, name: str, modules: set[str], module_level_only: bool = False,
            strings: bool = True) -> set[str]:
    """The project modules and third-party packages `path` (module `name`) imports, or (with `strings`,
    unless `module_level_only`) names by string."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    nodes = tree.body if module_level_only else ast.walk(tree)
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package.split(".")[: len(package.split(".")) - node.level + 1], base]).strip(".")
            for alias in node.names:  # `from engine import backend` imports the module engine.backend
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
        elif (strings and not module_level_only and isinstance(node, ast.Constant) and isinstance(node.value, str)
              and MODULE_PATH.fullmatch(node.value) and node.value.split(":")[0] in modules):
            found.add(node.value.split(":")[0])
    return found


def layer_of(module: str, rules: Rules) -> str | None:
    prefixes = [p for p in rules.members if module == p or module.startswith(p + ".")]
    return rules.members[max(prefixes, key=len)] if prefixes else None


def allowed(importer_layer: str, imported: str, rules: Rules, internal: set[str]) -> bool:
    entries = rules.layers[importer_layer]
    if "*" in entries:
        return True
    if imported.split(".")[0] not in internal:  # a third-party package, or the standard library
        top = imported.split(".")[0]
        return top in sys.stdlib_module_names or top == "__future__" or top in entries
    layer = layer_of(imported, rules)
    return layer == importer_layer or layer in entries or any(
        imported == entry or imported.startswith(entry + ".") for entry in entries if entry not in rules.layers)


def violations(root: Path = ROOT) -> list[str]:
    """Every import that breaks the table (exceptions excepted), and every exception that no longer happens."""
    rules = read_rules(root)
    files = {module_name(root, path): path for path in python_files(root)}
    internal = {name.split(".")[0] for name in files}
    problems, seen = [], set()
    for name, path in files.items():
        layer = layer_of(name, rules)
        if layer is None:
            problems.append(f"{path.relative_to(root)} ({name}) belongs to no layer: add it to a row of the "
                            f"Layers table in {DOC}")
            continue
        for imported in sorted(imports(path, name, set(files))):
            if allowed(layer, imported, rules, internal):
                continue
            if (name, imported) in rules.exceptions:
                seen.add((name, imported))
                continue
            what = f"layer `{layer_of(imported, rules)}`" if imported.split(".")[0] in internal else "package"
            problems.append(f"{name} (layer `{layer}`) imports {imported} ({what}), which its row of the Layers table "
                            f"in {DOC} does not allow: remove the import, or change the table if the design changed")
    for (importer, imported), line in rules.exceptions.items():
        if (importer, imported) not in seen:
            problems.append(f"known exception no longer happens, remove it from {DOC}: {line}")
    for layer in rules.layers:
        if not any(layer_of(name, rules) == layer for name in files):
            problems.append(f"{DOC} names layer `{layer}`, but no module belongs to it")
    return problems


def taichi_reached(root: Path = ROOT) -> list[str]:
    """Modules listed as Taichi-free at import whose module-level imports (followed through the project) reach taichi."""
    rules = read_rules(root)
    files = {module_name(root, path): path for path in python_files(root)}

    def parents(module: str) -> list[str]:  # importing a.b.c runs a/__init__ and a/b/__init__ first
        parts = module.split(".")
        return [".".join(parts[:i]) for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in files]

    problems = []
    for start in [name for name in files if any(name == p or name.startswith(p + ".") for p in rules.taichi_free)]:
        chain = {start: [start]}
        todo = [start]
        while todo:
            module = todo.pop()
            for imported in imports(files[module], module, set(files), module_level_only=True):
                if imported.split(".")[0] == "taichi":
                    problems.append(f"{start} is listed Taichi-free at import in {DOC}, but "
                                    f"{' -> '.join(chain[module])} imports taichi at module level")
                    todo = []
                    break
                for next_module in parents(imported):
                    if next_module not in chain:
                        chain[next_module] = [*chain[module], next_module]
                        todo.append(next_module)
    return problems


CYCLE_FREE = ("app", "engine")  # the packages whose modules must not import each other in a circle


def import_graph(root: Path = ROOT, packages: tuple[str, ...] = CYCLE_FREE) -> dict[str, set[str]]:
    """module -> the modules of `packages` it imports: every import statement, at module level or inside a
    function (a lazy import hides a circle, it does not remove it); a module named by string is not an import."""
    files = {module_name(root, path): path for path in python_files(root)}
    ours = {name: path for name, path in files.items() if name.split(".")[0] in packages}
    return {name: {imported for imported in imports(path, name, set(files), strings=False)
                   if imported in ours and imported != name}
            for name, path in ours.items()}


def import_cycles(graph: dict[str, set[str]]) -> list[tuple[list[str], list[str]]]:
    """Each strongly connected part of `graph` (modules that all reach each other through imports) of more
    than one module: the shortest circle of imports through its first module (a, b, ..., a), and all its modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    parts: list[set[str]] = []

    def visit(module: str) -> None:  # Tarjan's algorithm
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in sorted(graph[module]):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            part = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                part.add(member)
                if member == module:
                    break
            if len(part) > 1:
                parts.append(part)

    for module in sorted(graph):
        if module not in index:
            visit(module)
    cycles = []
    for part in parts:  # the shortest way from the part's first module back to itself, within the part
        start = min(part)
        came_from: dict[str, str | None] = {start: None}
        todo, last = [start], start
        while todo:
            last = todo.pop(0)
            if start in graph[last]:
                break
            for imported in sorted(graph[last] & part):
                if imported not in came_from:
                    came_from[imported] = last
                    todo.append(imported)
        path, module = [], last
        while module is not None:
            path.append(module)
            module = came_from[module]
        cycles.append(([*path[::-1], start], sorted(part)))
    return sorted(cycles)


def cycle_problems(root: Path = ROOT) -> list[str]:
    """Every circle of imports among the modules of app/ and engine/, as one line each naming its modules."""
    return [f"import circle: {' -> '.join(cycle)}"
            + (f" (one of the circles among {', '.join(part)})" if len(part) + 1 > len(cycle) else "")
            + f": move what one takes from the next into a module that both may import (see 'No import circles' "
              f"in {DOC})" for cycle, part in import_cycles(import_graph(root))]


KERNEL_MODULES = ("engine.kernels", "engine.autodiff.grad_kernels", "engine.autodiff.optim_kernels")
CALLS_KERNELS_ON_PURPOSE = {"engine.checks.dispatch_echo"}  # compares a plain call with native ones


def direct_kernel_calls(root: Path = ROOT) -> list[str]:
    """Calls of the project's @ti.kernel functions in app/ and engine/ that bypass engine.launch.launch."""
    files = {module_name(root, path): path for path in python_files(root)}
    kernels = {}
    for name, path in files.items():
        if name.startswith(KERNEL_MODULES):
            kernels[name] = {node.name for node in ast.walk(ast.parse(path.read_text()))
                             if isinstance(node, ast.FunctionDef)
                             and any("kernel" in ast.unparse(d) for d in node.decorator_list)}
    found = []
    for name, path in files.items():
        if not name.startswith(("app", "engine")) or name in CALLS_KERNELS_ON_PURPOSE:
            continue
        tree = ast.parse(path.read_text())
        local, modules = set(), {}  # kernel names imported as such; aliases of kernel modules
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    if alias.name in kernels.get(node.module, ()):
                        local.add(alias.asname or alias.name)
                    elif f"{node.module}.{alias.name}" in kernels:
                        modules[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if (isinstance(func, ast.Name) and func.id in local) or (
                    isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                    and func.attr in kernels.get(modules.get(func.value.id, ""), ())):
                found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(func)}(...) is called directly: "
                             f"launch it with engine.launch.launch, so the tape sees it and it launches natively")
    return found


def test_kernels_are_launched_only_through_engine_launch():
    assert direct_kernel_calls() == []


def test_every_import_keeps_to_the_layer_table():
    assert violations() == []


def test_taichi_free_modules_reach_no_taichi_at_import():
    assert taichi_reached() == []


def test_no_module_of_app_or_engine_imports_itself_in_a_circle():
    assert cycle_problems() == []


def test_the_cycle_check_finds_a_circle_through_a_lazy_import(tmp_path):
    """A circle closed by an import inside a function is found and named; a module named by string is no import."""
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    files = {"engine/__init__.py": "", "engine/a.py": "from engine import b, d\n",
             "engine/b.py": "def later():\n    from engine.c import value\n", "engine/c.py": "import engine.a\n",
             "engine/d.py": 'TABLE = {"x": "engine.a:run"}\n', "app/__init__.py": "", "app/e.py": "import engine.d\n"}
    for relative, source in files.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(source)
    assert import_cycles(import_graph(tmp_path)) == [(["engine.a", "engine.b", "engine.c", "engine.a"],
                                                      ["engine.a", "engine.b", "engine.c"])]
    assert cycle_problems(tmp_path)[0].startswith("import circle: engine.a -> engine.b -> engine.c -> engine.a: ")


def test_the_check_finds_a_broken_rule(tmp_path):
    """The checker itself: a kernel module that imports the engine's host glue, a module outside every
    layer, a Taichi import in the UI and a stale exception are all reported."""
    (tmp_path / "docs").mkdir()
    stale = "- `app.ui.panel` -> `engine.fields`: an exception this tree does not have (the test's own)\n"
    (tmp_path / DOC).write_text((ROOT / DOC).read_text().replace("The rule, as in", stale + "\nThe rule, as in", 1))
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    files = {"engine/__init__.py": "", "engine/kernels/__init__.py": "", "engine/fields.py": "import numpy\n",
             "engine/kernels/bad.py": "import taichi\nfrom engine import fields\n", "stray/x.py": "",
             "app/__init__.py": "", "app/ui/__init__.py": "", "app/ui/panel.py": "from engine.kernels import bad\n"}
    for relative, source in files.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(source)
    found = "\n".join(violations(tmp_path))
    assert "engine.kernels.bad (layer `engine.kernels`) imports engine.fields (layer `engine`)" in found
    assert "stray/x.py (stray.x) belongs to no layer" in found
    assert "app.ui.panel (layer `app`) imports engine.kernels.bad" in found
    assert "known exception no longer happens" in found
    assert any("app.ui.panel -> engine.kernels.bad imports taichi" in line for line in taichi_reached(tmp_path))
