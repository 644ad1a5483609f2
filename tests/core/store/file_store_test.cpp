#include "ddp/file_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <thread>

#include "ddp/error.h"
#include "store_contract.h"
#include "support/expect_error.h"
#include "support/launch.h"

namespace ddp {

using namespace std::chrono_literals;

TEST(FileStore, FollowsTheStoreContract) {
  test::TempDir dir;
  FileStore store(dir.file("store"));
  test::check_store_contract(store);
}

TEST(FileStore, TwoStoresOnOneFileShareKeysAndWakeUpsAndTheLastRemovesIt) {
  test::TempDir dir;
  const std::string path = dir.file("shared");
  {
    FileStore waiter(path);
    auto setter = waiter.clone();  // its own FileStore on the same file, as another process has
    std::thread t([&] {
      std::this_thread::sleep_for(50ms);
      setter->set("late", "here");
    });
    EXPECT_EQ(waiter.get("late", 5s), "here");
    t.join();
    EXPECT_EQ(setter->add("n", 2), 2);
    EXPECT_EQ(waiter.add("n", 3), 5);
    EXPECT_EQ(waiter.num_keys(), setter->num_keys());
    setter.reset();
    EXPECT_EQ(::access(path.c_str(), F_OK), 0) << "removed while a store still used it";
    EXPECT_EQ(waiter.get("n"), "5");
  }
  EXPECT_NE(::access(path.c_str(), F_OK), 0) << "the file outlived its last store";
}

TEST(FileStore, APathItCannotOpenIsAClearError) {
  test::TempDir dir;
  test::expect_error<IOError>([&] { FileStore store(dir.file("missing-folder/store")); },
                              {"FileStore: cannot open", "missing-folder/store", "The directory must exist"});
  test::expect_error<InvalidArgument>([] { FileStore store(""); }, {"FileStore: the path is empty"});
}

}  // namespace ddp
