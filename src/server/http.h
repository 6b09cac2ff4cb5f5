// The one include point of the vendored cpp-httplib (see third_party/README.md); its warnings are not ours.
#pragma once
#pragma GCC system_header

// A request line or header line may be this long (the library's default is 32 KiB): longer URIs are then
// read whole and answered 414 (URIs over 8 KiB) instead of a silent close.
#define CPPHTTPLIB_MAX_LINE_LENGTH (256 * 1024)
#include "server/third_party/httplib.h"
