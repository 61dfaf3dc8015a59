// "Did you mean": the edit distance and the choice of suggestions for a mistyped option or
// subcommand.
#include <gtest/gtest.h>

#include "suggest.hpp"

namespace halogen::cli {
namespace {

using Names = std::vector<std::string>;

TEST(EditDistance, CountsEditsAndAdjacentSwapsAsOne) {
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("abc", ""), 3u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("train", "train"), 0u);
  EXPECT_EQ(edit_distance("trian", "train"), 1u);  // a swap, not two substitutions
  EXPECT_EQ(edit_distance("hiden", "hidden"), 1u);
  EXPECT_EQ(edit_distance("hiddden", "hidden"), 1u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("ca", "abc"), 3u);  // optimal string alignment: no edit of a swapped pair
  EXPECT_EQ(edit_distance("abcd", "badc"), 2u);
}

// Words like subcommand names; the program's own list is the table in main.cpp, whose
// suggestions e2e_errors checks end to end.
const Names kWords = {"generate", "partition", "train", "evaluate", "export-model", "slurm", "sweep", "plan"};
const Names kOptions = {"--hidden", "--epochs", "--lr", "--layers", "--bits-fwd", "--bits-bwd", "--seed", "--help"};

TEST(Suggest, TyposAndTranspositions) {
  EXPECT_EQ(suggest("trian", kWords), Names{"train"});
  EXPECT_EQ(suggest("partiton", kWords), Names{"partition"});
  EXPECT_EQ(suggest("evalute", kWords), Names{"evaluate"});
  EXPECT_EQ(suggest("--hiden", kOptions), Names{"--hidden"});
  EXPECT_EQ(suggest("--hidden-", kOptions), Names{"--hidden"});
  EXPECT_EQ(suggest("--epoch", kOptions), Names{"--epochs"});
  EXPECT_EQ(suggest("--laeyrs", kOptions), Names{"--layers"});
  EXPECT_EQ(suggest("-hidden", kOptions), Names{"--hidden"});
  // A swap is one edit: a short word, allowed one, still finds its name.
  EXPECT_EQ(suggest("--rl", kOptions), Names{"--lr"});
}

TEST(Suggest, NothingForFarWords) {
  EXPECT_TRUE(suggest("--frobnicate", kOptions).empty());
  EXPECT_TRUE(suggest("xyzzy", kWords).empty());
  EXPECT_TRUE(suggest("--hdn", kOptions).empty());  // 3 edits from --hidden
  EXPECT_TRUE(suggest("", kWords).empty());
  // A short word may be off by one, not two: "--xy" is not "--lr".
  EXPECT_TRUE(suggest("--xy", kOptions).empty());
  EXPECT_EQ(suggest("--lt", kOptions), Names{"--lr"});
  // One character alone says too little.
  EXPECT_TRUE(suggest("-x", {"-q"}).empty());
}

TEST(Suggest, TiesGiveEveryClosestNameInOrder) {
  EXPECT_EQ(suggest("--bits-xwd", kOptions), (Names{"--bits-fwd", "--bits-bwd"}));
  EXPECT_EQ(suggest("sweeq", kWords), Names{"sweep"});
  EXPECT_EQ(suggest("plam", {"plan", "slam", "spam"}), (Names{"plan", "slam"}));
  // A nearer name wins over ones further away.
  EXPECT_EQ(suggest("--seeds", kOptions), Names{"--seed"});
}

TEST(Suggest, APrefixWhenNothingIsWithinReach) {
  EXPECT_EQ(suggest("--bits", kOptions), (Names{"--bits-fwd", "--bits-bwd"}));
  EXPECT_EQ(suggest("exp", kWords), Names{"export-model"});
  EXPECT_TRUE(suggest("-", kOptions).empty());
}

TEST(Suggest, QuotedAlternativesReadAsASentence) {
  EXPECT_EQ(quoted_alternatives({}), "");
  EXPECT_EQ(quoted_alternatives({"a"}), "'a'");
  EXPECT_EQ(quoted_alternatives({"a", "b"}), "'a' or 'b'");
  EXPECT_EQ(quoted_alternatives({"a", "b", "c"}), "'a', 'b' or 'c'");
}

TEST(DidYouMean, TheEndOfAnErrorMessage) {
  EXPECT_EQ(did_you_mean("trian", kWords), "; did you mean 'train'?");
  EXPECT_EQ(did_you_mean("--bits-xwd", kOptions), "; did you mean '--bits-fwd' or '--bits-bwd'?");
  EXPECT_EQ(did_you_mean("--bits", kOptions), "; did you mean '--bits-fwd' or '--bits-bwd'?");
  EXPECT_EQ(did_you_mean("xyzzy", kWords), "");
  EXPECT_EQ(did_you_mean("train", {}), "");
}

}  // namespace
}  // namespace halogen::cli
