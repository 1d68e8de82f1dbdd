"""The ``generate`` node (``node.py``) and its generators, extractive and chat-model, with the
evidence format they share (``generators.py``)."""
