#include "gpu_test_util.h"

namespace di::gputest {

Backends& backends() {
    static Backends b;
    return b;
}

}  // namespace di::gputest
