"""Prompt sources: local files (jsonl, parquet, `datasets` directories) and built-in tasks.

Every source is a `PromptSource` (`adarl.tasks.source`: seeded per-epoch shuffle, resumable
cursor) over a list of `adarl.types.TaskExample`s; `adarl.tasks.build`'s `build_prompt_source` /
`build_test_examples` read `TaskConfig`.

Nothing is re-exported here: importing a task's generator (`adarl.tasks.arithmetic`) must not
import the builders, which stand on the verifiers (adarl/reward)."""
