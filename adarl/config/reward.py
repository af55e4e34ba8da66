"""Structured config of reward computation (`reward`): the verifiers and the pool that runs them.

Which verifier scores an example is the task's choice (`task.verifier`, stamped on each
`TaskExample.task`); this section only configures how each verifier behaves.

`RewardConfig`
    num_workers: threads of the `RewardPool` (verifiers run concurrently; the code verifier's
        candidate programs run in subprocesses, one per busy thread).
    timeout_s: backstop per response: a verifier still running after this long is abandoned,
        the response gets reward 0 and counts in `sampling/reward_timeouts`. Must exceed the
        verifiers' own limits (`code.total_timeout_s`).
    exact_match: `ExactMatchConfig` (the "arithmetic" and "exact_match" verifiers).
    math: `MathConfig` (the "math" verifier, math-verify on `\\boxed{...}` answers).
    code: `CodeConfig` (the "code" verifier: candidate programs in a subprocess sandbox).
    reasoning_gym: `ReasoningGymRewardConfig` (the "reasoning_gym" verifier of
        `task.source=reasoning_gym`: the dataset's own `score_answer`).

`ExactMatchConfig`
    end_markers: the response is read up to the first of these (the engine usually strips the
        end-of-sequence token itself; these catch it when it is decoded as text).
    answer_marker: None (default): the whole response is the answer. A string: the answer is
        what follows its last occurrence, and a response without it is wrong; "=" for the
        built-in task's worked format (`model=tiny_worked`), "#### " for GSM8K-style answers.
    check_arithmetic_work: the built-in arithmetic task with worked responses (`task=worked`):
        score the answer after the last "=" and also check the steps before it
        (adarl/reward/arithmetic_work.py); a right answer reached by malformed work still
        scores 1 and is counted (`sampling/reward_malformed_correct`). Implies
        answer_marker "=".

`MathConfig`
    max_answer_chars: responses longer than this are refused unparsed (reward 0, an error), a
        guard against pathological sympy work.

`ReasoningGymRewardConfig`
    pass_threshold: a response passes (reward 1, else 0) when its dataset's `score_answer` is at
        least this; 1.0 (default) = full credit only (reasoning-gym gives partial credit, e.g.
        len(answer)/len(response) to a response that contains the answer among other text).

`CodeConfig` (limits are per run of the candidate program; one run per stdin/stdout test case,
one run for all assert tests)
    timeout_s: wall-clock limit of one run; the run's whole process group is killed at it.
    total_timeout_s: wall-clock budget of one verification over all its runs.
    cpu_time_limit_s: CPU-seconds limit of one run (RLIMIT_CPU); None = timeout_s rounded up.
    memory_limit_mb: address-space limit of one run (RLIMIT_AS), in MiB.
    max_output_bytes: stdout/stderr size limit of one run (RLIMIT_FSIZE on the capture files).
    partial_credit: reward = fraction of tests passed (else 1 only if all pass).
    isolation: "auto" (Linux namespaces through `unshare` when they work here, else Python-level
        isolation, with a warning at start saying what failed), "strict" (namespaces or the run
        refuses to start: no network interface, own PID namespace, no capabilities), or
        "python" (best effort: sockets disabled inside the interpreter, process group only).
    python_executable: interpreter for candidate programs; None = the one running adarl.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ISOLATION_MODES = ("auto", "strict", "python")


@dataclass
class ExactMatchConfig:
    end_markers: list[str] = field(
        default_factory=lambda: ["\n", "<eos>", "</s>", "<|endoftext|>", "<|im_end|>"]
    )

    answer_marker: str | None = None
    check_arithmetic_work: bool = False

    def validate(self) -> None:
        if any(not marker for marker in self.end_markers):
            raise ValueError("reward.exact_match.end_markers must not contain an empty string")
        if self.check_arithmetic_work and self.answer_marker not in (None, "="):
            raise ValueError(
                "reward.exact_match.check_arithmetic_work reads the answer after the last '=', "
                f"but answer_marker={self.answer_marker!r}; set answer_marker='=' or null"
            )
        if self.answer_marker == "":
            raise ValueError(
                "reward.exact_match.answer_marker is empty; set null (the whole response is the "
                "answer) or the text the answer follows, e.g. '='"
            )


@dataclass
class MathConfig:
    max_answer_chars: int = 20_000

    def validate(self) -> None:
        if self.max_answer_chars < 1:
            raise ValueError(f"reward.math.max_answer_chars={self.max_answer_chars} must be >= 1")


@dataclass
class CodeConfig:
    timeout_s: float = 5.0
    total_timeout_s: float = 30.0
    cpu_time_limit_s: float | None = None
    memory_limit_mb: int = 1024
    max_output_bytes: int = 1_000_000
    partial_credit: bool = False
    isolation: str = "auto"
    python_executable: str | None = None

    def validate(self) -> None:
        for key in ("timeout_s", "total_timeout_s"):
            if not getattr(self, key) > 0:
                raise ValueError(f"reward.code.{key}={getattr(self, key)} must be > 0")
        if self.cpu_time_limit_s is not None and not self.cpu_time_limit_s > 0:
            raise ValueError(f"reward.code.cpu_time_limit_s={self.cpu_time_limit_s} must be > 0")
        if self.memory_limit_mb < 64:
            raise ValueError(
                f"reward.code.memory_limit_mb={self.memory_limit_mb} is below what a Python "
                "interpreter needs to start; use at least 64"
            )
        if self.max_output_bytes < 1024:
            raise ValueError(
                f"reward.code.max_output_bytes={self.max_output_bytes} must be >= 1024"
            )
        if self.isolation not in ISOLATION_MODES:
            raise ValueError(
                f"reward.code.isolation={self.isolation!r} must be one of {ISOLATION_MODES}"
            )


@dataclass
class ReasoningGymRewardConfig:
    pass_threshold: float = 1.0

    def validate(self) -> None:
        if not 0.0 < self.pass_threshold <= 1.0:
            raise ValueError(
                f"reward.reasoning_gym.pass_threshold={self.pass_threshold} must be in (0, 1]"
            )


@dataclass
class RewardConfig:
    num_workers: int = 4
    timeout_s: float = 60.0
    exact_match: ExactMatchConfig = field(default_factory=ExactMatchConfig)
    math: MathConfig = field(default_factory=MathConfig)
    code: CodeConfig = field(default_factory=CodeConfig)
    reasoning_gym: ReasoningGymRewardConfig = field(default_factory=ReasoningGymRewardConfig)

    def validate(self) -> None:
        if self.num_workers < 1:
            raise ValueError(f"reward.num_workers={self.num_workers} must be >= 1")
        if not self.timeout_s > 0:
            raise ValueError(f"reward.timeout_s={self.timeout_s} must be > 0")
        self.exact_match.validate()
        self.math.validate()
        self.code.validate()
        self.reasoning_gym.validate()
        if self.timeout_s <= self.code.total_timeout_s:
            raise ValueError(
                f"reward.timeout_s={self.timeout_s} must exceed reward.code.total_timeout_s="
                f"{self.code.total_timeout_s} (it is the backstop behind the sandbox's own limit)"
            )
