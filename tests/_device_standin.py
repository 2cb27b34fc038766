"""A CPU stand-in for a device array library (CuPy), so the device road runs where no GPU is.

:class:`DeviceArray` wraps a NumPy array and behaves like ``cupy.ndarray`` where it matters:

- it refuses implicit conversion to NumPy: ``np.asarray(x)`` / ``np.array(x)`` raise CuPy's
  ``TypeError`` (``__array__``; ``__array_interface__`` and the buffer protocol are absent), so
  any host conversion a kernel makes by accident fails the test;
- NumPy functions and ufuncs called on it (``np.concatenate``, ``np.isfinite``, ``@``, ``+``)
  run on its data and return stand-ins, as CuPy's ``__array_function__`` / ``__array_ufunc__``
  do, so dask builds and runs graphs on it; mixing it with a NumPy array (ndim ≥ 0) raises, as
  CuPy does (``TypeError: Unsupported type <class 'numpy.ndarray'>``): host operands must be
  moved explicitly (index arrays excepted: CuPy takes NumPy indices);
- reductions return 0-d stand-ins, not NumPy scalars; ``float()``, ``int()``, ``bool()`` and
  ``.item()`` of a size-1 array work (CuPy synchronises and allows them);
- ``.get()`` is the explicit road to the host (``cupy.ndarray.get``).

:data:`namespace` is its ``cupy``: NumPy's functions, where only the creation functions
(``asarray``, ``array``) accept host arrays. :data:`BACKEND` is its
:class:`daskpca.passes._device.ArrayBackend`, registered on import; the tests map
``device="cuda"`` onto it (:func:`use_as_cuda`).
"""

from __future__ import annotations

import numbers

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin

from daskpca.passes import _device

#: CuPy's words, so a failure reads as it would on a GPU.
IMPLICIT = ("Implicit conversion to a NumPy array is not allowed. Please use `.get()` to construct a NumPy "
            "array explicitly.")

#: The functions that take host data on purpose (cupy.asarray and friends).
_FROM_HOST = {"asarray", "array", "asanyarray", "ascontiguousarray", "asfortranarray"}


class DeviceArray(NDArrayOperatorsMixin):
    """A NumPy array that pretends to live on a device (see the module notes)."""

    __slots__ = ("_data",)
    __array_priority__ = 100

    def __init__(self, data):
        if not isinstance(data, np.ndarray):
            raise TypeError(f"DeviceArray wraps a NumPy array, not {type(data).__name__}")
        self._data = data

    # -- what CuPy refuses
    def __array__(self, dtype=None, copy=None):
        raise TypeError(IMPLICIT)

    def __getattr__(self, name):
        # Dunder look-ups (``__array_interface__``, ``__array_struct__``) and raw memory would
        # hand NumPy the data behind our back: absent, as on a device array.
        if name.startswith("__") or name in ("ctypes", "data", "base", "tobytes", "tofile"):
            raise AttributeError(name)
        attribute = getattr(self._data, name)
        if not callable(attribute):
            return _wrap(attribute)

        def method(*args, **kwargs):
            return _wrap(attribute(*_unwrap(args), **_unwrap(kwargs)))

        return method

    def get(self) -> np.ndarray:
        """The explicit copy to the host."""
        return self._data.copy()

    # -- array attributes
    shape = property(lambda self: self._data.shape)
    dtype = property(lambda self: self._data.dtype)
    ndim = property(lambda self: self._data.ndim)
    size = property(lambda self: self._data.size)
    nbytes = property(lambda self: self._data.nbytes)
    itemsize = property(lambda self: self._data.itemsize)
    T = property(lambda self: DeviceArray(self._data.T))

    def __len__(self):
        return len(self._data)

    # Host index arrays are accepted (CuPy copies them to the device); host values are not.
    def __getitem__(self, index):
        return _wrap(self._data[_unwrap(index, host_ok=True)])

    def __setitem__(self, index, value):
        self._data[_unwrap(index, host_ok=True)] = _unwrap(value)

    def __iter__(self):
        return (_wrap(row) for row in self._data)

    def __float__(self):
        return float(self._data)

    def __int__(self):
        return int(self._data)

    def __bool__(self):
        return bool(self._data)

    def __sizeof__(self):
        return object.__sizeof__(self) + self._data.nbytes

    def __repr__(self):
        return f"DeviceArray({self._data!r})"

    def __reduce__(self):
        return (DeviceArray, (self._data,))

    # -- NumPy's protocols: run on the data, return stand-ins
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        result = getattr(ufunc, method)(*_unwrap(inputs), **_unwrap(kwargs))
        return _wrap(result)

    def __array_function__(self, func, types, args, kwargs):
        if not all(issubclass(t, (DeviceArray, np.ndarray)) for t in types):
            return NotImplemented
        if func is np.take:  # host indices are copied to the device by cupy.take
            array, indices, *rest = args
            return _wrap(func(_unwrap(array), _unwrap(indices, host_ok=True), *_unwrap(rest), **_unwrap(kwargs)))
        return _wrap(func(*_unwrap(args), **_unwrap(kwargs)))


def _unwrap(value, host_ok: bool = False):
    """Stand-ins → their data; a NumPy array operand is refused, as CuPy refuses one."""
    if isinstance(value, DeviceArray):
        return value._data
    if isinstance(value, np.ndarray):
        if host_ok:
            return value
        raise TypeError(f"Unsupported type {type(value)}: a host (NumPy) array mixed with device arrays; "
                        "move it with the backend's asarray first")
    if isinstance(value, tuple):
        return tuple(_unwrap(v, host_ok) for v in value)
    if isinstance(value, list):
        return [_unwrap(v, host_ok) for v in value]
    if isinstance(value, dict):
        return {k: _unwrap(v, host_ok) for k, v in value.items()}
    return value


def _wrap(value):
    """NumPy results → stand-ins (scalars from reductions become 0-d arrays, as in CuPy)."""
    if isinstance(value, np.ndarray):
        return DeviceArray(value)
    if isinstance(value, np.generic) and not isinstance(value, (np.str_, np.bytes_)):
        return DeviceArray(np.asarray(value))
    if isinstance(value, tuple):
        wrapped = [_wrap(v) for v in value]
        return type(value)(*wrapped) if hasattr(value, "_fields") else tuple(wrapped)
    if isinstance(value, list):
        return [_wrap(v) for v in value]
    return value


class _Namespace:
    """NumPy's functions on stand-ins (the stand-in's ``cupy``)."""

    def __init__(self, module):
        self._module = module

    def __getattr__(self, name):
        attribute = getattr(self._module, name)
        if isinstance(attribute, type) or not callable(attribute):
            if hasattr(attribute, "__name__") and type(attribute).__name__ == "module":
                return _Namespace(attribute)
            return attribute
        host_ok = name in _FROM_HOST

        def function(*args, **kwargs):
            kwargs.pop("like", None)
            return _wrap(attribute(*_unwrap(args, host_ok), **_unwrap(kwargs, host_ok)))

        function.__name__ = name
        return function


#: The stand-in's array namespace (its ``cupy``).
namespace = _Namespace(np)


class StandInBackend(_device.ArrayBackend):
    """The stand-in as a daskpca backend: everything the default (CuPy-compatible) calls give."""

    name = "standin"

    @property
    def xp(self):
        return namespace

    def owns(self, array) -> bool:
        return isinstance(array, DeviceArray)

    def to_host(self, array) -> np.ndarray:
        return array.get()

    def asarray(self, host, dtype=None):
        """A copy, as a transfer makes: the "device" array never shares the host's memory."""
        if isinstance(host, DeviceArray):
            return host if dtype is None else host.astype(dtype)
        return DeviceArray(np.array(host, dtype=dtype, copy=True))

    def memory(self):
        return (8 * 2**30, 16 * 2**30)


BACKEND = _device.register(StandInBackend())


def to_standin(block):
    """A block moved to the stand-in's "device" (what ``map_blocks(cupy.asarray)`` does)."""
    return BACKEND.asarray(block)


def dask_on_device(array, backend=BACKEND):
    """A dask array whose chunks live on ``backend``'s device, with the right ``meta``."""
    return array.map_blocks(backend.asarray, dtype=array.dtype, meta=backend.meta(array.dtype, array.ndim))


def use_as_cuda(monkeypatch):
    """Map ``device="cuda"`` onto the stand-in for one test."""
    monkeypatch.setitem(_device.DEVICES, "cuda", StandInBackend)


def is_scalar(value) -> bool:
    return isinstance(value, numbers.Number)
