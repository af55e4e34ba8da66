"""Code verifier input handling: extracting the program and reading the test spec."""

from __future__ import annotations

import json

import pytest

from adarl.reward.code_verifier import CodeTests, extract_code, normalize_output, parse_tests


@pytest.mark.parametrize(
    ("response", "program"),
    [
        ("print(1)", "print(1)"),  # no fence: the whole response
        ("Here:\n```python\nprint(1)\n```\nDone.", "print(1)\n"),
        ("```\nx = 1\n```", "x = 1\n"),
        ("```py\na\n```\nthen\n```python\nb\n```", "b\n"),  # the last block
        ("```python\na\n```\n```text\nsample output\n```", "a\n"),  # not a python block
        ("Sure.\n```python\nprint(2)\nprint(", "print(2)\nprint("),  # cut off by the length limit
    ],
)
def test_extract_code(response: str, program: str) -> None:
    assert extract_code(response) == program


def test_parse_stdio_forms() -> None:
    expected = CodeTests(stdio=(("1 2\n", "3\n"), ("2 2\n", "4\n")))
    cases = [{"input": "1 2\n", "output": "3\n"}, {"input": "2 2\n", "output": "4\n"}]
    assert parse_tests(json.dumps({"stdio": cases})) == expected
    assert parse_tests(json.dumps(cases)) == expected
    apps = {"inputs": ["1 2\n", "2 2\n"], "outputs": ["3\n", "4\n"]}
    assert parse_tests(json.dumps(apps)) == expected
    assert expected.count == 2


def test_parse_asserts() -> None:
    tests = parse_tests(json.dumps({"asserts": ["assert f(1) == 2", "assert f(0) == 1"]}))
    assert tests.asserts == ("assert f(1) == 2", "assert f(0) == 1") and tests.count == 2


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ("not json", "not JSON tests"),
        ('{"asserts": []}', "'asserts' is empty"),
        ('{"asserts": [1]}', "list of strings"),
        ('{"inputs": ["1"], "outputs": []}', "differ in length"),
        ('{"fn_name": "f", "inputs": [], "outputs": []}', "not supported"),
        ('{"stdio": [{"input": "1"}]}', "test case 0"),
        ('{"stdio": []}', "no stdin/stdout test cases"),
        ('{"tests": 1}', "tests must be"),
    ],
)
def test_bad_specs_are_named(answer: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_tests(answer)


def test_output_comparison_ignores_trailing_whitespace_only() -> None:
    assert normalize_output("3 \n4\n\n") == normalize_output("3\n4")
    assert normalize_output(" 3") != normalize_output("3")
    assert normalize_output("3\n\n4") != normalize_output("3\n4")
