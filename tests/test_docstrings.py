from dataclasses import dataclass, fields

from istar_tune.config import RunSettings
from istar_tune.docstrings import field_docs


def test_field_docs_read_the_docstring_under_each_field():
    docs = field_docs(RunSettings)
    assert set(docs) == {f.name for f in fields(RunSettings)}, "every run setting needs a docstring"
    assert all(docs.values()) and all("\n" not in d for d in docs.values())


def test_a_field_without_a_docstring_has_no_entry_and_a_long_one_is_one_line():
    @dataclass
    class Example:
        documented: int = 1
        """First line,
        second line."""
        bare: int = 2
        after_bare: str = "x"
        """Only this one."""

    assert field_docs(Example) == {"documented": "First line, second line.", "after_bare": "Only this one."}
