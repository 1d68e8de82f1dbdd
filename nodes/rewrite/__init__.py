"""The ``rewrite`` node (``node.py``) and the rewriters it runs (``rewriters.py``)."""
