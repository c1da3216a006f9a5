"""Installs gpumem's RMM-compatible layer, gpumem.rmm, under the name `rmm` for this process,
so that code written for RMM runs unchanged (docs/rmm-compat.md).

The layer is installed by a finder at the head of sys.meta_path that answers for `rmm` and
every `rmm.X` with the module `gpumem.rmm.X` itself (one module object under two names, so
classes, module state and isinstance checks are shared). Submodules are found when they are
imported, as with a real package: `import rmm` imports no framework, and `rmm.allocators.cupy`
imports CuPy's hook-up only when asked for.

Nothing here runs on `import gpumem`: the layer is installed only by install_as_rmm(), by
`python -m gpumem.as_rmm`, or at interpreter start by the .pth file shipped with the
package when GPUMEM_AS_RMM=1 (which `python -m gpumem.as_rmm` sets, so that child processes
such as multiprocessing or Dask workers get the layer too). A real RMM that the program has
already imported is never replaced: installing then raises.
"""
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

ENVIRONMENT_VARIABLE = "GPUMEM_AS_RMM"
_ALIAS = "rmm"
_TARGET = "gpumem.rmm"


class _AliasLoader(importlib.abc.Loader):
    """Gives `rmm.X` the already imported (or now imported) module gpumem.rmm.X."""

    def __init__(self, target):
        self._target = target
        self._target_spec = None

    def create_module(self, spec):
        module = importlib.import_module(self._target)
        self._target_spec = module.__spec__
        return module

    def exec_module(self, module):
        # The import system set __spec__ to the alias's spec; the module keeps its own, so
        # that importlib.reload and tools that read __spec__ see gpumem.rmm.X, its real name.
        if self._target_spec is not None:
            module.__spec__ = self._target_spec


class _AliasFinder(importlib.abc.MetaPathFinder):
    """Answers for `rmm` and `rmm.X` when gpumem.rmm.X exists; leaves every other name (and
    an `rmm.X` the layer lacks, which then fails as a missing module) to the other finders."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != _ALIAS and not fullname.startswith(_ALIAS + "."):
            return None
        target_name = _TARGET + fullname[len(_ALIAS):]
        try:
            target_spec = importlib.util.find_spec(target_name)
        except ModuleNotFoundError:
            return None
        if target_spec is None:
            return None
        return importlib.machinery.ModuleSpec(
            fullname, _AliasLoader(target_name),
            is_package=target_spec.submodule_search_locations is not None)


def _installed_finder():
    for finder in sys.meta_path:
        if isinstance(finder, _AliasFinder):
            return finder
    return None


def install_as_rmm():
    """Makes `import rmm` (and `import rmm.X`) give gpumem's RMM-compatible layer in this
    process. Calling it again is harmless. Raises RuntimeError when a real RMM (or anything
    else named rmm) has already been imported: modules holding it would mix two memory
    managers. Child processes get the layer when GPUMEM_AS_RMM=1 is in their environment
    (python -m gpumem.as_rmm sets it)."""
    existing = sys.modules.get(_ALIAS)
    if existing is not None and getattr(existing, "__name__", None) != _TARGET:
        origin = getattr(existing, "__file__", None) or repr(existing)
        raise RuntimeError(
            f"gpumem.install_as_rmm(): a module named rmm is already imported ({origin}); "
            "gpumem will not replace it. Install the layer before anything imports rmm "
            "(run the program with `python -m gpumem.as_rmm`, or call "
            "gpumem.install_as_rmm() first thing)")
    if _installed_finder() is None:
        sys.meta_path.insert(0, _AliasFinder())


def _install_at_startup():
    """Run by gpumem_as_rmm.pth when the interpreter starts: installs the layer when
    GPUMEM_AS_RMM=1. Never raises: a broken start-up hook must not stop the interpreter, so
    a failure is reported on stderr and the program runs without the layer."""
    if os.environ.get(ENVIRONMENT_VARIABLE) != "1":
        return
    try:
        install_as_rmm()
    except Exception as error:  # noqa: BLE001 -- reported, never fatal at start-up
        sys.stderr.write(f"gpumem: {ENVIRONMENT_VARIABLE}=1 but the rmm layer was not "
                         f"installed: {error}\n")
