# find_package(tensorplug [0.1] CONFIG) gives
#   tensorplug::tensorplug           imported target: libtensorplug + the headers (C++17)
#   tensorplug::compat_tvm_ffi       tensorplug::tensorplug + the tvm-ffi compatibility headers
#                                    (<tvm/ffi/...>, <dlpack/dlpack.h>; docs/migration.md)
#   tensorplug_add_kernel_library()  a kernel library target, configured to ship (below)
#   tensorplug_INCLUDE_DIR, tensorplug_LIBRARY, tensorplug_ABI_VERSION,
#   tensorplug_COMPAT_TVM_FFI_INCLUDE_DIR
# This file lies at <site-packages>/tensorplug/share/cmake/tensorplug, next to
# tensorplugConfigVersion.cmake (0.x: a request matches the same minor version only).
# scikit-build-core finds it with no hint (it puts site-packages on CMAKE_PREFIX_PATH);
# plain CMake users pass -Dtensorplug_DIR=$(tensorplug config --cmakedir).
get_filename_component(_tensorplug_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
if(NOT TARGET tensorplug::tensorplug)
  add_library(tensorplug::tensorplug SHARED IMPORTED)
  set_target_properties(tensorplug::tensorplug PROPERTIES
    IMPORTED_LOCATION "${_tensorplug_prefix}/lib/libtensorplug.so"
    IMPORTED_SONAME "libtensorplug.so"
    INTERFACE_INCLUDE_DIRECTORIES "${_tensorplug_prefix}/include"
    INTERFACE_COMPILE_FEATURES cxx_std_17)
endif()
if(NOT TARGET tensorplug::compat_tvm_ffi)
  # Sources written for apache tvm-ffi's C++ API link this instead of tensorplug::tensorplug.
  add_library(tensorplug::compat_tvm_ffi INTERFACE IMPORTED)
  set_target_properties(tensorplug::compat_tvm_ffi PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${_tensorplug_prefix}/include/compat/tvm_ffi"
    INTERFACE_LINK_LIBRARIES tensorplug::tensorplug)
endif()
set(tensorplug_INCLUDE_DIR "${_tensorplug_prefix}/include")
set(tensorplug_COMPAT_TVM_FFI_INCLUDE_DIR "${_tensorplug_prefix}/include/compat/tvm_ffi")
set(tensorplug_LIBRARY "${_tensorplug_prefix}/lib/libtensorplug.so")
file(STRINGS "${tensorplug_INCLUDE_DIR}/tensorplug/c_api.h" _tensorplug_abi
     REGEX "^#define TENSORPLUG_ABI_VERSION [0-9]+$")
string(REGEX REPLACE "^#define TENSORPLUG_ABI_VERSION " "" tensorplug_ABI_VERSION "${_tensorplug_abi}")
set(tensorplug_FOUND TRUE)
unset(_tensorplug_prefix)
unset(_tensorplug_abi)

#[=======================================================================[
tensorplug_add_kernel_library(<target> [DESTINATION <dir>] <source>...)

Adds the kernel library lib<target>.so: a MODULE library (opened with dlopen by
tensorplug.load_module, never linked against) built from C, C++ or CUDA sources, linked to
libtensorplug and to nothing of Python, so one binary serves every CPython version and
every framework version. It gets
- hidden visibility (C, C++, inline functions, and the version script kernel_library.map
  for the C++ standard library's template instantiations): only the symbols that
  TENSORPLUG_EXPORT, TP_EXPORT and c_api.h's ABI record mark are exported;
- --no-undefined: a reference no linked library defines (a stray Python C API call, say)
  fails the link instead of the load;
- with DESTINATION (a directory relative to the install prefix, which is the wheel's root,
  i.e. site-packages, under scikit-build-core): an install rule, and the install runpath
  $ORIGIN/<one ../ per component of DESTINATION>tensorplug/lib, so that the installed
  library finds libtensorplug.so when tensorplug is installed in the same site-packages
  even if it is opened before `import tensorplug`. (Once tensorplug is imported, the loader
  reuses the libtensorplug.so already loaded, matched by its soname, wherever it lies.)
  The build tree keeps CMake's absolute build runpath; install replaces it.
#]=======================================================================]
function(tensorplug_add_kernel_library target)
  cmake_parse_arguments(PARSE_ARGV 1 _tp "" "DESTINATION" "")
  if(NOT _tp_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "tensorplug_add_kernel_library(${target}): no source files given")
  endif()
  add_library(${target} MODULE ${_tp_UNPARSED_ARGUMENTS})
  target_link_libraries(${target} PRIVATE tensorplug::tensorplug)
  # kernel_library.map hides the std:: template instantiations that hidden visibility misses;
  # --exclude-libs a C++ runtime linked statically (docs/shipping.md).
  target_link_options(${target} PRIVATE "LINKER:--no-undefined" "LINKER:--exclude-libs,ALL"
                      "LINKER:--version-script=${CMAKE_CURRENT_FUNCTION_LIST_DIR}/kernel_library.map")
  set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS "${CMAKE_CURRENT_FUNCTION_LIST_DIR}/kernel_library.map")
  set_target_properties(${target} PROPERTIES
    PREFIX "lib"
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden
    CUDA_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    POSITION_INDEPENDENT_CODE ON)
  if(DEFINED _tp_DESTINATION)
    string(REGEX REPLACE "/+$" "" _dest "${_tp_DESTINATION}")
    if(_dest STREQUAL "" OR IS_ABSOLUTE "${_dest}" OR _dest MATCHES "(^|/)\\.\\.?(/|$)")
      message(FATAL_ERROR "tensorplug_add_kernel_library(${target}): DESTINATION must be a relative directory "
                          "inside the install prefix without . or .. components, got '${_tp_DESTINATION}'")
    endif()
    string(REPLACE "/" ";" _components "${_dest}")
    set(_up "")
    foreach(_component IN LISTS _components)
      string(APPEND _up "../")
    endforeach()
    set_target_properties(${target} PROPERTIES INSTALL_RPATH "$ORIGIN/${_up}tensorplug/lib")
    install(TARGETS ${target} LIBRARY DESTINATION "${_dest}")
  endif()
endfunction()
