"""The driver: the step loop (`step_loop.Driver`) and the rollout phase it runs each step
(`rollout_phase`: the stream of requests between the allocator, the rollout pool and the reward
pool). Nothing is re-exported here, so importing one does not import the other's dependencies."""
