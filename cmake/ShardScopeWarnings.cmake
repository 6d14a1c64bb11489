# Warnings for our own C++ only (never for libtorch's headers: they are SYSTEM includes).
function(shardscope_warnings target)
  set(flags -Wall -Wextra -Wshadow=local -Wnon-virtual-dtor -Wno-missing-field-initializers)
  if(SHARDSCOPE_WERROR)
    list(APPEND flags -Werror)
  endif()
  target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:${flags}>")
endfunction()
