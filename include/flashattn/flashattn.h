// flashattn: FlashAttention forward in CUDA C++ with CPU references. Include this header.
#pragma once

#include "flashattn/combine.h"
#include "flashattn/forward.h"
#include "flashattn/params.h"
#include "flashattn/status.h"
#include "flashattn/tensor.h"
#include "flashattn/version.h"
