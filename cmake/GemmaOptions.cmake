# Toolchain discovery and project-wide flags. Included once from the top-level CMakeLists.txt.

# ---- CUDA: optional. Without a toolkit everything but the CUDA backend still builds. ----------
set(GEMMA_HAVE_CUDA OFF)
if(GEMMA_ENABLE_CUDA)
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # RTX 40 (sm_89), Hopper (sm_90), RTX 50 (sm_120) as machine code, plus PTX for newer parts.
      set(CMAKE_CUDA_ARCHITECTURES 89-real 90-real 120-real 120-virtual)
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    include(${CMAKE_CURRENT_LIST_DIR}/CudaCxx20.cmake)
    set(GEMMA_HAVE_CUDA ON)
  endif()
endif()
message(STATUS "Gemma Desk: CUDA backend ${GEMMA_HAVE_CUDA}")

# ---- Libraries the engine needs (Debian: libsentencepiece-dev nlohmann-json3-dev libspdlog-dev).
find_package(nlohmann_json 3.10 REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(SENTENCEPIECE REQUIRED IMPORTED_TARGET sentencepiece)
find_package(Threads REQUIRED)

# ---- Qt 6: optional; the desktop app and its tests build only where it is found. ------------
set(GEMMA_HAVE_QT OFF)
if(GEMMA_BUILD_UI)
  find_package(Qt6 6.4 QUIET COMPONENTS Core Gui Widgets Charts Sql Test)
  if(Qt6_FOUND)
    set(GEMMA_HAVE_QT ON)
    find_package(spdlog REQUIRED)
  endif()
endif()
message(STATUS "Gemma Desk: Qt desktop app ${GEMMA_HAVE_QT}")

# ---- Warnings and sanitizers -------------------------------------------------------------------
add_library(gemma_warnings INTERFACE)
target_compile_options(gemma_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion>)
if(GEMMA_SANITIZE)
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=undefined>)
  add_link_options(-fsanitize=address,undefined)
endif()
