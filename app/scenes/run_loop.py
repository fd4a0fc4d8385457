"""The one run loop of the fit and the inverse render: steps under a progress bar, frames between them, stopping.

    done = iterate(step, n, stop=stop, on_frame=frame, desc="fit spot")

`step(i)` does one unit of work and returns the progress bar's text (its loss), or None when the work has
ended itself (the inverse render's phases ran out); an exception from it (a fit that diverged) ends the loop
and propagates, the bar closed. Before each step `on_frame(i)` writes what the run shows at that point (a
fit's mesh dumps and video previews every K iterations, the inverse render's side-by-side frames). A raised
`stop` (engine.interrupt.graceful_stop: SIGINT, SIGTERM) ends the loop before the next step, so the step in
progress finishes and the caller writes every file marked interrupted. The drivers (app.scenes.fit_run,
app.scenes.invert) keep only what differs: their steps, their frames and their records.
"""
from __future__ import annotations

from typing import Callable

from engine.interrupt import StopFlag
from engine.progress import bar


def iterate(step: Callable[[int], str | None], n: int | None, *, desc: str, stop: StopFlag | None = None,
            on_frame: Callable[[int], None] | None = None, total: int | None = None) -> int:
    """Run `step(0)`, `step(1)`, ... until `n` steps have run (None: until a step returns None), `stop` is raised
    or a step returns None (see the module docstring); `total` is the bar's length when it is not `n` (an upper
    bound). Returns the steps run."""
    progress = bar(total=n if total is None else total, desc=desc)
    done = 0
    try:
        while (n is None or done < n) and not stop:
            if on_frame is not None:
                on_frame(done)
            text = step(done)
            if text is None:
                break
            done += 1
            progress.set_postfix_str(text, refresh=False)
            progress.update()
    finally:
        progress.close()
    return done
