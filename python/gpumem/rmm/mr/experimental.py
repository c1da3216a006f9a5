"""rmm.mr.experimental: RMM's experimental resources. gpumem has none of them yet (RMM's
CudaAsyncManagedMemoryResource, a driver pool of managed memory, is not in gpumem:
docs/rmm-compat.md); the module is here so that RMM's layout imports."""
from ..pylibrmm.memory_resource.experimental import *  # noqa: F401,F403 -- the same names
from ..pylibrmm.memory_resource.experimental import __all__  # noqa: F401
