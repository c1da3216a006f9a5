"""rmm.rmm: RMMError, reinitialize, is_initialized and the reinitialize hooks, as RMM's
module of that name gives them: gpumem's own, under RMM's names."""
import gpumem as _gpumem

# gpumem raises GpumemError (and its subclasses OutOfMemoryError, a MemoryError, and
# InvalidArgumentError, a ValueError) where RMM raises RMMError, so `except rmm.RMMError`
# catches gpumem's failures.
RMMError = _gpumem.GpumemError

reinitialize = _gpumem.reinitialize
is_initialized = _gpumem.is_initialized
register_reinitialize_hook = _gpumem.register_reinitialize_hook
unregister_reinitialize_hook = _gpumem.unregister_reinitialize_hook

__all__ = ["RMMError", "is_initialized", "register_reinitialize_hook", "reinitialize",
           "unregister_reinitialize_hook"]
