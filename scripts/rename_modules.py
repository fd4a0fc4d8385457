"""Give the modules that share a file name across layers names that say which layer they are in.

    python scripts/rename_modules.py            # in the repository root: git mv + every reference rewritten
    python scripts/rename_modules.py --dry-run  # say what would change, change nothing

`chamfer.py`, `bvh.py`, `affine.py`, `chain.py`, `shape_fit.py`, `parity.py`, ... each stood in two
or three layers (engine host glue, engine/kernels, app/ui/panels, app/claims, bench), so a
traceback, an editor tab or a grep did not say which one was meant. Claims (`app/claims/`) and
benchmarks (`bench/`) keep the names of the claim and the benchmark they implement (`--only NAME`,
`bench NAME`); the others are renamed by `RENAMES`.

Mechanical and idempotent: each file is moved with `git mv` (skipped when already moved), then
every tracked .py, .md, .sh, .toml, .cfg, .txt and .json file has its references rewritten: dotted
module paths (`engine.chamfer` -> `engine.chamfer_loss`, strings and docs included), file paths
(`engine/chamfer.py`), and `from PACKAGE import NAME` (-> `from PACKAGE import NEW_NAME as NAME`,
so the code using NAME is unchanged). A second run finds nothing to do. Afterwards it lists the
lines that still name an old file by its bare name (`chamfer.py`) or by a partial path, for a
person to look at.
Standard library only.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

RENAMES: list[tuple[str, str]] = [  # (old path, new path), relative to the repository root
    ("engine/chamfer.py", "engine/chamfer_loss.py"),  # ChamferLoss, LaplacianSmoother: the host side
    ("engine/kernels/chamfer.py", "engine/kernels/chamfer_terms.py"),  # held-point terms, fixed-order sums
    ("engine/bvh.py", "engine/triangle_bvh.py"),  # TriangleBVH: host build, fields, launches
    ("engine/kernels/bvh.py", "engine/kernels/bvh_query.py"),  # refit, best-first query, brute force
    ("engine/affine.py", "engine/affine_problem.py"),  # AffineProblem, the affine parity computations
    ("engine/kernels/affine.py", "engine/kernels/elementwise.py"),  # affine, sin_map, sum_into
    ("engine/chain.py", "engine/chain_problem.py"),  # ChainProblem, the tape-chain parity computations
    ("engine/sgd_oracle.py", "engine/sgd_oracle_problem.py"),  # the SGD oracle's problem and computation
    ("app/bench.py", "app/bench_cli.py"),  # the `bench` command, beside fit_cli.py and render_cli.py
    ("app/ui/panels/shape_fit.py", "app/ui/panels/fit_panel.py"),
    ("app/ui/panels/raymarch.py", "app/ui/panels/raymarch_panel.py"),
    ("app/ui/panels/parity.py", "app/ui/panels/parity_panel.py"),
    ("app/ui/panels/tape.py", "app/ui/panels/tape_panel.py"),
    ("app/ui/panels/status.py", "app/ui/panels/status_panel.py"),
]
TEXT_SUFFIXES = {".py", ".md", ".sh", ".toml", ".cfg", ".txt", ".json"}
SKIP = {"scripts/rename_modules.py"}  # this file names the old paths on purpose


def module(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".")


def git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout


def move(old: str, new: str, dry_run: bool) -> str:
    if Path(new).exists() and not Path(old).exists():
        return f"already moved: {old} -> {new}"
    if not Path(old).exists():
        raise SystemExit(f"error: {old} does not exist (and {new} does not either): update RENAMES")
    if Path(new).exists():
        raise SystemExit(f"error: both {old} and {new} exist: merge them by hand first")
    if not dry_run:
        git("mv", old, new)
    return f"moved: {old} -> {new}"


def rewrite(text: str) -> str:
    for old, new in RENAMES:
        old_module, new_module = module(old), module(new)
        package, _, old_name = old_module.rpartition(".")
        new_name = new_module.rpartition(".")[2]
        text = re.sub(rf"(?<![\w./]){re.escape(old)}(?!\w)", new, text)  # file paths
        text = re.sub(rf"(?<![\w.]){re.escape(old_module)}(?![\w])", new_module, text)  # dotted module paths

        def names(match: re.Match) -> str:  # from PACKAGE import a, OLD, b as c -> a, NEW as OLD, b as c
            items = re.sub(rf"(?<![\w.]){old_name}(?= as )", new_name, match.group(2))
            items = re.sub(rf"(?<![\w.])(?<!as ){old_name}(?![\w])(?! as )", f"{new_name} as {old_name}", items)
            return match.group(1) + items

        text = re.sub(rf"(from {re.escape(package)} import )(\([\w ,\n#]*\)|[\w ,]+)", names, text)
    return re.sub(r"^( *)(from [\w.]+ import )([\w ,]+)$", wrap, text, flags=re.M)


def wrap(match: re.Match) -> str:
    """An import line the aliases made longer than 120 characters, in parentheses, one name a line."""
    indent, head, names = match.groups()
    if len(match.group(0)) <= 120:
        return match.group(0)
    items = "".join(f"{indent}    {name.strip()},\n" for name in names.split(","))
    return f"{indent}{head}(\n{items}{indent})"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="say what would change, change nothing")
    args = parser.parse_args(argv)
    if not Path(".git").exists():
        raise SystemExit("error: run this in the repository root")
    for old, new in RENAMES:
        print(move(old, new, args.dry_run))
    changed = []
    for name in git("ls-files").splitlines():
        path = Path(name)
        if path.suffix not in TEXT_SUFFIXES or name in SKIP or not path.is_file():
            continue
        text = path.read_text()
        new_text = rewrite(text)
        if new_text != text:
            changed.append(name)
            if not args.dry_run:
                path.write_text(new_text)
    print(f"references rewritten in {len(changed)} files{': ' + ', '.join(changed) if changed else ''}")
    # what is left: an old file's bare name, or a partial path, that no rule above could place
    bare = re.compile(r"(?<![\w/.])([\w./]*?)(" + "|".join(re.escape(Path(old).name) for old, _ in RENAMES) + r")(?!\w)")
    for name in git("ls-files").splitlines():
        if Path(name).suffix in TEXT_SUFFIXES and name not in SKIP and Path(name).is_file():
            for number, line in enumerate(Path(name).read_text().splitlines(), 1):
                if any(not Path(m.group(0)).is_file() for m in bare.finditer(line)):  # an existing file's path is fine
                    print(f"look at: {name}:{number}: {line.strip()[:120]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
