"""Helpers for data other libraries hand to gpumem."""


def contiguous_extent(cai):
    """(address, bytes) of a C-contiguous array described by a __cuda_array_interface__."""
    address, _read_only = cai["data"]
    shape = tuple(cai["shape"])
    itemsize = int(cai["typestr"][2:])
    count = 1
    for extent in shape:
        count *= extent
    strides = cai.get("strides")
    if strides is not None:
        expected = itemsize
        for extent, stride in zip(reversed(shape), reversed(tuple(strides))):
            if extent > 1 and stride != expected:
                raise ValueError("gpumem copies contiguous device arrays only")
            expected *= extent
    return address or 0, count * itemsize
