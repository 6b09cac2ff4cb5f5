// The one include point of the vendored cpp-httplib (see third_party/README.md); its warnings are not ours.
#pragma once
#pragma GCC system_header

#include "server/third_party/httplib.h"
