"""Data files of the knowledge base (JSON tables read by typed loaders in ``kb``)."""
