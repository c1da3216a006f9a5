"""The layer's version, in RMM's form: the RMM release whose Python API the layer follows,
with gpumem's own version as the local part ("26.06.00+gpumem.0.1.0"), so that code that
compares RMM versions sees the API it gets, and a reader sees it is gpumem
(docs/rmm-compat.md, "Version")."""
import gpumem as _gpumem

RMM_API_VERSION = "26.06.00"

__version__ = f"{RMM_API_VERSION}+gpumem.{_gpumem.__version__}"

# RMM fills this in built distributions; gpumem's layer has no commit of RMM's to give.
__git_commit__ = ""

__all__ = ["__git_commit__", "__version__"]
