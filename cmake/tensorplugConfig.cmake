# find_package(tensorplug CONFIG) -> imported target tensorplug::tensorplug
# Located at <package>/share/cmake/tensorplug; `tensorplug config --cmakedir` prints it.
get_filename_component(_tensorplug_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
if(NOT TARGET tensorplug::tensorplug)
  add_library(tensorplug::tensorplug SHARED IMPORTED)
  set_target_properties(tensorplug::tensorplug PROPERTIES
    IMPORTED_LOCATION "${_tensorplug_prefix}/lib/libtensorplug.so"
    INTERFACE_INCLUDE_DIRECTORIES "${_tensorplug_prefix}/include"
    INTERFACE_COMPILE_FEATURES cxx_std_17)
endif()
set(tensorplug_INCLUDE_DIR "${_tensorplug_prefix}/include")
set(tensorplug_LIBRARY "${_tensorplug_prefix}/lib/libtensorplug.so")
set(tensorplug_FOUND TRUE)
unset(_tensorplug_prefix)
