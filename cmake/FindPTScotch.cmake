# FindPTScotch: PT-Scotch, the MPI-distributed Scotch (Debian: libptscotch-dev, libscotch-dev).
# halogen calls the native API (ptscotch.h); Scotch's ParMETIS compatibility library is not used
# (see partition/src/ptscotch.cpp for why).
#
# HALOGEN_SCOTCH_INT64 (default ON) selects the build with 64-bit SCOTCH_Num, which holds graphs
# of more than 2^31 - 1 edges. Debian ships it beside the default 32-bit one: headers in
# /usr/include/scotch-int64, libraries in /usr/lib/<arch>/scotch-int64, with the same sonames as
# the 32-bit ones, so the targets below link them by full path and CMake records their folder
# in the run path (and halogen checks SCOTCH_numSizeof() at run time). Without it, or when the
# 64-bit variant is absent (a warning says so), the default build is used.
#
# Defines the imported targets PTScotch::ptscotch, PTScotch::ptscotcherr, PTScotch::scotch,
# PTScotch::scotcherr and PTScotch::PTScotch (all four, the headers and MPI::MPI_C), and
# PTScotch_NUM_BITS (32 or 64, the width of SCOTCH_Num read from scotch.h).
option(HALOGEN_SCOTCH_INT64 "Use PT-Scotch built with 64-bit SCOTCH_Num (Debian scotch-int64)" ON)

set(_ptscotch_libs ptscotch ptscotcherr scotch scotcherr)
if(HALOGEN_SCOTCH_INT64)
  find_path(PTScotch_INT64_INCLUDE_DIR ptscotch.h PATH_SUFFIXES scotch-int64)
  if(PTScotch_INT64_INCLUDE_DIR)
    get_filename_component(_ptscotch_prefix "${PTScotch_INT64_INCLUDE_DIR}/../.." ABSOLUTE)
    foreach(_lib IN LISTS _ptscotch_libs)
      find_library(PTScotch_INT64_${_lib}_LIBRARY ${_lib} NO_DEFAULT_PATH
        PATHS ${_ptscotch_prefix}/lib/${CMAKE_LIBRARY_ARCHITECTURE}/scotch-int64 ${_ptscotch_prefix}/lib/scotch-int64
              ${_ptscotch_prefix}/lib64/scotch-int64)
      mark_as_advanced(PTScotch_INT64_${_lib}_LIBRARY)
    endforeach()
  endif()
  mark_as_advanced(PTScotch_INT64_INCLUDE_DIR)
  set(_ptscotch_variant INT64)
  foreach(_lib IN LISTS _ptscotch_libs)
    if(NOT PTScotch_INT64_${_lib}_LIBRARY)
      set(_ptscotch_variant "")
    endif()
  endforeach()
  if(NOT PTScotch_INT64_INCLUDE_DIR)
    set(_ptscotch_variant "")
  endif()
  if(NOT _ptscotch_variant AND NOT PTScotch_FIND_QUIETLY)
    message(WARNING "HALOGEN_SCOTCH_INT64: no 64-bit PT-Scotch found (Debian: libptscotch-dev's scotch-int64 "
                    "folders); using the default build, which holds at most 2^31 - 1 edges")
  endif()
endif()
# The default build is looked for in any case: with the 64-bit one selected it is only used by
# the test that compares the two (PTScotch::PTScotch32 below).
find_path(PTScotch_DEFAULT_INCLUDE_DIR ptscotch.h PATH_SUFFIXES scotch)
foreach(_lib IN LISTS _ptscotch_libs)
  find_library(PTScotch_DEFAULT_${_lib}_LIBRARY ${_lib})
  mark_as_advanced(PTScotch_DEFAULT_${_lib}_LIBRARY)
endforeach()
mark_as_advanced(PTScotch_DEFAULT_INCLUDE_DIR)
if(NOT _ptscotch_variant)
  set(_ptscotch_variant DEFAULT)
endif()

set(PTScotch_INCLUDE_DIR ${PTScotch_${_ptscotch_variant}_INCLUDE_DIR})
set(PTScotch_LIBRARIES "")
foreach(_lib IN LISTS _ptscotch_libs)
  set(PTScotch_${_lib}_LIBRARY ${PTScotch_${_ptscotch_variant}_${_lib}_LIBRARY})
  list(APPEND PTScotch_LIBRARIES ${PTScotch_${_lib}_LIBRARY})
endforeach()
set(PTScotch_NUM_BITS "")
if(PTScotch_INCLUDE_DIR AND EXISTS "${PTScotch_INCLUDE_DIR}/scotch.h")
  file(STRINGS "${PTScotch_INCLUDE_DIR}/scotch.h" _ptscotch_num REGEX "^typedef .* SCOTCH_Num;")
  if(_ptscotch_num MATCHES "int64_t|long long")
    set(PTScotch_NUM_BITS 64)
  elseif(_ptscotch_num MATCHES "typedef (int|int32_t) SCOTCH_Num")
    set(PTScotch_NUM_BITS 32)
  endif()
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(PTScotch REQUIRED_VARS PTScotch_ptscotch_LIBRARY PTScotch_ptscotcherr_LIBRARY
  PTScotch_scotch_LIBRARY PTScotch_scotcherr_LIBRARY PTScotch_INCLUDE_DIR PTScotch_NUM_BITS)
if(PTScotch_FOUND AND NOT TARGET PTScotch::PTScotch)
  foreach(_lib IN LISTS _ptscotch_libs)
    add_library(PTScotch::${_lib} UNKNOWN IMPORTED)
    set_target_properties(PTScotch::${_lib} PROPERTIES IMPORTED_LOCATION "${PTScotch_${_lib}_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${PTScotch_INCLUDE_DIR}")
  endforeach()
  add_library(PTScotch::PTScotch INTERFACE IMPORTED)
  set_target_properties(PTScotch::PTScotch PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${PTScotch_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES
      "-Wl,--push-state,--no-as-needed;PTScotch::ptscotch;PTScotch::ptscotcherr;PTScotch::scotch;PTScotch::scotcherr;-Wl,--pop-state;MPI::MPI_C")
  # --no-as-needed: every one of the four becomes a direct dependency, found through the run
  # path. Otherwise the linker drops those halogen calls nothing from (the error libraries),
  # and the dynamic loader resolves libptscotch's own need for libptscotcherr-7.0.so in the
  # default folder, i.e. the 32-bit build's (the run path does not apply to a library's needs).
  # The 32-bit default build beside the 64-bit one, for tests/partition's comparison of the two.
  set(_ptscotch32 TRUE)
  foreach(_lib IN LISTS _ptscotch_libs)
    if(NOT PTScotch_DEFAULT_${_lib}_LIBRARY)
      set(_ptscotch32 FALSE)
    endif()
  endforeach()
  if(_ptscotch_variant STREQUAL "INT64" AND _ptscotch32 AND PTScotch_DEFAULT_INCLUDE_DIR)
    set(_ptscotch32_libs "")
    foreach(_lib IN LISTS _ptscotch_libs)
      list(APPEND _ptscotch32_libs "${PTScotch_DEFAULT_${_lib}_LIBRARY}")
    endforeach()
    add_library(PTScotch::PTScotch32 INTERFACE IMPORTED)
    set_target_properties(PTScotch::PTScotch32 PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES "${PTScotch_DEFAULT_INCLUDE_DIR}"
      INTERFACE_LINK_LIBRARIES "${_ptscotch32_libs};MPI::MPI_C")
  endif()
endif()
