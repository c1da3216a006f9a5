"""One-line hook-ups of gpumem into CuPy, Numba and PyTorch (import the one you need:
importing this package imports none of the frameworks)."""
