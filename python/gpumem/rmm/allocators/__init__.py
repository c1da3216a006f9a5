"""rmm.allocators: the CuPy, Numba and PyTorch hook-ups under RMM's names. Importing this
package imports none of the frameworks; each module imports its own."""
