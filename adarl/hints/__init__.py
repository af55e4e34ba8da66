"""Hinting (SAGE): hint levels and their text (`format`, `template`, `arithmetic`), the hint
generator and its sources (`generator`), schedules (`schedule`), and the collapse rule the
allocator uses to decide that a prompt needs a hint (`collapse`); docs/algorithms.md "Hints".
`build_hint_generator` is adarl/rollout/builders.py's: its `model` source builds an engine.
Nothing is re-exported here, so a module needing one part does not import the others."""
