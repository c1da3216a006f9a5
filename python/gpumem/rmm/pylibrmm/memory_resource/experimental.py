"""rmm.pylibrmm.memory_resource.experimental: where RMM keeps its experimental resources.
gpumem has none of them yet: CudaAsyncManagedMemoryResource is listed as missing in
docs/rmm-compat.md, and is mapped here when gpumem.mr has it."""
__all__ = []
