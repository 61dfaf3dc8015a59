# halogen_unity_build(TARGET): with HALOGEN_UNITY_BUILD, TARGET's C++ files compile in batches
# of 8 per translation unit. A file that must stay alone (it includes a library's header before
# error.hpp so as to get that library's checks) sets SKIP_UNITY_BUILD_INCLUSION.
function(halogen_unity_build target)
  if(HALOGEN_UNITY_BUILD)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 8)
  endif()
endfunction()

# halogen_add_library(NAME SOURCES... [CUDA_SOURCES ...] [DEPS ...])
# One library target per folder, aliased halogen::NAME. CUDA sources are compiled only when
# the build has CUDA; CPU-only builds never see them.
function(halogen_add_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;CUDA_SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  set(srcs ${ARG_SOURCES})
  if(HALOGEN_HAVE_CUDA)
    list(APPEND srcs ${ARG_CUDA_SOURCES})
    # The CUDA path's C++ files include the CUDA headers before error.hpp (for its CUDA checks)
    # and specialise the ops for the device: each stays a translation unit of its own.
    set_source_files_properties(${ARG_CUDA_SOURCES} PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
  endif()
  add_library(halogen_${name} ${srcs})
  halogen_unity_build(halogen_${name})
  add_library(halogen::${name} ALIAS halogen_${name})
  target_include_directories(halogen_${name} PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/include)
  target_link_libraries(halogen_${name} PUBLIC halogen_options ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  if(HALOGEN_HAVE_CUDA)
    set_target_properties(halogen_${name} PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)
  endif()
endfunction()
