// Running aps_train like the tools people already use (torchrun, DeepSpeed, mmsegmentation):
// a run directory, --resume auto, checkpoints every N steps, the config stored in checkpoints,
// preemption by SIGTERM/SIGUSR1 (also under mpirun) with a bit-identical resume, initial
// weights from a torchvision-named file, and the thread count per rank.
#include "framework/io/Safetensors.h"
#include "framework/train/Checkpoint.h"
#include "framework/train/Config.h"
#include "framework/train/Threads.h"
#include "framework/train/Trainer.h"
#include "models/ModelRegistry.h"
#include "models/Weights.h"
#include "tests/common/Datasets.h"
#include "tests/common/ErrorMessage.h"
#include "tests/train/ChildProcess.h"
#include "tests/train/TrainerTestSupport.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

namespace aps::train {
namespace {

namespace fs = std::filesystem;
using testing::ChildProcess;
using testing::readText;

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("aps-rundir-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// 24 steps: 2 ranks x batch 8 over 48 images (3 steps per epoch), 8 epochs, a checkpoint per epoch.
std::string writeConfig(const fs::path& dir) {
  const fs::path path = dir / "tiny.yaml";
  std::ofstream(path) << testing::tinyConfigText("{level: info, progress: false, interval: 1}",
                                                 "{interval_epochs: 1, keep: 2}");
  return path.string();
}

std::vector<std::string> train(const std::string& config, const fs::path& out, std::vector<std::string> extra = {}) {
  std::vector<std::string> args{APS_TRAIN_BINARY, "--config", config, "--set", "output_dir=" + out.string()};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

std::vector<std::string> underMpirun(std::vector<std::string> args) {
  args.insert(args.end(), {"--set", "comm.backend=mpi", "--set", "comm.world_size=1"});
  args.insert(args.begin(), {MPIEXEC_BINARY, "--allow-run-as-root", "--oversubscribe", "-np", "2"});
  return args;
}

const ChildProcess::Options kEnvironment{{"OMP_NUM_THREADS=1", "OMP_WAIT_POLICY=passive"}, -1};

// The step of the newest "train" record in a metrics file (0 when there is none yet).
int64_t loggedStep(const fs::path& metrics) {
  std::ifstream in(metrics);
  int64_t step = 0;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.value("type", "") == "train") step = j.value("step", int64_t{0});
  }
  return step;
}

NamedTensors finalWeights(const fs::path& out) {
  return io::loadSafetensors((out / "checkpoints" / "final.safetensors").string()).tensors;
}

// Runs `args` to the end; returns the exit code (the output goes to `log`).
int runToEnd(const std::vector<std::string>& args, const fs::path& log) {
  ChildProcess run(args, log.string(), kEnvironment);
  EXPECT_TRUE(run.waitFor(std::chrono::minutes(5))) << readText(log.string());
  return run.exitCode();
}

// Starts `args`, sends `signal` once the run has logged step `atStep`, and expects the
// preemption exit code and the preemption line; then --resume auto finishes the run.
void preemptThenResume(const std::vector<std::string>& args, const std::vector<std::string>& resumeArgs,
                       const fs::path& out, int signal, bool wholeGroup) {
  const fs::path log = out.string() + ".log";
  {
    ChildProcess run(args, log.string(), kEnvironment);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(3);
    while (loggedStep(out / "metrics.jsonl") < 5 && !run.poll() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ASSERT_FALSE(run.poll()) << "the run ended before it could be preempted: " << readText(log.string());
    if (wholeGroup) {
      run.kill(signal);  // mpirun and its ranks, as a scheduler signals a job
    } else {
      ::kill(run.pid(), signal);
    }
    ASSERT_TRUE(run.waitFor(std::chrono::minutes(2))) << readText(log.string());
    const std::string text = readText(log.string());
    EXPECT_EQ(run.exitCode(), 75) << text;
    EXPECT_NE(text.find("preempted: signal " + std::to_string(signal)), std::string::npos) << text;
  }
  const auto checkpoints = listCheckpoints((out / "checkpoints").string());
  ASSERT_FALSE(checkpoints.empty());
  const int64_t stoppedAt = checkpointStep(checkpoints.back());
  EXPECT_GE(stoppedAt, 5);
  EXPECT_LT(stoppedAt, 24) << "the signal arrived after the run had ended";
  EXPECT_EQ(runToEnd(resumeArgs, out.string() + ".resumed.log"), 0) << readText(out.string() + ".resumed.log");
  EXPECT_NE(readText(out.string() + ".resumed.log").find("--resume auto: resuming"), std::string::npos);
}

TEST(Preemption, SigtermStopsAfterAStepCheckpointsAndResumesBitIdentically) {
  APS_REQUIRE_FASHION_MNIST();
  const fs::path root = scratch("sigterm");
  const std::string config = writeConfig(root);
  ASSERT_EQ(runToEnd(train(config, root / "reference"), root / "reference.log"), 0);
  const fs::path out = root / "preempted";
  const auto args = train(config, out, {"--resume", "auto"});  // the first start finds nothing: fresh
  preemptThenResume(args, args, out, SIGTERM, false);
  std::string diff;
  EXPECT_TRUE(testing::bitIdentical(finalWeights(root / "reference"), finalWeights(out), &diff)) << diff;
  fs::remove_all(root);
}

TEST(Preemption, Sigusr1UnderMpirunStopsEveryRankAndResumesBitIdentically) {
  APS_REQUIRE_FASHION_MNIST();
  const fs::path root = scratch("mpi");
  const std::string config = writeConfig(root);
  ASSERT_EQ(runToEnd(underMpirun(train(config, root / "reference", {"--set", "threads=0"})), root / "reference.log"), 0)
      << readText((root / "reference.log").string());
  const fs::path out = root / "preempted";
  const auto args = underMpirun(train(config, out, {"--resume", "auto"}));
  preemptThenResume(args, args, out, SIGUSR1, true);
  std::string diff;
  EXPECT_TRUE(testing::bitIdentical(finalWeights(root / "reference"), finalWeights(out), &diff)) << diff;
  // Thread defaults under mpirun: OMP_NUM_THREADS wins; without it the node's cores are shared.
  EXPECT_NE(readText((root / "reference.log").string()).find("1 thread per rank (OMP_NUM_THREADS)"), std::string::npos);
  const fs::path dry = root / "dry.log";
  ChildProcess check(underMpirun(train(config, root / "dry", {"--set", "threads=0", "--dry-run"})), dry.string(),
                     {{"OMP_NUM_THREADS=", "OMP_WAIT_POLICY=passive"}, -1});
  ASSERT_TRUE(check.waitFor(std::chrono::minutes(2)));
  EXPECT_EQ(check.exitCode(), 0) << readText(dry.string());
  EXPECT_NE(readText(dry.string()).find(" cores of the node / 2 ranks on it)"), std::string::npos)
      << readText(dry.string());
  EXPECT_FALSE(fs::exists(root / "dry")) << "a dry run creates no run directory";
  fs::remove_all(root);
}

// mpirun without ceremony: a config written for the simulator (comm: {backend: sim,
// world_size: 2}) trains as mpirun's ranks with no --set; a --set that asks for the simulator
// with several ranks per process is refused, naming it and the launcher.
TEST(Launcher, MpirunTrainsTheConfigAsItsRanksAndRefusesASimulatorSet) {
  APS_REQUIRE_FASHION_MNIST();
  const fs::path root = scratch("launcher");
  const std::string config = writeConfig(root);
  std::vector<std::string> plain = train(config, root / "plain", {"--set", "max_steps=2"});
  plain.insert(plain.begin(), {MPIEXEC_BINARY, "--allow-run-as-root", "--oversubscribe", "-np", "2"});
  ASSERT_EQ(runToEnd(plain, root / "plain.log"), 0) << readText((root / "plain.log").string());
  const std::string log = readText((root / "plain.log").string());
  EXPECT_NE(log.find("comm.backend: mpi, 2 ranks (launched by mpirun (Open MPI)); the config's comm.backend: sim with "
                     "world_size 2 does not apply"),
            std::string::npos)
      << log;
  const TrainConfig saved = loadConfig((root / "plain" / "config.yaml").string());
  EXPECT_EQ(saved.comm.backend, "mpi");
  EXPECT_EQ(saved.comm.worldSize, 1);

  std::vector<std::string> sim = train(config, root / "sim", {"--set", "comm.backend=sim", "--set", "max_steps=2"});
  sim.insert(sim.begin(), {MPIEXEC_BINARY, "--allow-run-as-root", "--oversubscribe", "-np", "2"});
  EXPECT_NE(runToEnd(sim, root / "sim.log"), 0);
  EXPECT_NE(readText((root / "sim.log").string())
                .find("--set comm.backend=sim asks for comm.backend: sim with world_size 2 under mpirun (Open MPI) "
                      "with 2 processes"),
            std::string::npos)
      << readText((root / "sim.log").string());
  fs::remove_all(root);
}

// max_steps lays the LR schedule out over its steps; a resume that changes it says so.
// A job requeued on another allocation: 4 simulated ranks x 4 (global 16) resume as 2 real
// ranks under mpirun with keep_global_batch (2 x 8); refused without it.
TEST(Launcher, MpirunResumesACheckpointOfAnotherWorldSizeWhenAsked) {
  APS_REQUIRE_FASHION_MNIST();
  const fs::path root = scratch("world");
  const std::string config = writeConfig(root);
  const fs::path out = root / "run";
  ASSERT_EQ(runToEnd(train(config, out, {"--set", "max_steps=3", "--set", "comm.world_size=4", "--set",
                                         "data.batch_size=4"}),
                     root / "sim.log"),
            0)
      << readText((root / "sim.log").string());
  std::vector<std::string> resume = train(config, out, {"--set", "max_steps=6", "--resume", "auto"});
  resume.insert(resume.begin(), {MPIEXEC_BINARY, "--allow-run-as-root", "--oversubscribe", "-np", "2"});
  EXPECT_NE(runToEnd(resume, root / "refused.log"), 0);
  EXPECT_NE(readText((root / "refused.log").string()).find("checkpoint.world_change"), std::string::npos)
      << readText((root / "refused.log").string());
  resume.insert(resume.end(), {"--set", "checkpoint.world_change=keep_global_batch"});
  ASSERT_EQ(runToEnd(resume, root / "mpi.log"), 0) << readText((root / "mpi.log").string());
  const std::string log = readText((root / "mpi.log").string());
  EXPECT_NE(log.find("on 2 ranks x batch 8 where it was written by 4 ranks x batch 4"), std::string::npos) << log;
  EXPECT_EQ(loggedStep(out / "metrics.jsonl"), 6);
  fs::remove_all(root);
}

TEST(RunDirectory, AResumeWithAnotherMaxStepsSaysTheScheduleChanges) {
  APS_REQUIRE_FASHION_MNIST();
  const fs::path root = scratch("maxsteps");
  const std::string config = writeConfig(root);
  const fs::path out = root / "run";
  ASSERT_EQ(runToEnd(train(config, out, {"--set", "max_steps=3"}), root / "first.log"), 0)
      << readText((root / "first.log").string());
  ASSERT_EQ(runToEnd(train(config, out, {"--set", "max_steps=6", "--resume", "auto"}), root / "second.log"), 0)
      << readText((root / "second.log").string());
  const std::string log = readText((root / "second.log").string());
  EXPECT_NE(log.find("at step 3 with 6 steps in all where its run had 3 (epochs or max_steps changed): the LR schedule "
                     "is laid out over 6 steps from here on"),
            std::string::npos)
      << log;
  // The same length again: no such line.
  ASSERT_EQ(runToEnd(train(config, root / "same", {"--set", "max_steps=3"}), root / "third.log"), 0);
  ASSERT_EQ(runToEnd(train(config, root / "same", {"--set", "max_steps=3", "--resume", "auto"}), root / "fourth.log"),
            0);
  EXPECT_EQ(readText((root / "fourth.log").string()).find("the LR schedule is laid out"), std::string::npos);
  fs::remove_all(root);
}

TEST(RunDirectory, HoldsTheConfigLogMetricsCheckpointsAndStepCheckpoints) {
  APS_REQUIRE_FASHION_MNIST();
  const fs::path root = scratch("contents");
  const fs::path out = root / "run";
  ASSERT_EQ(
      runToEnd(train(writeConfig(root), out,
                     {"--set", "max_steps=8", "--set", "checkpoint.interval_steps=2", "--set", "checkpoint.keep=10"}),
               root / "run.log"),
      0)
      << readText((root / "run.log").string());
  // The resolved config, re-loadable, with the paths it used.
  const TrainConfig saved = loadConfig((out / "config.yaml").string());
  EXPECT_EQ(saved.outputDir, out.string());
  EXPECT_EQ(saved.checkpoint.dir, (out / "checkpoints").string());
  EXPECT_EQ(saved.logging.metricsFile, (out / "metrics.jsonl").string());
  EXPECT_EQ(saved.maxSteps, 8);
  // The log file holds what stderr showed, the metrics carry timestamps.
  const std::string log = readText((out / "train.log").string());
  EXPECT_NE(log.find("final weights"), std::string::npos) << log;
  // It starts where the terminal does: the lines before the run directory existed are in it.
  EXPECT_NE(log.find("1 thread per rank"), std::string::npos) << log;
  EXPECT_LT(log.find("1 thread per rank"), log.find("run directory")) << log;
  // Epochs count from 1 in train and evaluation lines alike (3 steps per epoch, 8 steps: 3
  // epochs), and every train line gives the elapsed time and the ETA.
  EXPECT_NE(log.find("epoch 1/3 step 1/8 loss"), std::string::npos) << log;
  EXPECT_NE(log.find("epoch 3/3 step 8/8 loss"), std::string::npos) << log;
  EXPECT_NE(log.find("final epoch 3/3 step 8/8: test top-1"), std::string::npos) << log;
  EXPECT_NE(log.find(" elapsed 0:00:"), std::string::npos) << log;
  EXPECT_NE(log.find(" ETA 0:00:"), std::string::npos) << log;
  std::ifstream metrics(out / "metrics.jsonl");
  int records = 0;
  for (std::string line; std::getline(metrics, line); ++records) {
    const auto j = nlohmann::json::parse(line);
    ASSERT_TRUE(j.contains("time")) << line;
    EXPECT_EQ(j["time"].get<std::string>().size(), 24u) << line;  // 2026-12-01T19:06:40.517Z
  }
  EXPECT_GT(records, 8);
  // Every 2 steps and at every epoch end (3 steps): 2, 3, 4, 6, 8.
  std::vector<int64_t> steps;
  for (const auto& path : listCheckpoints((out / "checkpoints").string())) steps.push_back(checkpointStep(path));
  EXPECT_EQ(steps, (std::vector<int64_t>{2, 3, 4, 6, 8}));
  EXPECT_TRUE(fs::exists(out / "checkpoints" / "final.safetensors"));
  fs::remove_all(root);
}

TEST(RunDirectory, ResumeNamesTheKeysThatDifferFromTheCheckpoint) {
  APS_REQUIRE_FASHION_MNIST();
  const fs::path root = scratch("differs");
  const std::string config = writeConfig(root);
  ASSERT_EQ(runToEnd(train(config, root / "run", {"--set", "max_steps=3"}), root / "a.log"), 0);
  // A resumed run may change epochs, logging, checkpoints; not the optimizer.
  ASSERT_EQ(runToEnd(train(config, root / "run", {"--set", "max_steps=4", "--resume", "auto"}), root / "b.log"), 0)
      << readText((root / "b.log").string());
  EXPECT_NE(
      runToEnd(train(config, root / "run", {"--set", "max_steps=6", "--set", "optimizer.lr=0.2", "--resume", "auto"}),
               root / "c.log"),
      0);
  const std::string text = readText((root / "c.log").string());
  EXPECT_NE(text.find("optimizer.lr: 0.05 in the checkpoint, 0.2 here"), std::string::npos) << text;
  fs::remove_all(root);
}

TEST(RunDirectory, DefaultIsRunsConfigNameTimeAndResumeAutoNeedsANamedOne) {
  APS_REQUIRE_FASHION_MNIST();
  const fs::path root = scratch("default");
  const fs::path cwd = fs::current_path();
  fs::current_path(root);
  TrainConfig config = testing::smallConfig("sim", 2, {"max_steps=1", "data.train_samples=32", "output_dir=''"});
  {
    Trainer trainer(config, nullptr);
    trainer.run();
  }
  std::vector<fs::path> runs;
  for (const auto& e : fs::directory_iterator(root / "runs")) runs.push_back(e.path());
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].filename().string().rfind("test-", 0), 0u) << runs[0];  // test.yaml's stem, then the time
  EXPECT_TRUE(fs::exists(runs[0] / "config.yaml"));
  EXPECT_TRUE(fs::exists(runs[0] / "checkpoints" / "final.safetensors"));
  EXPECT_ERROR_NAMES(Trainer(config, nullptr).run("auto"), "output_dir");
  TrainConfig none = testing::smallConfig("sim", 2, {"max_steps=1", "data.train_samples=32", "output_dir=none"});
  Trainer(none, nullptr).run();
  EXPECT_EQ(std::distance(fs::directory_iterator(root / "runs"), fs::directory_iterator()), 1);
  fs::current_path(cwd);
  fs::remove_all(root);
}

TEST(InitFrom, TorchvisionNamedWeightsGoUnderTheBackboneWithAReport) {
  const fs::path root = scratch("init");
  auto resnet = models::createModel("resnet20", {10, 1, 3});
  const std::string file = (root / "resnet20.safetensors").string();
  models::saveWeights(*resnet, file);
  auto fcn = models::createModel("fcn_resnet20", {5, 1, 4});
  const auto report = models::initialFrom(*fcn, file, models::parseKeyRenames("=backbone."));
  EXPECT_GT(report.loaded, 50);
  // The classifier's head in the file has no place in the FCN; the FCN's head is not in the file.
  EXPECT_NE(std::find(report.unexpected.begin(), report.unexpected.end(), "fc.weight"), report.unexpected.end());
  EXPECT_FALSE(report.missing.empty());
  for (const auto& [name, tensor] : fcn->stateDict())
    EXPECT_EQ(name.rfind("backbone.", 0) == 0,
              std::find(report.missing.begin(), report.missing.end(), name) == report.missing.end())
        << name;
  std::string diff;
  NamedTensors loaded, expected = resnet->stateDict();
  for (const auto& [name, tensor] : fcn->stateDict())
    if (name.rfind("backbone.", 0) == 0) loaded.push_back({name.substr(9), tensor});
  std::erase_if(expected, [&](const NamedTensor& e) { return e.name.rfind("fc.", 0) == 0; });
  EXPECT_TRUE(testing::bitIdentical(expected, loaded, &diff)) << diff;
  EXPECT_NE(report.summary().find("unexpected keys (ignored): fc.weight"), std::string::npos) << report.summary();
  // A shared key with another shape is refused by name; a map entry without '=' too.
  auto wide = models::createModel("resnet20", {10, 3, 3});  // 3 input channels: conv1 differs
  EXPECT_ERROR_NAMES(models::initialFrom(*wide, file, {}), "conv1.weight");
  EXPECT_ERROR_NAMES(models::parseKeyRenames("backbone."), "backbone.");
  fs::remove_all(root);
}

TEST(InitFrom, TheTrainerStartsFromTheFileAndRefusesAFileThatMatchesNothing) {
  APS_REQUIRE_FASHION_MNIST();
  const fs::path root = scratch("inittrainer");
  auto source = models::createModel("resnet20", {10, 1, 99});
  const std::string file = (root / "init.safetensors").string();
  models::saveWeights(*source, file);
  TrainConfig config =
      testing::smallConfig("sim", 2, {"max_steps=1", "output_dir=" + (root / "a").string(), "model.init_from=" + file});
  Trainer trainer(config, nullptr);
  std::string diff;
  EXPECT_TRUE(testing::bitIdentical(source->stateDict(), trainer.modelState(), &diff)) << diff;
  TrainConfig nothing = testing::smallConfig("sim", 2,
                                             {"output_dir=none", "model.init_from=" + file,
                                              "model.init_map=conv=unused.conv,layer=unused.layer,"
                                              "bn=unused.bn,fc=unused.fc"});
  EXPECT_ERROR_NAMES(Trainer(nothing, nullptr), "no tensor of the file matches");
  fs::remove_all(root);
}

TEST(Threads, ConfigThenOmpNumThreadsThenTheNodesCoresSharedByItsRanks) {
  EXPECT_EQ(chooseThreads(3, 4, "8", 16).threads, 3);
  EXPECT_EQ(chooseThreads(0, 4, "8", 16).threads, 8);
  EXPECT_EQ(chooseThreads(0, 4, "8", 16).why, "OMP_NUM_THREADS");
  EXPECT_EQ(chooseThreads(0, 4, nullptr, 16).threads, 4);
  EXPECT_EQ(chooseThreads(0, 4, nullptr, 16).why, "16 cores of the node / 4 ranks on it");
  EXPECT_EQ(chooseThreads(0, 4, "", 2).threads, 1);  // oversubscribed: never 0
  EXPECT_EQ(chooseThreads(0, 1, nullptr, 2).threads, 2);
  EXPECT_ERROR_NAMES(chooseThreads(0, 1, "lots", 2), "OMP_NUM_THREADS = 'lots'");
  EXPECT_ERROR_NAMES(chooseThreads(0, 1, "0", 2), "OMP_NUM_THREADS = '0'");
}

}  // namespace
}  // namespace aps::train
