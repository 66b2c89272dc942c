"""Moved to mxlogits.bench.indexer (python -m mxlogits.bench.indexer); this path works until the next
release (a DeprecationWarning)."""
from .deprecated import moved

_new = moved("mxlogits.indexer_bench", "mxlogits.bench.indexer", __name__)
if __name__ == "__main__":
    raise SystemExit(_new.main())
