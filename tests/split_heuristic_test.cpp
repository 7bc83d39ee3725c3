// The automatic split count (runtime/compiled_kernel.cpp), on the shapes it was tuned on: an
// H200's 132 SMs (one CTA slot per SM, see choose_num_splits).
#include <gtest/gtest.h>

#include "runtime/compiled_kernel.hpp"

using jit::detail::choose_num_splits;

TEST(SplitHeuristic, FillsTheSlotsForDecode) {
  // B 8 x 8 KV heads, 32768 keys in 64-key tiles: 2 splits = 128 CTAs on 132 SMs.
  EXPECT_EQ(choose_num_splits(64, 512, 132), 2);
  // One sequence of 131072 keys: 16 splits = 128 CTAs (15 would fill 91%).
  EXPECT_EQ(choose_num_splits(8, 2048, 132), 16);
  // Twice the slots: twice the splits for the same fill.
  EXPECT_EQ(choose_num_splits(64, 512, 264), 4);
}

TEST(SplitHeuristic, LeavesFullGridsAndShortKeysAlone) {
  EXPECT_EQ(choose_num_splits(512, 64, 132), 1);  // B 64 x 8 heads already fills the GPU
  EXPECT_EQ(choose_num_splits(106, 512, 132), 1);  // >= 80% of the slots
  EXPECT_EQ(choose_num_splits(8, 3, 132), 1);      // fewer than 4 KV tiles
  EXPECT_EQ(choose_num_splits(8, 10, 132), 5);     // at least two KV tiles per split
}
