"""The pre-flight: check a GPU node before the first long run (docs/cluster.md, "Before the first
long run").

    python -m adarl.preflight +experiment=qwen2_5_math_1_5b_seq_balance \
        model.name_or_path=/models/Qwen2.5-Math-1.5B task.path=... task.test_path=...
    make gpu-preflight ARGS="..."                       (the same)
    python -m adarl.preflight --dry-run +experiment=... (on the CPU, a small model built here)

The overrides are those of `python -m adarl.launch`, composed and validated the same way. Each
check runs in its own process under its own timeout, so a hang loses only that check, and prints
one verdict: PASS, FAIL with the reason and the fix, or SKIPPED naming what this node lacks:

* environment: torch/CUDA, the GPUs against what cluster.* places, vLLM (== `VLLM_VERSION`),
  Ray, DeepSpeed. Always runs: the others depend on what it finds.
* engine: one engine of the config's rollout settings on the real model, sampling the task's
  prompts (needs the engine's package and its GPUs).
* tests_gpu: `pytest tests/gpu` (a checkout, pytest, a GPU; its NCCL variants skip on one GPU).
* weight_push: a learner and an engine joined by the config's weight sync, their log-probs
  compared before and after one step and a push (DeepSpeed, Ray unless cluster.in_process, the
  GPUs they are placed on; on one GPU both share it over gloo).
* session: the real `TrainingSession`, evaluations of 8 prompts and one step of 8 prompts
  (what the config's run needs).

Then a summary, and the JSON (`--json PATH`, default OUT/preflight.json, rewritten after every
check); exit status 1 if a check failed, 2 if the config is invalid.

Layout: `runner.py` (command line, composition, one process per check), `node.py` (the node's
facts, the environment verdict, why a check cannot run here), `checks.py` (the checks themselves),
`verdicts.py` (verdicts, the report and its JSON). The process per check and its timeout:
adarl/timed_run.py.
"""
