# C++20 for CUDA sources on CMake 3.25 (Debian 12): its nvcc dialect table stops at C++17, so
# CUDA_STANDARD 20 is refused ("requires the language dialect CUDA20"), and a target that passed
# -std=c++20 by hand still got CMake's -std=c++17 after it (nvcc takes the last one). Declare the
# missing entry; newer CMake versions that know it are left alone. Include after
# enable_language(CUDA); targets then set CUDA_STANDARD 20 (kernels/cuda: gemma_cuda_cxx20).
if(NOT "cuda_std_20" IN_LIST CMAKE_CUDA_COMPILE_FEATURES)
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_COMPILE_FEATURES cuda_std_20)
  list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
endif()
