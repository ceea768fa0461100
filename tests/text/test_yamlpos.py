"""gpuhc.text.yamlpos: its values are those of YAML's own safe loader, whatever the scalar's shape
(strings are taken from the parsed node directly, everything else through the constructor)."""

from __future__ import annotations

import yaml

from gpuhc.text.yamlpos import load_with_lines

DOC = """\
plain: a plain string, with a comma and a = sign
quoted: "12"
single: '0x1f'
tagged: !!str 007
number: 12
hex: 0x1f
octal: 010
float: 2.5e3
nan: .nan
yes11: yes
off: off
none: ~
empty:
stamp: 2025-03-04
folded: >
  two
  lines
literal: |
  kept
  as is
list: [a, "b", 3, null, true]
"""


def test_every_scalar_is_what_the_safe_loader_makes_of_it():
    ours, lines = load_with_lines(DOC, "doc.yaml")
    theirs = yaml.safe_load(DOC)
    assert repr(ours) == repr(theirs)  # repr: nan is not equal to itself
    assert {k: type(v) for k, v in ours.items()} == {k: type(v) for k, v in theirs.items()}
    assert lines[("tagged",)] == 4
