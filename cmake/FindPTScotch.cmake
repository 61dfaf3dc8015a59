# FindPTScotch: PT-Scotch, the MPI-distributed Scotch (Debian: libptscotch-dev). Defines
# PTScotch::PTScotch. halogen calls the native API (ptscotch.h); Scotch's ParMETIS
# compatibility library is not used (see partition/src/ptscotch.cpp for why).
find_path(PTScotch_INCLUDE_DIR ptscotch.h PATH_SUFFIXES scotch)
find_library(PTScotch_LIBRARY ptscotch)
find_library(PTScotch_ERR_LIBRARY ptscotcherr)
find_library(Scotch_LIBRARY scotch)
find_library(Scotch_ERR_LIBRARY scotcherr)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(PTScotch DEFAULT_MSG PTScotch_LIBRARY PTScotch_ERR_LIBRARY
  PTScotch_INCLUDE_DIR Scotch_LIBRARY)
if(PTScotch_FOUND AND NOT TARGET PTScotch::PTScotch)
  add_library(PTScotch::PTScotch INTERFACE IMPORTED)
  set_target_properties(PTScotch::PTScotch PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES ${PTScotch_INCLUDE_DIR}
    INTERFACE_LINK_LIBRARIES "${PTScotch_LIBRARY};${PTScotch_ERR_LIBRARY};${Scotch_LIBRARY};${Scotch_ERR_LIBRARY};MPI::MPI_C")
endif()
mark_as_advanced(PTScotch_INCLUDE_DIR PTScotch_LIBRARY PTScotch_ERR_LIBRARY Scotch_LIBRARY Scotch_ERR_LIBRARY)
