"""rmm.mr.experimental: RMM's experimental resources (CudaAsyncManagedMemoryResource), the
same objects as rmm.pylibrmm.memory_resource.experimental's."""
from ..pylibrmm.memory_resource.experimental import *  # noqa: F401,F403 -- the same names
from ..pylibrmm.memory_resource.experimental import __all__  # noqa: F401
