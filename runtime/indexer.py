"""Moved to mxlogits.integrations.indexer; this path works until the next release (a DeprecationWarning)."""
from .deprecated import moved

moved("mxlogits.indexer", "mxlogits.integrations.indexer", __name__)
