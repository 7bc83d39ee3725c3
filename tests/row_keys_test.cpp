// mask::span_bits (common/row_keys.h): which keys of a 32-key span a row sees when its visible keys
// are one interval, as sm100a's visibility words take them (sm100a/softmax.cuh visible_bits).
// Compiled here by the host compiler exactly as the kernels compile it, and checked against the
// key-by-key definition for every pair of bounds from well below the span to well past it.
#include <gtest/gtest.h>

#include "common/row_keys.h"

namespace {

using fa4::mask::span_bits;

TEST(RowKeys, SpanBitsHoldExactlyTheKeysInsideTheInterval) {
  for (int lo = -40; lo <= 72; ++lo)
    for (int hi = -40; hi <= 72; ++hi) {
      unsigned want = 0;
      for (int j = 0; j < 32; ++j)
        if (j >= lo && j < hi) want |= 1u << j;
      ASSERT_EQ(span_bits(lo, hi), want) << "keys [" << lo << ", " << hi << ")";
    }
}

TEST(RowKeys, SpanBitsAtTheWordsEdges) {
  EXPECT_EQ(span_bits(0, 32), ~0u);    // the whole span (no shift by 32)
  EXPECT_EQ(span_bits(-5, 100), ~0u);  // an interval past both ends
  EXPECT_EQ(span_bits(31, 32), 0x80000000u);
  EXPECT_EQ(span_bits(32, 40), 0u);  // starts past the span
  EXPECT_EQ(span_bits(7, 7), 0u);    // empty
  EXPECT_EQ(span_bits(9, 3), 0u);    // empty, reversed
  EXPECT_EQ(span_bits(-3, 4), 0xfu);
}

}  // namespace
