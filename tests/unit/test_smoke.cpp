#include <gtest/gtest.h>
#include "core/dtype.h"
TEST(Smoke, Bf16RoundTrip) { EXPECT_EQ(magi2::round_bf16(1.0f), 1.0f); }
