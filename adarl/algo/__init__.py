"""The pure estimator core of adarl: numpy/torch functions with flat keyword arguments.

Modules, in the order a training step uses them:

* `objectives`  f(p) and w = f' (linear, log, arcsin, power α, pass@k, logit), their registry, p̂
                clipping and Beta smoothing
* `gate`        u_G(p), advantage energy, exact stopping-time laws and expected samples
* `allocation`  samples per prompt: uniform, variance-optimal, Ada-Est, √odds, GVM; exact budgets
* `stopping`    Seq-Pos / Seq-Balance decisions on counts, with caps
* `selection`   balanced downsampling, unresolved policies, correction modes
* `advantages`  uniform-group advantages: GRPO, Dr. GRPO, RLOO, RAFT, REINFORCE, Ada-Est, Pass@k
                Training, PKPO, F-GRPO's factor, W-REINFORCE; the registry of them and their
                implied objectives
* `reweighting` likelihood-aware reweighting of a group's correct samples (UCPO, the unlikeliness
                reward), after any estimator or before a real-valued one; its registry
* `implied`     the weight w(p) any configuration optimises in expectation
* `curation`    history as a Beta posterior, values of n samples (declared, Knapsack-RL, HORA's
                hit utility), the knapsack split, GRESO's skip

Import from the modules themselves: this package re-exports nothing, so config validation can
read the registries (`objectives.OBJECTIVES`, `advantages.UNIFORM_ESTIMATORS`) without importing
the rest. `docs/algorithms.md` maps every equation to its function.
"""
