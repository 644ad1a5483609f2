// Which command the workers run, and the errors for a program that cannot run.
#include <gtest/gtest.h>

#include "cli/command.h"
#include "ddp/error.h"
#include "support/launch.h"
#include "support/expect_error.h"

namespace ddp::launcher {
namespace {

Command resolve(const std::vector<std::string>& args, std::map<std::string, std::string> env = {}) {
  if (!env.count("PATH")) env["PATH"] = "/usr/bin:/bin";
  return resolve_command(parse_command_line(args), map_env(env));
}

std::string error_of(const std::vector<std::string>& args, std::map<std::string, std::string> env = {}) {
  return ::ddp::test::expect_error<InvalidArgument>([&] { resolve(args, std::move(env)); }, {});
}

TEST(Command, AProgramByPathOrName) {
  test::TempDir dir;
  test::write_file(dir.file("train"), "#!/bin/sh\n", true);
  const Command by_path = resolve({dir.file("train"), "--lr", "1"});
  EXPECT_EQ(by_path.path, dir.file("train"));
  EXPECT_EQ(by_path.argv, (std::vector<std::string>{dir.file("train"), "--lr", "1"}));
  const Command by_name = resolve({"train"}, {{"PATH", "/nonexistent:" + dir.path()}});
  EXPECT_EQ(by_name.path, dir.file("train"));
  EXPECT_EQ(by_name.argv[0], "train");
}

TEST(Command, PythonScriptsAndModules) {
  test::TempDir dir;
  test::write_file(dir.file("train.py"), "print(1)\n");
  test::write_file(dir.file("py"), "#!/bin/sh\n", true);
  const Command script = resolve({dir.file("train.py"), "a"}, {{"DDPRUN_PYTHON", dir.file("py")}});
  EXPECT_EQ(script.path, dir.file("py"));
  EXPECT_EQ(script.argv, (std::vector<std::string>{dir.file("py"), dir.file("train.py"), "a"}));
  const Command module = resolve({"-m", "pkg.train", "a"}, {{"DDPRUN_PYTHON", dir.file("py")}});
  EXPECT_EQ(module.argv, (std::vector<std::string>{dir.file("py"), "-m", "pkg.train", "a"}));
  // Without DDPRUN_PYTHON: python3 from PATH.
  EXPECT_EQ(resolve({dir.file("train.py")}, {{"PATH", dir.path() + ":/usr/bin"}}).argv[0], "python3");
  // --no_python: the script runs directly, so it must be executable.
  test::write_file(dir.file("run.py"), "#!/usr/bin/env python3\n", true);
  EXPECT_EQ(resolve({"--no_python", dir.file("run.py")}).path, dir.file("run.py"));
}

TEST(Command, MissingProgram) {
  auto message = error_of({"/no/such/train"});
  EXPECT_NE(message.find("\"/no/such/train\" does not exist"), std::string::npos) << message;
  message = error_of({"no-such-program-xyz"});
  EXPECT_NE(message.find("not found in PATH"), std::string::npos) << message;
  EXPECT_NE(message.find("./no-such-program-xyz"), std::string::npos) << message;
}

TEST(Command, NotExecutable) {
  test::TempDir dir;
  test::write_file(dir.file("train"), "data");
  auto message = error_of({dir.file("train")});
  EXPECT_NE(message.find("is not executable"), std::string::npos) << message;
  EXPECT_NE(message.find("chmod +x"), std::string::npos) << message;
  message = error_of({dir.path()});
  EXPECT_NE(message.find("is a folder"), std::string::npos) << message;
  test::write_file(dir.file("t.py"), "print(1)\n");
  message = error_of({"--no_python", dir.file("t.py")});
  EXPECT_NE(message.find("drop --no_python"), std::string::npos) << message;
}

TEST(Command, MissingInterpreterOrScript) {
  test::TempDir dir;
  test::write_file(dir.file("t.py"), "print(1)\n");
  auto message = error_of({dir.file("t.py")}, {{"DDPRUN_PYTHON", "/no/python9"}});
  EXPECT_NE(message.find("Python interpreter (DDPRUN_PYTHON)"), std::string::npos) << message;
  message = error_of({dir.file("missing.py")}, {{"DDPRUN_PYTHON", "/bin/sh"}});
  EXPECT_NE(message.find("the script"), std::string::npos) << message;
}

TEST(Command, AShellCommandLineRunsTheSameWords) {
  EXPECT_EQ(shell_command({"ddprun", "--nproc_per_node=2", "./train", "--out", "/tmp/x,y:z@1%"}),
            "ddprun --nproc_per_node=2 ./train --out /tmp/x,y:z@1%");
  const std::vector<std::string> words = {"./train", "two words", "it's", "", "$HOME", "a\nb"};
  const std::string line = shell_command(words);
  EXPECT_EQ(line, "./train 'two words' 'it'\\''s' '' '$HOME' 'a\nb'");
  // The shell reads it back as the same words.
  test::TempDir dir;
  const std::string script = dir.file("words.sh");
  test::write_file(script, "for w in \"$@\"; do printf '[%s]' \"$w\"; done\n", true);
  test::Launch sh({"/bin/sh", "-c", script + " " + shell_command({"two words", "it's", "", "$HOME", "a\nb"})});
  ASSERT_TRUE(sh.wait(std::chrono::seconds(10)));
  EXPECT_EQ(sh.out(), "[two words][it's][][$HOME][a\nb]");
}

}  // namespace
}  // namespace ddp::launcher
