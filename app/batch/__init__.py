"""`python -m app batch`: many fits or frames as one command, one Ray task per job.

| module | owns |
|---|---|
| `cli` | the `batch fit` / `batch render` flags, planning (what is done, what to run), the summary lines |
| `jobs` | jobs as plain data: targets x a settings grid, frames split into tasks, names and folders |
| `execute` | one job inside a worker process: Taichi set-up per job, the fit or the frames, the result |
| `quality` | how close a fitted mesh is to its target, on fixed samples (what picks a sweep's winner) |
| `ray_session` | Ray: embedded or a cluster, code and meshes shipped, a task per job, retries, Ctrl-C, no orphans, OUT/ray.log |
| `store` | job folders written whole or not at all, resume, the batch table (CSV + JSON) and winners |
| `report` | the sweep's summary PNG (matplotlib) |

Ray (the optional `batch` extra) is imported by `ray_session` only; everything else runs without it.
"""
