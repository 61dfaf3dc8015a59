# Findlibzip: libzip (Debian: libzip-dev); defines libzip::zip.
#
# A find module rather than libzip's own CMake config: Debian's libzip-dev ships a config
# that also imports the zipcmp/zipmerge/ziptool programs, which live in separate packages,
# and that config fails the configure step when they are not installed. Only the library is
# needed (the .npz reader, partition/src/npz_reader.cpp).
find_path(libzip_INCLUDE_DIR zip.h)
find_path(libzip_CONF_INCLUDE_DIR zipconf.h PATHS ${libzip_INCLUDE_DIR} PATH_SUFFIXES libzip/include)
find_library(libzip_LIBRARY zip)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(libzip DEFAULT_MSG libzip_LIBRARY libzip_INCLUDE_DIR libzip_CONF_INCLUDE_DIR)
if(libzip_FOUND AND NOT TARGET libzip::zip)
  add_library(libzip::zip UNKNOWN IMPORTED)
  set_target_properties(libzip::zip PROPERTIES
    IMPORTED_LOCATION ${libzip_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES "${libzip_INCLUDE_DIR};${libzip_CONF_INCLUDE_DIR}")
endif()
mark_as_advanced(libzip_INCLUDE_DIR libzip_CONF_INCLUDE_DIR libzip_LIBRARY)
