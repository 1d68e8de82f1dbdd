"""The ``rerank`` node (``node.py``) and its scorers: embedding similarity and the token budget
(``scorers.py``), cross-encoders (``cross_encoder.py``) and listwise LLM ranking
(``listwise.py``)."""
