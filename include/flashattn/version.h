#pragma once

#define FLASHATTN_VERSION_MAJOR 0
#define FLASHATTN_VERSION_MINOR 1
#define FLASHATTN_VERSION_PATCH 0

namespace flashattn {
constexpr const char* kVersion = "0.1.0";
}  // namespace flashattn
