"""The surfaces people meet: the CLI, the ``langgraph.json`` entry, the LangServe app with its
admission control, and what the CLI drives beside them: ingestion (documents into the configured
stores) and evaluation (scoring retrievers on a BEIR folder)."""
