"""rmm.pylibrmm.memory_resource: RMM's resources and per-device functions (rmm.mr gives the
same), defined in _memory_resource as in RMM's layout; experimental holds RMM's
experimental resources."""
from . import experimental
from ._memory_resource import *  # noqa: F403 -- exactly _memory_resource.__all__
from ._memory_resource import __all__ as _names

__all__ = sorted([*_names, "experimental"])
