"""Claim `invert_verdict`: an inverse render made to fail says so: status not `converged`, exit 1, one line.

Two runs of `python -m app invert` through its entry point, at 128x64 with short schedules:

- `--method adam --lr 1e6 --lm-iters 0`: Adam with an absurd learning rate flings the parameters thousands of
  tolerances away; at its first check the run goes back to its best iterate and ends `diverged`;
- `--perturb joints=100000` (the default method, a short search): joints anywhere on the circle, far
  outside the default perturbation the search spans; the fit cannot find the pose and ends
  `not_converged` (or `diverged`), naming the joints that are off.

Each must return exit code 1 (EXIT_RESULT_BAD), write invert.json with that status, and a result
never worse than its start (the best iterate is kept).
"""
from __future__ import annotations

import json

ADAM = ["--method", "adam", "--iters", "20", "--starts", "1", "--hops", "0"]
SEARCH = ["--search-evals", "100", "--hops", "0"]
RUNS = {"huge_lr": (["--lr", "1e6", "--lm-iters", "0", *ADAM], ("diverged",)),
        "huge_perturbation": (["--perturb", "joints=100000", "--lm-iters", "5", *SEARCH],
                              ("not_converged", "diverged"))}
VIEW = ["--t", "0.5", "--width", "128", "--height", "64", "--seed", "3"]


def run(ctx) -> None:
    from app.scenes import invert
    from engine.errors import EXIT_RESULT_BAD

    for name, (flags, expected) in RUNS.items():
        folder = ctx.out / "invert_verdict" / name
        code = invert.main([*VIEW, *flags, "--arch", ctx.arch, "--out", str(folder)])
        record = json.loads((folder / "invert.json").read_text())
        loss = record["image_loss"]
        ctx.metric(**{name: {"exit": code, "status": record["status"], "start_loss": loss["start"],
                             "final_loss": loss["final"], "off": record["verdict"]["off"]}})
        ctx.check(code == EXIT_RESULT_BAD and record["status"] in expected,
                  f"invert {' '.join(flags)}: exit {code}, status {record['status']} (expected exit "
                  f"{EXIT_RESULT_BAD}, {' or '.join(expected)})")
        ctx.check(loss["final"] <= loss["start"], f"invert {' '.join(flags)}: the result is its best iterate, "
                                                  f"image loss {loss['start']:.2e} -> {loss['final']:.2e}")
