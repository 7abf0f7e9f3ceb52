/* tif_config.h for glm5v's build of libtiff 4.7.2 (written for this crate from libtiff's
   tif_config.h.cmake.in with the defaults of libtiff's CMake build on Linux). */
#include "tiffconf.h"
#define CCITT_SUPPORT 1
#define CHECK_JPEG_YCBCR_SUBSAMPLING 1
#define HAVE_ASSERT_H 1
#define HAVE_DECL_OPTARG 1
#define HAVE_FCNTL_H 1
#define HAVE_FSEEKO 1
#define HAVE_MMAP 1
#define HAVE_STRINGS_H 1
#define HAVE_SYS_TYPES_H 1
#define HAVE_UNISTD_H 1
#define LZMA_SUPPORT 1
#define PACKAGE "LibTIFF Software"
#define PACKAGE_BUGREPORT "tiff@lists.osgeo.org"
#define PACKAGE_NAME "LibTIFF Software"
#define PACKAGE_TARNAME "tiff"
#define PACKAGE_URL ""
#define SIZEOF_SIZE_T 8
#define STRIP_SIZE_DEFAULT 8192
#define TIFF_MAX_DIR_COUNT 1048576
#define WORDS_BIGENDIAN 0
#define TIFF_SIZE_FORMAT "zu"
#define TIFF_SSIZE_FORMAT PRId64
