# Packaging: what `cpack` (or `cmake --install`) puts into the DEB and TGZ packages, and the CPack
# settings. Included once, at the very end of the top-level CMakeLists.txt, when every target exists:
#
#   include(${PROJECT_SOURCE_DIR}/installer/Packaging.cmake OPTIONAL)
#
# The programs install themselves (install(TARGETS) beside each target); this file adds the rest:
# the embedded default model, the desktop entry, icons, AppStream metainfo, man pages, the Debian
# copyright and changelog, and registers tests/installer (builds the packages, installs them into
# fresh roots and runs them). installer/README.md explains the choices.
#
# Layout (relative to the prefix: /usr in the DEB, the archive's top folder in the TGZ):
#   bin/gemma-desk gemma-cli gemma-quantize [gemma-bench]
#   share/gemma-desk/models/default.gemma           (programs look at <exe dir>/../share/gemma-desk/...)
#   share/applications/io.github.gemmadesk.GemmaDesk.desktop
#   share/metainfo/io.github.gemmadesk.GemmaDesk.metainfo.xml
#   share/icons/hicolor/<N>x<N>/apps/io.github.gemmadesk.GemmaDesk.png, scalable/apps/....svg
#   share/man/man1/<program>.1.gz
#   share/doc/gemma-desk/copyright, changelog.gz
# Nothing is installed outside the prefix; there are no maintainer scripts and no conffiles, so
# installing, upgrading or removing the package never touches anyone's data folder.
include_guard(GLOBAL)
include(GNUInstallDirs)

set(GEMMA_APP_ID "io.github.gemmadesk.GemmaDesk")
set(GEMMA_PACKAGE_NAME "gemma-desk")
set(GEMMA_PACKAGE_MAINTAINER "Gemma Desk developers <gemma-desk@users.noreply.github.com>"
    CACHE STRING "Maintainer field of the DEB (name <address>)")
set(GEMMA_PACKAGE_LICENSE "" CACHE STRING
    "SPDX id of the project's licence for the copyright file (empty: not chosen yet)")
option(GEMMA_PACKAGE_TESTS "Register the package tests (tests/installer, CTest label 'installer')" ON)

set(_gemma_pkg_src ${CMAKE_CURRENT_LIST_DIR})
set(_gemma_pkg_gen ${CMAKE_BINARY_DIR}/installer)
set(_gemma_pkg_doc ${CMAKE_INSTALL_DATADIR}/doc/${GEMMA_PACKAGE_NAME})
file(MAKE_DIRECTORY ${_gemma_pkg_gen}/man)

# Files are compressed at configure time with `gzip -9n` (no name, no timestamp: reproducible, and
# what lintian expects). configure_file() makes CMake re-run when a source changes.
find_program(GEMMA_GZIP gzip)
function(_gemma_gzip input output)
  if(NOT GEMMA_GZIP)
    message(FATAL_ERROR "Packaging: gzip not found (Debian: apt-get install gzip)")
  endif()
  execute_process(COMMAND ${GEMMA_GZIP} -9nc ${input} OUTPUT_FILE ${output} RESULT_VARIABLE result)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "Packaging: gzip ${input} failed: ${result}")
  endif()
endfunction()

# ---- Programs -------------------------------------------------------------------------------------
# Each program installs itself (install(TARGETS ... DESTINATION bin) beside its add_executable);
# gemma-bench exists only in CUDA builds. tests/installer fails if one of these is not packaged.
set(GEMMA_PACKAGED_PROGRAMS "")
foreach(_program gemma-desk gemma-cli gemma-quantize gemma-bench)
  if(TARGET ${_program})
    list(APPEND GEMMA_PACKAGED_PROGRAMS ${_program})
  endif()
endforeach()

# The release date of the newest entry in the AppStream metainfo dates the man pages (not the
# configure time: the same source gives the same package).
file(STRINGS ${_gemma_pkg_src}/${GEMMA_APP_ID}.metainfo.xml _gemma_release_lines REGEX "<release ")
list(GET _gemma_release_lines 0 _gemma_release_line)
string(REGEX MATCH "version=\"([^\"]+)\"" _ "${_gemma_release_line}")
set(GEMMA_METAINFO_VERSION "${CMAKE_MATCH_1}")
string(REGEX MATCH "date=\"([0-9-]+)\"" _ "${_gemma_release_line}")
set(GEMMA_MAN_DATE "${CMAKE_MATCH_1}")
string(SUBSTRING "${GEMMA_MAN_DATE}" 0 4 _gemma_release_year)
if(NOT GEMMA_METAINFO_VERSION STREQUAL PROJECT_VERSION)
  message(WARNING "Packaging: the newest <release> in installer/${GEMMA_APP_ID}.metainfo.xml is "
                  "${GEMMA_METAINFO_VERSION}, the project is ${PROJECT_VERSION}: add a release entry there "
                  "and in installer/changelog (tests/installer fails until they agree).")
endif()

# ---- Man pages (hand-written roff in installer/man; one per installed program) -----------------
foreach(_program IN LISTS GEMMA_PACKAGED_PROGRAMS)
  set(_page ${_gemma_pkg_src}/man/${_program}.1.in)
  if(NOT EXISTS ${_page})
    message(WARNING "Packaging: no man page installer/man/${_program}.1.in for ${_program}")
    continue()
  endif()
  configure_file(${_page} ${_gemma_pkg_gen}/man/${_program}.1 @ONLY)
  _gemma_gzip(${_gemma_pkg_gen}/man/${_program}.1 ${_gemma_pkg_gen}/man/${_program}.1.gz)
  install(FILES ${_gemma_pkg_gen}/man/${_program}.1.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
endforeach()

# ---- Desktop integration (only with the desktop app) ---------------------------------------------
if(TARGET gemma-desk)
  install(FILES ${_gemma_pkg_src}/${GEMMA_APP_ID}.desktop DESTINATION ${CMAKE_INSTALL_DATADIR}/applications)
  install(FILES ${_gemma_pkg_src}/${GEMMA_APP_ID}.metainfo.xml DESTINATION ${CMAKE_INSTALL_DATADIR}/metainfo)
  foreach(_size 16 22 24 32 48 64 128 256 512)
    install(FILES ${_gemma_pkg_src}/icons/hicolor/${_size}x${_size}/${GEMMA_APP_ID}.png
            DESTINATION ${CMAKE_INSTALL_DATADIR}/icons/hicolor/${_size}x${_size}/apps)
  endforeach()
  install(FILES ${_gemma_pkg_src}/icons/${GEMMA_APP_ID}.svg
          DESTINATION ${CMAKE_INSTALL_DATADIR}/icons/hicolor/scalable/apps)
endif()

# ---- The embedded default model ------------------------------------------------------------------
# Installed only when the file exists at configure time. Re-run CMake after adding it (the models
# folder is a configure dependency when it exists, so a build picks a new file up by itself).
set(GEMMA_PACKAGED_MODEL "${PROJECT_SOURCE_DIR}/resources/models/default.gemma" CACHE FILEPATH
    "The model installed as share/gemma-desk/models/default.gemma (when the file exists)")
set(GEMMA_PACKAGE_HAS_MODEL OFF)
if(IS_DIRECTORY ${PROJECT_SOURCE_DIR}/resources/models)
  set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
               ${PROJECT_SOURCE_DIR}/resources/models)
endif()
if(EXISTS ${GEMMA_PACKAGED_MODEL})
  set(GEMMA_PACKAGE_HAS_MODEL ON)
  install(FILES ${GEMMA_PACKAGED_MODEL} DESTINATION ${CMAKE_INSTALL_DATADIR}/gemma-desk/models
          RENAME default.gemma)
  message(STATUS "Packaging: the default model is packaged (${GEMMA_PACKAGED_MODEL})")
else()
  message(STATUS "Packaging: no ${GEMMA_PACKAGED_MODEL}; packages will not contain a default model")
endif()

# ---- Debian copyright and changelog (also in the TGZ, under share/doc/gemma-desk) ----------------
function(_gemma_as_dep5_text file out)  # a text file as a DEP-5 license body: " line", " ." for blanks
  file(STRINGS ${file} _lines)
  set(_body "")
  foreach(_line IN LISTS _lines)
    string(STRIP "${_line}" _stripped)
    if(_stripped STREQUAL "")
      string(APPEND _body " .\n")
    else()
      string(APPEND _body " ${_line}\n")
    endif()
  endforeach()
  while(_body MATCHES " \\.\n$")  # no trailing blank lines
    string(REGEX REPLACE " \\.\n$" "" _body "${_body}")
  endwhile()
  string(REGEX REPLACE "\n$" "" _body "${_body}")
  set(${out} "${_body}" PARENT_SCOPE)
endfunction()

set(GEMMA_COPYRIGHT_YEARS ${_gemma_release_year})
if(GEMMA_PACKAGE_LICENSE)
  if(EXISTS ${PROJECT_SOURCE_DIR}/LICENSE)
    _gemma_as_dep5_text(${PROJECT_SOURCE_DIR}/LICENSE GEMMA_PACKAGE_LICENSE_TEXT)
  else()
    set(GEMMA_PACKAGE_LICENSE_TEXT " See the LICENSE file of the Gemma Desk source.")
  endif()
else()
  set(GEMMA_PACKAGE_LICENSE "LicenseRef-not-yet-chosen")
  set(GEMMA_PACKAGE_LICENSE_TEXT
      " The Gemma Desk project has not chosen a licence yet; until it does, all rights\n are reserved by its authors.")
endif()
set(GEMMA_MODEL_PARAGRAPH "")
set(GEMMA_DATA_LICENSE_PARAGRAPH "")
if(GEMMA_PACKAGE_HAS_MODEL)
  set(GEMMA_MODEL_PARAGRAPH
      "\nFiles: usr/share/gemma-desk/models/*\nCopyright: ${GEMMA_COPYRIGHT_YEARS} Gemma Desk developers (the demo model)\n 2006 Princeton University (WordNet 3.0, its training data)\nLicense: ${GEMMA_PACKAGE_LICENSE} and WordNet-3.0\nComment: A small Gemma 4 model trained by the project on conversations made\n from WordNet 3.0 definitions (tools/prepare_corpus.py, tools/train_demo.py).\n")
  if(EXISTS ${PROJECT_SOURCE_DIR}/resources/models/LICENSE-DATA.txt)
    _gemma_as_dep5_text(${PROJECT_SOURCE_DIR}/resources/models/LICENSE-DATA.txt _gemma_data_text)
  else()
    set(_gemma_data_text " The WordNet 3.0 licence of Princeton University, at\n https://wordnet.princeton.edu/license-and-commercial-use")
  endif()
  set(GEMMA_DATA_LICENSE_PARAGRAPH "\nLicense: WordNet-3.0\n${_gemma_data_text}")
endif()
if(GEMMA_HAVE_CUDA)
  set(GEMMA_CUDA_NOTICE "\n The programs contain the CUDA runtime, linked statically as Attachment A of\n the CUDA Toolkit EULA permits.")
else()
  set(GEMMA_CUDA_NOTICE "\n This build has no CUDA engine.")
endif()
configure_file(${_gemma_pkg_src}/copyright.in ${_gemma_pkg_gen}/copyright @ONLY)
configure_file(${_gemma_pkg_src}/changelog ${_gemma_pkg_gen}/changelog COPYONLY)
_gemma_gzip(${_gemma_pkg_gen}/changelog ${_gemma_pkg_gen}/changelog.gz)
install(FILES ${_gemma_pkg_gen}/copyright ${_gemma_pkg_gen}/changelog.gz DESTINATION ${_gemma_pkg_doc})

# ---- CUDA: static runtime, no cuBLASLt, never the driver (installer/README.md) --------------------
# libcuda.so (the driver) must never be a link dependency: the static CUDA runtime loads it with
# dlopen, so the installed programs start on machines without an NVIDIA driver and run on the CPU.
# The shared libcudart/libcublasLt come from NVIDIA's installer, not from a Debian package, so
# dpkg-shlibdeps cannot declare them and users would not have them: link them statically / not at all.
# This configure-time look at the link lines is an early hint; installer/CheckStaged.cmake enforces
# it on the staged binaries when CPack runs.
if(GEMMA_HAVE_CUDA)
  foreach(_target gemma_kernels_cuda gemma_engine ${GEMMA_PACKAGED_PROGRAMS})
    if(TARGET ${_target})
      get_target_property(_links ${_target} LINK_LIBRARIES)
      get_target_property(_interface ${_target} INTERFACE_LINK_LIBRARIES)
      foreach(_lib IN LISTS _links _interface)
        if(_lib MATCHES "^CUDA::(cudart|cublasLt|cublas|cuda_driver)$")
          message(WARNING "Packaging: ${_target} links ${_lib}, a shared NVIDIA library users do not "
                          "have. Shipped programs need CUDA::cudart_static, and cuBLASLt loaded with "
                          "dlopen (installer/README.md); cpack refuses to pack them until then.")
        endif()
      endforeach()
    endif()
  endforeach()
endif()

# ---- CPack ----------------------------------------------------------------------------------------
set(CPACK_PACKAGE_NAME ${GEMMA_PACKAGE_NAME})
set(CPACK_PACKAGE_VENDOR "Gemma Desk")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "${GEMMA_PACKAGE_MAINTAINER}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "desktop chat with Gemma 4 language models")
set(CPACK_PACKAGE_DESCRIPTION
    "Gemma Desk is a desktop chat application with its own inference engine for
Google's Gemma 4 language models. It converts a Gemma 4 checkpoint once into a
compact package with 4-bit weights and chats with it offline, while a live
panel shows where each decode step spends its time.

The engine runs on an NVIDIA GPU when the program was built with CUDA and a
driver is present, and on the CPU otherwise. A small demo model is included.

The package also contains the command-line tools gemma-cli (generate text
from a model) and gemma-quantize (convert a Hugging Face checkpoint).")
if(GEMMA_HAVE_CUDA)
  set(_gemma_variant cuda)
else()
  set(_gemma_variant cpu)
endif()
string(TOLOWER "${CMAKE_SYSTEM_NAME}-${CMAKE_SYSTEM_PROCESSOR}" _gemma_platform)
set(CPACK_PACKAGE_FILE_NAME "${GEMMA_PACKAGE_NAME}-${PROJECT_VERSION}-${_gemma_platform}-${_gemma_variant}")
set(CPACK_GENERATOR "DEB;TGZ")
set(CPACK_PACKAGE_CHECKSUM SHA256)
set(CPACK_STRIP_FILES ON)
set(CPACK_THREADS 0)
set(CPACK_INSTALL_DEFAULT_DIRECTORY_PERMISSIONS
    OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
set(CPACK_SOURCE_GENERATOR "")
# Refuse to pack programs that need the NVIDIA driver or a shared CUDA library (CheckStaged.cmake).
set(CPACK_PRE_BUILD_SCRIPTS ${_gemma_pkg_src}/CheckStaged.cmake)

# DEB: dependencies come from the binaries (dpkg-shlibdeps); Qt plugins loaded at run time are not
# link dependencies, so the SQLite driver the conversation store needs is declared by hand.
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${GEMMA_PACKAGE_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_COMPRESSION_TYPE xz)
if(TARGET gemma-desk)
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "libqt6sql6-sqlite")
  set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "qt6-qpa-plugins, qt6-wayland")
endif()
# cuBLASLt is declared, not shipped (540 MB): gemma-bench loads it at run time when present. The name
# is NVIDIA's CUDA repository package for this toolkit's major.minor.
if(TARGET gemma-bench AND DEFINED CUDAToolkit_VERSION_MAJOR)
  set(CPACK_DEBIAN_PACKAGE_SUGGESTS "libcublas-${CUDAToolkit_VERSION_MAJOR}-${CUDAToolkit_VERSION_MINOR}")
endif()

# TGZ: one top folder (gemma-desk-<version>-linux-<arch>-<variant>/bin, share); runs where unpacked.
set(CPACK_ARCHIVE_COMPONENT_INSTALL OFF)
set(CPACK_INCLUDE_TOPLEVEL_DIRECTORY ON)
include(CPack)

# ---- Tests -----------------------------------------------------------------------------------------
if(GEMMA_PACKAGE_TESTS AND EXISTS ${PROJECT_SOURCE_DIR}/tests/installer/CMakeLists.txt)
  add_subdirectory(${PROJECT_SOURCE_DIR}/tests/installer ${CMAKE_BINARY_DIR}/tests/installer)
endif()
