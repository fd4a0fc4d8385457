"""The acceptance claims, in the order the headless runner runs them.

Each entry names a module with `run(ctx: app.headless.ClaimContext) -> None` that
records its checks and metrics on the context.
"""

CLAIMS: dict[str, str] = {
    "affine": "app.claims.affine",
    "tape_chain": "app.claims.tape_chain",
    "sgd_oracle": "app.claims.sgd_oracle",
    "closest_point": "app.claims.closest_point",
    "chamfer_adam": "app.claims.chamfer_adam",
    "real_mesh_fit": "app.claims.real_mesh_fit",
    "launch_overhead": "app.claims.launch_overhead",
    "raymarch_parity": "app.claims.raymarch_parity",
    "render_gradcheck": "app.claims.render_gradcheck",
    "render_grad_parity": "app.claims.render_grad_parity",
    "pose_recovery": "app.claims.pose_recovery",
    "pose_recovery_png": "app.claims.pose_recovery_png",
    "invert_verdict": "app.claims.invert_verdict",
}
