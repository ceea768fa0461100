"""The files gpuhc keeps as root (written whole, never through a link; a locked JSON document;
parses memoised between runs) and the bounded reads of files others may write.

Row of the import table (docs/ARCHITECTURE.md): base. Imports nothing.
"""
