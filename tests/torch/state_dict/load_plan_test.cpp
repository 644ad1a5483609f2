// Which tensors of a file load into which of a module: PyTorch's report, the prefix option and
// DDP's "module." prefix, as a pure function of names and shapes.
#include <gtest/gtest.h>

#include "state_dict/load_plan.h"

namespace ddp::detail {
namespace {

using Infos = std::vector<TensorInfo>;
using Copies = std::vector<std::pair<std::size_t, std::size_t>>;
using Names = std::vector<std::string>;

const Infos kModule = {{"conv.weight", {4, 1, 3, 3}, "float32"},
                       {"conv.bias", {4}, "float32"},
                       {"bn.running_mean", {4}, "float32"},
                       {"bn.num_batches_tracked", {}, "int64"}};

TEST(LoadPlan, MatchesByNameInTheModulesOrder) {
  const Infos file = {kModule[3], kModule[1], kModule[0], kModule[2]};
  const auto plan = plan_load(kModule, file, "");
  EXPECT_TRUE(plan.report.ok()) << plan.report.to_string();
  EXPECT_EQ(plan.copies, (Copies{{0, 2}, {1, 1}, {2, 3}, {3, 0}}));
  EXPECT_TRUE(plan.report.notes.empty());
}

TEST(LoadPlan, ReportsMissingUnexpectedAndMismatchedKeysByName) {
  const Infos file = {{"conv.weight", {8, 1, 3, 3}, "float32"},
                      {"conv.bias", {4}, "float64"},
                      {"fc.weight", {10, 4}, "float32"},
                      {"bn.num_batches_tracked", {}, "int64"}};
  const auto plan = plan_load(kModule, file, "");
  EXPECT_FALSE(plan.report.ok());
  EXPECT_EQ(plan.report.missing_keys, (Names{"bn.running_mean"}));
  EXPECT_EQ(plan.report.unexpected_keys, (Names{"fc.weight"}));
  ASSERT_EQ(plan.report.shape_mismatches.size(), 1u);
  EXPECT_EQ(plan.report.shape_mismatches[0].key, "conv.weight");
  EXPECT_EQ(plan.report.shape_mismatches[0].in_file, (std::vector<std::int64_t>{8, 1, 3, 3}));
  EXPECT_EQ(plan.report.shape_mismatches[0].in_module, (std::vector<std::int64_t>{4, 1, 3, 3}));
  EXPECT_EQ(plan.copies, (Copies{{1, 1}, {3, 3}}));
  EXPECT_EQ(plan.report.notes, (Names{"\"conv.bias\": float64 in the file, converted to float32"}));
  const auto text = plan.report.to_string();
  EXPECT_NE(text.find("missing keys (in the module, not in the file): \"bn.running_mean\""), std::string::npos) << text;
  EXPECT_NE(text.find("unexpected keys (in the file, not in the module): \"fc.weight\""), std::string::npos) << text;
  EXPECT_NE(text.find("shape mismatch: \"conv.weight\" is [8, 1, 3, 3] in the file, [4, 1, 3, 3] in the module"),
            std::string::npos)
      << text;
}

TEST(LoadPlan, StripsDdpsModulePrefixOnlyWhenEveryKeyHasIt) {
  Infos file;
  for (const auto& info : kModule) file.push_back({"module." + info.name, info.sizes, info.dtype});
  auto plan = plan_load(kModule, file, "");
  EXPECT_TRUE(plan.report.ok()) << plan.report.to_string();
  EXPECT_EQ(plan.copies.size(), 4u);
  ASSERT_EQ(plan.report.notes.size(), 1u);
  EXPECT_NE(plan.report.notes[0].find("stripped DDP's \"module.\" prefix"), std::string::npos);
  // One key without it: nothing is stripped.
  file.push_back({"extra", {1}, "float32"});
  plan = plan_load(kModule, file, "");
  EXPECT_EQ(plan.report.missing_keys.size(), 4u);
  EXPECT_EQ(plan.report.unexpected_keys.size(), 5u);
  // A module whose own keys start with "module." (a DDP model itself) keeps them.
  Infos ddp_module;
  for (const auto& info : kModule) ddp_module.push_back({"module." + info.name, info.sizes, info.dtype});
  file.pop_back();
  plan = plan_load(ddp_module, file, "");
  EXPECT_TRUE(plan.report.ok());
  EXPECT_TRUE(plan.report.notes.empty());
}

TEST(LoadPlan, APrefixSelectsAndStripsPartOfTheFile) {
  Infos file = {{"encoder.conv.weight", {4, 1, 3, 3}, "float32"},
                {"encoder.conv.bias", {4}, "float32"},
                {"decoder.conv.weight", {1, 4, 3, 3}, "float32"}};
  const Infos part = {kModule[0], kModule[1]};
  auto plan = plan_load(part, file, "encoder.");
  EXPECT_TRUE(plan.report.ok()) << plan.report.to_string();
  EXPECT_EQ(plan.copies, (Copies{{0, 0}, {1, 1}}));
  EXPECT_EQ(plan.report.notes, (Names{"ignored 1 keys of the file that do not begin with the prefix \"encoder.\""}));
  plan = plan_load(part, file, "head.");
  EXPECT_EQ(plan.report.missing_keys.size(), 2u);
  EXPECT_TRUE(plan.report.unexpected_keys.empty());
  EXPECT_EQ(plan.report.notes,
            (Names{"no key of the file begins with the prefix \"head.\" (the first is \"encoder.conv.weight\")"}));
}

}  // namespace
}  // namespace ddp::detail
