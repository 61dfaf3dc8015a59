# FindPTScotch: PT-Scotch and its ParMETIS v3 compatibility library (Debian:
# libptscotch-dev). Defines PTScotch::PTScotch and PTScotch::ParMETIS. Debian ships the
# library without a parmetis.h; halogen declares the one entry point it uses itself.
find_path(PTScotch_INCLUDE_DIR ptscotch.h PATH_SUFFIXES scotch)
find_library(PTScotch_LIBRARY ptscotch)
find_library(PTScotch_ERR_LIBRARY ptscotcherr)
find_library(PTScotch_PARMETIS_LIBRARY ptscotchparmetisv3)
find_library(Scotch_LIBRARY scotch)
find_library(Scotch_ERR_LIBRARY scotcherr)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(PTScotch DEFAULT_MSG PTScotch_LIBRARY PTScotch_PARMETIS_LIBRARY
  PTScotch_INCLUDE_DIR Scotch_LIBRARY)
if(PTScotch_FOUND AND NOT TARGET PTScotch::PTScotch)
  add_library(PTScotch::PTScotch INTERFACE IMPORTED)
  set_target_properties(PTScotch::PTScotch PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES ${PTScotch_INCLUDE_DIR}
    INTERFACE_LINK_LIBRARIES "${PTScotch_LIBRARY};${PTScotch_ERR_LIBRARY};${Scotch_LIBRARY};${Scotch_ERR_LIBRARY};MPI::MPI_C")
  add_library(PTScotch::ParMETIS INTERFACE IMPORTED)
  set_target_properties(PTScotch::ParMETIS PROPERTIES
    INTERFACE_LINK_LIBRARIES "${PTScotch_PARMETIS_LIBRARY};PTScotch::PTScotch")
endif()
mark_as_advanced(PTScotch_INCLUDE_DIR PTScotch_LIBRARY PTScotch_ERR_LIBRARY PTScotch_PARMETIS_LIBRARY
  Scotch_LIBRARY Scotch_ERR_LIBRARY)
