"""rmm.rmm: RMMError, reinitialize and is_initialized, as RMM's module of that name gives
them: gpumem's own, under RMM's names."""
import gpumem as _gpumem

# gpumem raises GpumemError (and its subclasses OutOfMemoryError, a MemoryError, and
# InvalidArgumentError, a ValueError) where RMM raises RMMError, so `except rmm.RMMError`
# catches gpumem's failures.
RMMError = _gpumem.GpumemError

reinitialize = _gpumem.reinitialize
is_initialized = _gpumem.is_initialized

__all__ = ["RMMError", "is_initialized", "reinitialize"]
