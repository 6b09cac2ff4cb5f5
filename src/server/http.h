// The one include point of cpp-httplib (Debian's libcpp-httplib-dev, linked as a shared library); its
// warnings are not ours.
#pragma once
#pragma GCC system_header

#include <httplib.h>
