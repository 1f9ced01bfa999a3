// Architecture guards for the sm_90 primitives. Device code is compiled once per entry of
// FLASHATTN_CUDA_ARCHS ("80;90a"): the sm_80 pass must not see sm_90 PTX, and wgmma and
// setmaxnreg exist only on the sm_90a target (nvcc defines __CUDA_ARCH_FEAT_SM90_ALL there and
// nowhere else: not for sm_90, not for sm_100).
//   FA_SM90_PTX    TMA, mbarrier tx-counts and try_wait, stmatrix, elect.sync,
//                  fence.proxy.async: sm_90 and later
//   FA_SM90A_PTX   wgmma, setmaxnreg: sm_90a only
// A wrapper compiled where its instruction does not exist traps instead, so a kernel launched on
// the wrong image fails loudly rather than computing garbage; kernels guard their own bodies with
// the same macros so that such wrappers are never reached.
#pragma once

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define FA_SM90_PTX 1
#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FA_SM90A_PTX 1
#endif
