// DSPTRAIN_CLONES: let GCC build a function for AVX-512, AVX2 and baseline x86-64 and pick one
// at load time, so element-wise loops vectorise on every CPU without a per-ISA source file.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define DSPTRAIN_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define DSPTRAIN_CLONES
#endif
