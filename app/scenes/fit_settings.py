"""The shape fit's built-in targets and recommended settings, without Taichi (the UI process imports them).

The recommended settings were measured best on the real targets (docs/RESULTS.md, claim
`real_mesh_fit`): Adam lr 0.03 and a Laplacian shrink-wrap step falling linearly from 0.8
to 0.1 over 400 iterations. The `fit` CLI, the desktop app and the claim start from them.
"""
from pathlib import Path

# The real targets' meshes (and their attribution): assets/ beside app/ in a checkout, and at the same
# place relative to app/ in an installed wheel (shannon_autograd/assets, see pyproject.toml)
ASSETS = Path(__file__).resolve().parents[2] / "assets"
REAL_TARGETS = ("spot", "blub", "penguin")
TARGETS = ("blob", "torus", *REAL_TARGETS)
MAX_SUBDIV = 5  # icosphere subdivision: 10,242 vertices

RECOMMENDED_LR = 0.03
RECOMMENDED_SMOOTH = 0.8
RECOMMENDED_SMOOTH_END = 0.1
RECOMMENDED_ITERS = 400
