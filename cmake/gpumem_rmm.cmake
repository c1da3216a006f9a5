# gpumem_rmm.cmake: finds RMM's C++ library, for the tests of gpumem inside RMM and RMM under
# gpumem (include/gpumem_cccl.hpp; tests/cpp_rmm.cu, tests/gpu/cpp_rmm.cu). RMM comes from the
# librmm wheel of PyPI (its headers, its bundled CCCL, librmm.so and CMake package) and the
# rapids-logger wheel it needs; scripts/librmm.sh installs both into a directory of their own.
#
# GPUMEM_RMM_ROOT: a directory holding the librmm and rapids_logger packages (that script's,
# or a site-packages); empty: where python3 imports them from, if it does. Sets
# GPUMEM_RMM_FOUND, and on success the interface target gpumem_rmm (RMM's headers, its CCCL
# and librmm.so); otherwise says why, once.
#
# The wheel's own CMake package (lib64/cmake/rmm) is not used: it asks for CMake 4, and this
# build runs with the CMake of Debian 12 (3.25). gpumem_rmm holds what that package's rmm::rmm
# target says: its include directories (the CCCL under include/rapids first, ahead of the
# toolkit's), its definitions, librmm.so and librapids_logger.so. Targets using it need C++20
# (RMM 26's headers) and the static CUDA runtime (CUDA_RUNTIME_LIBRARY Static), as
# librmm.so was linked.
set(GPUMEM_RMM_ROOT "" CACHE PATH
  "Directory holding the librmm and rapids_logger Python packages (scripts/librmm.sh's)")
set(GPUMEM_RMM_FOUND OFF)
set(gpumem_rmm_dirs "")
if(GPUMEM_RMM_ROOT)
  set(gpumem_rmm_dirs ${GPUMEM_RMM_ROOT} ${GPUMEM_RMM_ROOT})
else()
  find_program(GPUMEM_PYTHON3 python3)
  if(GPUMEM_PYTHON3)
    execute_process(COMMAND ${GPUMEM_PYTHON3} -c
      "import os, librmm, rapids_logger; print(';'.join(os.path.dirname(os.path.dirname(m.__file__)) for m in (librmm, rapids_logger)))"
      OUTPUT_VARIABLE gpumem_rmm_dirs RESULT_VARIABLE gpumem_rmm_rc
      OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(NOT gpumem_rmm_rc EQUAL 0)
      set(gpumem_rmm_dirs "")
    endif()
  endif()
endif()

if(gpumem_rmm_dirs)
  list(GET gpumem_rmm_dirs 0 gpumem_rmm_site)
  list(GET gpumem_rmm_dirs 1 gpumem_rmm_logger_site)
  set(gpumem_rmm_prefix ${gpumem_rmm_site}/librmm)
  set(gpumem_logger_prefix ${gpumem_rmm_logger_site}/rapids_logger)
  file(GLOB gpumem_rmm_so ${gpumem_rmm_prefix}/lib*/librmm.so)
  file(GLOB gpumem_logger_so ${gpumem_logger_prefix}/lib*/librapids_logger.so)
  if(gpumem_rmm_so AND gpumem_logger_so AND EXISTS ${gpumem_rmm_prefix}/include/rmm/resource_ref.hpp
     AND EXISTS ${gpumem_rmm_prefix}/include/rapids/cuda/memory_resource)
    file(STRINGS ${gpumem_rmm_prefix}/include/rmm/version_config.hpp gpumem_rmm_version
      REGEX "define RMM_VERSION \"")
    string(REGEX REPLACE ".*\"(.*)\".*" "\\1" gpumem_rmm_version "${gpumem_rmm_version}")
    # Not an IMPORTED target: CMake would pass an imported target's include directories as
    # -isystem, behind the toolkit's own, whose older nv/target would then win over CCCL's.
    add_library(gpumem_rmm INTERFACE)
    set_target_properties(gpumem_rmm PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES
        "${gpumem_rmm_prefix}/include/rapids;${gpumem_rmm_prefix}/include;${gpumem_logger_prefix}/include"
      INTERFACE_COMPILE_DEFINITIONS
        "CUB_DISABLE_NAMESPACE_MAGIC;CUB_IGNORE_NAMESPACE_MAGIC_ERROR;THRUST_DISABLE_ABI_NAMESPACE;THRUST_IGNORE_ABI_NAMESPACE_ERROR;CCCL_DISABLE_PDL"
      # librmm.so finds librapids_logger.so only beside itself (its RUNPATH is $ORIGIN, which
      # hides the program's paths from it): the program needs it itself, even where the
      # linker drops libraries it does not call (--as-needed, Debian's and Ubuntu's default).
      INTERFACE_LINK_LIBRARIES
        "${gpumem_rmm_so};-Wl,--no-as-needed;${gpumem_logger_so};-Wl,--as-needed;${CMAKE_DL_LIBS}")
    # CMake 3.25 does not know nvcc 13's C++20 flag.
    if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    endif()
    set(GPUMEM_RMM_FOUND ON)
    message(STATUS "gpumem: RMM ${gpumem_rmm_version} from ${gpumem_rmm_prefix}: the RMM interop tests are built")
  else()
    message(STATUS "gpumem: no librmm.so, RMM headers or librapids_logger.so under ${gpumem_rmm_site}: the RMM interop tests are skipped")
  endif()
else()
  message(STATUS "gpumem: no librmm (scripts/librmm.sh installs it; -DGPUMEM_RMM_ROOT=DIR): the RMM interop tests are skipped")
endif()
