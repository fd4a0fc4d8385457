"""The application: CLI, headless acceptance runner, scenes and the desktop UI.

Importing the package registers the app's named computations with the engine
(`engine.computations.register`), so that every entry point (the CLI, the claims, the
desktop app's links, tests) can ask a backend worker for them by name, while the engine
names nothing of the app.
"""
from engine import computations as _computations

_computations.register("raymarch_frame", "app.scenes.robot_arm:raymarch_frame")
_computations.register("fit_gradient_at", "app.scenes.shape_fit:fit_gradient_at")
