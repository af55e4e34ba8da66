"""Print the `uv pip install` arguments that carry this machine's pip configuration.

`make setup` installs with uv (parallel downloads and unpacking, no bytecode compilation: a few
times faster than pip on a fresh machine), but uv reads neither pip's configuration files nor its
PIP_* variables. Where pip is pointed at local wheels, extra indexes or a constraints file, uv must
be too, or it would resolve torch to another build. Prints one shell-quoted line, empty when pip
has no such settings.
"""

from __future__ import annotations

import ast
import shlex
import subprocess
import sys

OPTIONS = {
    "index-url": "--index-url",
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraint",
}


def uv_args(pip_config_list: str) -> list[str]:
    """uv options for `pip config list` output (lines `scope.key='value'`; env vars included)."""
    pairs: list[tuple[str, str]] = []
    for line in pip_config_list.splitlines():
        key, sep, raw = line.partition("=")
        option = OPTIONS.get(key.rsplit(".", 1)[-1])
        if not sep or option is None:
            continue
        value = ast.literal_eval(raw) if raw[:1] in "'\"" else raw
        for item in str(value).split():  # pip takes several, whitespace-separated
            if (option, item) not in pairs:
                pairs.append((option, item))
    return [arg for pair in pairs for arg in pair]


def main() -> None:
    listing = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True
    ).stdout
    print(shlex.join(uv_args(listing)))


if __name__ == "__main__":
    main()
