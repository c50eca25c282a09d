// fanout.h: `convt3d tune --devices`: one worker process per GPU, (problem, mode) pairs handed out
// one at a time by the parent, results merged into one table and one cache file.
//
// The parent re-executes the CLI (/proc/self/exe) once per device with the hidden option
// --worker-device N; each worker builds the same pair list from the same arguments, opens the
// shared cache and serves pairs: the parent writes a pair's index to the worker's stdin, the
// worker answers on its stdout with one JSON line per pair; its stderr (progress, the engine's
// log) is forwarded by the parent with a "gpuN: " prefix. A worker that dies loses only the pair
// it was working on; the parent starts another on its device (at most `max_restarts` times) and
// the other workers go on.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tools/cli_util.h"

namespace convt3d::cli {

// --devices: "all" (0 .. gpu_count-1) or a comma-separated list of distinct decimal ordinals, in
// the order given. gpu_count < 0: unknown (no driver), then "all" is refused and ordinals are not
// checked against it. kInvalidArgument naming the flag and the bad token.
StatusOr<std::vector<int>> ParseDevices(const std::string& text, int gpu_count);

// The hand-out bookkeeping, without processes: pairs go out one at a time, in `order` (default:
// list order), to whichever worker asks first, so a slow pair holds up only its own worker.
class Dispatcher {
 public:
  Dispatcher(int pairs, int workers, int max_restarts, std::vector<int> order = {});
  // The next pair for `worker`, which is idle; nullopt when none is left to start.
  std::optional<int> Next(int worker);
  // `worker` reported its pair (success or failure alike).
  void Reported(int worker);
  // `worker` exited. Returns the pair it was working on (lost: reported failed, not retried: it
  // may be what crashed it), and sets *restart when another worker should take its place (it had
  // started serving, pairs are left to start, and its device has restarts left).
  std::optional<int> Exited(int worker, bool served, bool* restart);
  // The pair `worker` is working on.
  std::optional<int> InFlight(int worker) const { return in_flight_[worker]; }
  // Pairs never handed out (left when every worker is gone).
  std::vector<int> Unstarted() const;
  int handed_out() const { return next_; }

 private:
  int pairs_, next_ = 0, max_restarts_;
  std::vector<int> order_;  // the pairs' hand-out order
  std::vector<std::optional<int>> in_flight_;
  std::vector<int> restarts_;
};

// What one pair came to, on the worker side and in the merged output.
struct PairOutcome {
  bool ok = false;
  std::vector<std::string> row;  // the table row, as the one-process tune prints it
  OJson result;                  // its entry of --json's "results"
  int compiles = 0;              // NVRTC compiles it ran
  int device = -1;               // filled in by the parent
};

// ---- Worker side ----------------------------------------------------------------------------
struct WorkerHooks {
  // Opens the engine (or whatever the pairs need); an error ends the worker, and the parent
  // reports it as that device's failure.
  std::function<Status()> start;
  std::function<PairOutcome(int pair)> run;
};
// Serves pairs of a list of `pairs` entries until stdin closes; returns the exit code. Standard
// output carries the protocol only: anything else printed to it goes to stderr.
int ServeWorker(int device, int pairs, const WorkerHooks& hooks);

// ---- Parent side ----------------------------------------------------------------------------
struct FanoutSpec {
  std::vector<std::string> worker_argv;  // argv[1..] of a worker, without --worker-device
  std::vector<int> devices;
  std::vector<std::string> names;  // the pairs' display names, for messages
  // The hand-out order (pair indices; empty: list order). Longest first shortens the tail where
  // one GPU finishes a long pair while the others have nothing left.
  std::vector<int> order;
  std::string label = "gpu";  // "gpu" (tuning) or "slot" (compile-only)
  int max_restarts = 2;
};
// Indices of `cost` by decreasing cost, ties in list order (a longest-first hand-out order).
std::vector<int> LongestFirst(const std::vector<double>& cost);

// Runs the workers until every pair is reported, lost or left without a worker; outcomes in pair
// order (failed ones carry an error result). Prints each worker's stderr lines with its label.
// *worker_errors (when given) gets a line per worker that failed outside a pair (could not
// start, or exited with an error status after its pairs).
std::vector<PairOutcome> RunFanout(const FanoutSpec& spec,
                                   std::vector<std::string>* worker_errors = nullptr);

// The command line this process was started with (main() records it), to re-execute as workers.
void SetCommandLine(int argc, char** argv);
const std::vector<std::string>& CommandLine();
// `args` without the options named in `drop` (as "--name value" or "--name=value").
std::vector<std::string> WithoutOptions(const std::vector<std::string>& args,
                                        const std::vector<std::string>& drop);

}  // namespace convt3d::cli
