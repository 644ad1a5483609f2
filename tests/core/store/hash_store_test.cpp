#include <gtest/gtest.h>

#include <thread>

#include "ddp/error.h"
#include "ddp/hash_store.h"
#include "ddp/prefix_store.h"
#include "store_contract.h"

namespace ddp {

TEST(HashStore, FollowsTheStoreContract) {
  auto store = std::make_shared<HashStore>();
  test::check_store_contract(*store);
}

TEST(PrefixStore, FollowsTheStoreContract) {
  auto base = std::make_shared<HashStore>();
  PrefixStore store("job", base);
  test::check_store_contract(store);
}

TEST(PrefixStore, KeepsNamespacesApart) {
  auto base = std::make_shared<HashStore>();
  PrefixStore a("a", base), b("b", base);
  a.set("k", "from a");
  b.set("k", "from b");
  EXPECT_EQ(a.get("k"), "from a");
  EXPECT_EQ(b.get("k"), "from b");
  EXPECT_EQ(base->get("a/k"), "from a");
  EXPECT_FALSE(b.check({"only-in-a"}));
  EXPECT_EQ(a.num_keys(), 2);  // the underlying store's count, as PyTorch
}

TEST(HashStore, GetWakesWhenAnotherThreadSets) {
  HashStore store;
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    store.set("late", "value");
  });
  EXPECT_EQ(store.get("late"), "value");
  setter.join();
}

}  // namespace ddp
