# CPack pre-build script (CPACK_PRE_BUILD_SCRIPTS): runs on the staged files after CPack installed
# them and before it packs them. Refuses to make a package whose programs would not start on a
# user's machine: a program that needs the NVIDIA driver (libcuda, libnvidia-*) or a shared CUDA
# library (libcudart, libcublas, libcublasLt) at load time. Those come from NVIDIA's installer, not
# from a Debian package, so dpkg-shlibdeps cannot declare them (CPack passes --ignore-missing-info
# and would silently make a broken package). installer/README.md says what to link instead.
set(_staged "${CPACK_TEMPORARY_INSTALL_DIRECTORY}")
if(NOT _staged OR NOT IS_DIRECTORY "${_staged}")
  set(_staged "${CPACK_TEMPORARY_DIRECTORY}")
endif()
find_program(_objdump objdump)
if(NOT _objdump)
  message(WARNING "CheckStaged: objdump not found (binutils); the CUDA link check did not run")
  return()
endif()
file(GLOB_RECURSE _programs LIST_DIRECTORIES false "${_staged}/*/bin/*" "${_staged}/bin/*")
set(_problems "")
foreach(_program IN LISTS _programs)
  execute_process(COMMAND ${_objdump} -p "${_program}" OUTPUT_VARIABLE _headers ERROR_QUIET RESULT_VARIABLE _status)
  if(NOT _status EQUAL 0)
    continue()  # not an ELF file
  endif()
  string(REGEX MATCHALL "NEEDED +[^\n]+" _needed "${_headers}")
  foreach(_entry IN LISTS _needed)
    string(REGEX REPLACE "NEEDED +" "" _library "${_entry}")
    if(_library MATCHES "^(libcuda\\.|libcudart|libcublas|libnvidia)")
      get_filename_component(_name "${_program}" NAME)
      string(APPEND _problems "  ${_name} needs ${_library}\n")
    endif()
  endforeach()
endforeach()
if(_problems)
  message(FATAL_ERROR
    "Packaging refused: these programs need NVIDIA libraries that a user's machine does not have:\n"
    "${_problems}"
    "Link the CUDA runtime statically (CUDA::cudart_static, not CUDA::cudart), never link the driver "
    "(CUDA::cuda_driver), and load cuBLASLt at run time with dlopen where a shipped program uses it "
    "(installer/README.md, \"CUDA\").")
endif()
message(STATUS "CheckStaged: no program needs the NVIDIA driver or a shared CUDA library")
