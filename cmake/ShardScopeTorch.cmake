# libtorch from the pinned PyPI wheel (or any torch install), as one imported target.
#
# We do not use the wheel's TorchConfig.cmake: for the CUDA wheel it insists on a CUDA toolkit
# even when we only need the CPU libraries, which would break CPU-only machines. The wheel's
# layout is stable: torch/include, torch/include/torch/csrc/api/include, torch/lib.
# Input: CMAKE_PREFIX_PATH containing <site-packages>/torch/share/cmake (what
# torch.utils.cmake_prefix_path prints), or TORCH_ROOT=<site-packages>/torch.
if(NOT TORCH_ROOT)
  foreach(p IN LISTS CMAKE_PREFIX_PATH)
    if(EXISTS "${p}/../../include/ATen/ATen.h")
      get_filename_component(TORCH_ROOT "${p}/../.." ABSOLUTE)
      break()
    endif()
  endforeach()
endif()
if(NOT TORCH_ROOT OR NOT EXISTS "${TORCH_ROOT}/include/ATen/ATen.h")
  message(FATAL_ERROR "libtorch not found: pass -DCMAKE_PREFIX_PATH=$(python -c 'import torch;"
    "print(torch.utils.cmake_prefix_path)') or -DTORCH_ROOT=<site-packages>/torch (./dev does this)")
endif()
set(TORCH_ROOT "${TORCH_ROOT}" CACHE PATH "torch package directory (headers and lib/)")

add_library(shardscope_torch INTERFACE)
add_library(ShardScope::torch ALIAS shardscope_torch)
target_include_directories(shardscope_torch SYSTEM INTERFACE
  "${TORCH_ROOT}/include" "${TORCH_ROOT}/include/torch/csrc/api/include")
target_compile_definitions(shardscope_torch INTERFACE _GLIBCXX_USE_CXX11_ABI=1)
foreach(lib torch_cpu c10)
  find_library(SHARDSCOPE_LIB_${lib} NAMES ${lib} PATHS "${TORCH_ROOT}/lib" NO_DEFAULT_PATH REQUIRED)
  target_link_libraries(shardscope_torch INTERFACE ${SHARDSCOPE_LIB_${lib}})
endforeach()
# ProcessGroupNCCL lives in libtorch_cuda (with c10_cuda), present in CUDA wheels only; NCCL's
# nccl.h comes with the wheel's nvidia-nccl package. ShardScope::torchCuda exists when all three
# are found; the backend links it in CUDA builds only.
find_library(SHARDSCOPE_LIB_torch_cuda NAMES torch_cuda PATHS "${TORCH_ROOT}/lib" NO_DEFAULT_PATH)
find_library(SHARDSCOPE_LIB_c10_cuda NAMES c10_cuda PATHS "${TORCH_ROOT}/lib" NO_DEFAULT_PATH)
find_path(SHARDSCOPE_NCCL_INCLUDE_DIR nccl.h
  HINTS "${TORCH_ROOT}/../nvidia/nccl/include" PATHS /usr/local/cuda/include)
if(SHARDSCOPE_LIB_torch_cuda AND SHARDSCOPE_LIB_c10_cuda AND SHARDSCOPE_NCCL_INCLUDE_DIR)
  add_library(shardscope_torch_cuda INTERFACE)
  add_library(ShardScope::torchCuda ALIAS shardscope_torch_cuda)
  target_link_libraries(shardscope_torch_cuda INTERFACE
    ShardScope::torch ${SHARDSCOPE_LIB_torch_cuda} ${SHARDSCOPE_LIB_c10_cuda})
endif()
# The wheel's libraries find each other through their own RUNPATH; ours need torch/lib.
set(CMAKE_BUILD_RPATH "${TORCH_ROOT}/lib")
set(CMAKE_INSTALL_RPATH "${TORCH_ROOT}/lib")
message(STATUS "libtorch: ${TORCH_ROOT}")
