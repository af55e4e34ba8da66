"""Rollout engines behind one protocol (`base.RolloutEngine`: `vllm_engine.VLLMEngine`, real vLLM
on the CPU or GPU build; `hf_engine.HFEngine`, transformers; `fake.FakeEngine`, scripted pass
rates for tests), the `pool.RolloutPool` over them, their builders (`builders`), the prompt codec
(`codec`) and the simulated pool of the benchmarks (`simulated`). Nothing is re-exported here:
importing the codec does not import the engines, and vLLM is imported only when a vLLM engine is
built."""
