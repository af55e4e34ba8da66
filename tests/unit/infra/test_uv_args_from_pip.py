"""tools/uv_args_from_pip.py: `make setup` hands pip's wheel sources and constraints to uv."""

from __future__ import annotations

import importlib.util
from pathlib import Path

TOOL = Path(__file__).resolve().parents[3] / "tools" / "uv_args_from_pip.py"
spec = importlib.util.spec_from_file_location("uv_args_from_pip", TOOL)
assert spec is not None and spec.loader is not None
uv_args_from_pip = importlib.util.module_from_spec(spec)
spec.loader.exec_module(uv_args_from_pip)


def test_pip_sources_and_constraints_become_uv_options_once_each() -> None:
    listing = "\n".join(
        [
            ":env:.default-timeout='180'",
            ":env:.find-links='/opt/wheels'",
            "global.cert='/etc/ssl/certs/ca-certificates.crt'",
            "global.constraint='/etc/xdg/pip/constraints.txt'",
            "global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'",
            "global.find-links='/opt/wheels'",  # the same source from a file: passed once
            "user.index-url='https://mirror.example/simple'",
        ]
    )
    assert uv_args_from_pip.uv_args(listing) == [
        "--find-links",
        "/opt/wheels",
        "--constraint",
        "/etc/xdg/pip/constraints.txt",
        "--extra-index-url",
        "file:///opt/pypi/simple",
        "--extra-index-url",
        "file:///opt/pypi-more/simple",
        "--index-url",
        "https://mirror.example/simple",
    ]


def test_no_pip_configuration_means_no_options() -> None:
    assert uv_args_from_pip.uv_args("") == []
    assert uv_args_from_pip.uv_args("global.timeout='60'") == []
