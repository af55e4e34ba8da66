"""Policies: the built-in tiny model factory (built and warm-started locally, cached) and the
standard Hugging Face loading path used for every other model (`adarl.models.loading`).

Nothing is re-exported here: importing a light module of this package (the character tokenizer,
the BPE) must not import the built-in models' warm start, which stands on the tasks and hints."""
