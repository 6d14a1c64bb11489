// SPDX-License-Identifier: MIT
// The CPU loops (health.cpp, compare/blockdiff.cpp) are built once more for AVX2 where the
// compiler can, the variant chosen at load time. Not under a sanitizer: its instrumented ifunc
// resolvers run before its runtime is up.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) &&                             \
    !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
#define SS_CPU_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define SS_CPU_CLONES
#endif
