"""`InputError`: what the user gave cannot start a run (a path, a row, a length, a verifier).

Raised while a run starts, before any actor does: a model, tokenizer or data path that does not
exist, a bad row, a task the policy's lengths cannot hold, a verifier that cannot score what the
policy writes. The message is one line naming the key and the fix. `python -m adarl.launch`
prints it as `adarl: <message>`, exits with status 2 and leaves the traceback in
`RUN_DIR/logs/error.log` (adarl/launch.py). A `ValueError`, so that code catching the
validation errors of a config catches these too.
"""

from __future__ import annotations


class InputError(ValueError):
    """A run's input (a path, a row, a length, a verifier) it cannot start with; the message
    names the key and the fix."""
