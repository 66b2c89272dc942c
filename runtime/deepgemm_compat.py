"""Moved to mxlogits.integrations.deepgemm; this path works until the next release (a DeprecationWarning)."""
from .deprecated import moved

moved("mxlogits.deepgemm_compat", "mxlogits.integrations.deepgemm", __name__)
