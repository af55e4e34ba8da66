"""Samplers: small stateful objects deciding how many responses each prompt gets (see `base`).

Nothing is re-exported here: the allocator's step record imports the protocol (`base`) alone,
without every sampler behind it.
"""
