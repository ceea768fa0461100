"""The tables gpuhc acts from: NVIDIA's Xid and SXid codes and the Xid 144-150 sub-codes, what
each class of evidence buys, and every act gpuhc may take on its own.

Row of the import table (docs/ARCHITECTURE.md): base. Imports nothing.
"""
