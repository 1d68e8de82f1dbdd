"""The ``generate`` node (``node.py``) and its generators, one module a job: the extractive one
(``extractive.py``: its sentence features in ``sentence_scoring.py``, picking, ordering and
quoting in ``answer_assembly.py``, with the question heuristics of ``questions.py`` and the
sentence trimming of ``trimming.py``), the chat-model one (``chat.py``), the citations every
answer carries (``citations.py``) and the evidence format the chat generator, the router and
the listwise reranker share (``evidence.py``)."""
