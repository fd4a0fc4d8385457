"""Fixtures and checks that claims, tests and the parity computations use, kept out of the capabilities.

Small problems with known answers (`affine_problem`, `chain_problem`, `sgd_oracle_problem`), the gradchecks of
the hand-written adjoints and of the kinematics (`adjoint_checks`), the argument echo of the launch paths
(`dispatch_echo`), the differentiable render's masks and gradchecks (`render_checks`) and the BVH's parity
computations (`bvh_checks`). They import the engine; of the engine only the named-computation registry
(`engine.computations`) names them, by string; the rest of the engine never imports them
(docs/ARCHITECTURE.md, tests/test_layers.py).
"""
