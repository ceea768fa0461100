"""Text in and out: YAML with the line of every key and the schema it is checked against, patterns
compiled on first use, untrusted text escaped, the documented input bounds, figures.

Row of the import table (docs/ARCHITECTURE.md): base. Imports nothing, so that a module here
loads no sibling it does not use.
"""
